package wecomapi

import (
	"net/http"

	"github.com/qunfa/qunfa/internal/provider"
)

// WeCom error codes the adapter knows by name.
const (
	codeOK               = 0
	codeSystemBusy       = -1
	codeInvalidCredent   = 40001 // invalid secret / credential
	codeInvalidRecipient = 40003 // invalid user id
	codeInvalidToken     = 40014 // invalid access token
	codeTokenMissing     = 41001 // access token missing
	codeTokenExpired     = 42001 // access token expired
	codeFrequencyLimit   = 45009 // api frequency out of limit
	codeConcurrencyLimit = 45033 // api concurrent out of limit
	codeRecipientInvalid = 81013 // user/department/tag invalid or unlicensed
)

// permanentCodes are refusals about the recipient, the content or the
// account's permissions: sending the same thing again cannot succeed.
var permanentCodes = map[int]bool{
	codeInvalidRecipient: true,
	40008:                true, // invalid message type
	40058:                true, // invalid parameter
	44004:                true, // empty content
	45002:                true, // content too long
	47001:                true, // data format error
	48002:                true, // API forbidden for this app
	60011:                true, // no privilege to reach the recipient
	60111:                true, // userid not found
	81010:                true, // recipient list empty or over the limit
	codeRecipientInvalid: true,
	86008:                true, // external contact not a customer of this user
}

// accountDownCodes mean every call of the account fails until an operator
// acts (credentials).
var accountDownCodes = map[int]bool{
	codeInvalidCredent: true,
	codeInvalidToken:   true,
	codeTokenMissing:   true,
	codeTokenExpired:   true,
}

// classifyCode maps a non-zero errcode from an answered call to a category.
//
// An errcode the table does not know is Retryable: the provider answered
// and refused, so the message was not delivered (not Uncertain), and a
// retry with backoff is the safe default for a code we cannot judge — the
// attempt budget bounds it and the item ends in the dead-letter list
// (exhausted) with the code kept for an operator, instead of being dropped
// as permanent on a guess.
func classifyCode(code int) provider.Category {
	switch {
	case code == codeFrequencyLimit || code == codeConcurrencyLimit:
		return provider.RateLimited
	case code == codeSystemBusy:
		return provider.Retryable
	case accountDownCodes[code]:
		return provider.AccountDown
	case permanentCodes[code]:
		return provider.Permanent
	default:
		return provider.Retryable
	}
}

// classifyHTTPStatus maps a non-200 HTTP status without a wecomapi errcode
// to a category. A 5xx without an errcode may come from a gateway in front
// of the provider, which answers 502 or 504 (or 500, or a CDN's 52x) after
// the provider took the call: the message may have been delivered, so it
// is Uncertain and settled by a status look-up, never resent blindly. Only
// 503 (not available) and 501 (not implemented) say the call was not
// processed: retry. 401/403 are a credential problem of the account. 429
// is a rate limit. Other 4xx answers are a request the provider will never
// take.
func classifyHTTPStatus(status int) provider.Category {
	switch {
	case status == http.StatusServiceUnavailable || status == http.StatusNotImplemented:
		return provider.Retryable
	case status >= 500:
		return provider.Uncertain
	case status == http.StatusTooManyRequests:
		return provider.RateLimited
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return provider.AccountDown
	default:
		return provider.Permanent
	}
}
