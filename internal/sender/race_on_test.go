//go:build race

package sender_test

// propertyRuns bounds the store-backed cases of the property test: the race
// detector slows the pure-Go SQLite about 30×.
const propertyRuns = 15
