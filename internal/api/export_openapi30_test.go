package api

// DowngradeOpenAPI exposes the 3.0 renderer to the api_test package.
var DowngradeOpenAPI = downgradeOpenAPI
