package wecomapp

import (
	"net/http"

	"github.com/qunfa/qunfa/internal/provider"
)

// WeCom global error codes the adapter knows by name.
const (
	codeSystemBusy    = -1
	codeInvalidSecret = 40001
	codeInvalidToken  = 40014
	codeTokenMissing  = 41001
	codeTokenExpired  = 42001
)

// Codes maps every error code of cgi-bin/message/send and gettoken the
// adapter knows (WeCom's global error codes) to its category. A code not
// listed is Retryable: the call was answered and refused, so nothing was
// delivered, and the attempt budget bounds the retries.
var Codes = map[int]provider.Category{
	codeSystemBusy: provider.Retryable,
	// The application and its credentials: every call fails until an
	// operator acts.
	codeInvalidSecret: provider.AccountDown,
	40013:             provider.AccountDown, // invalid corpid
	codeInvalidToken:  provider.AccountDown, // after one refresh
	codeTokenMissing:  provider.AccountDown,
	codeTokenExpired:  provider.AccountDown,
	40056:             provider.AccountDown, // invalid agentid
	48002:             provider.AccountDown, // API forbidden for the application
	60020:             provider.AccountDown, // caller IP not allowed
	301002:            provider.AccountDown, // no permission on the application
	// Frequency.
	45009: provider.RateLimited, // api freq out of limit
	45033: provider.RateLimited, // api concurrent out of limit
	// The recipients or the content.
	40003: provider.Permanent, // invalid userid
	40008: provider.Permanent, // invalid message type
	40058: provider.Permanent, // invalid parameter (e.g. over 1,000 users)
	44004: provider.Permanent, // empty content
	45002: provider.Permanent, // content too long
	47001: provider.Permanent, // data format error
	81013: provider.Permanent, // every user, party and tag invalid or out of the app's range
	82001: provider.Permanent, // the targets are all empty or invalid
}

func classifyCode(code int) provider.Category {
	if cat, ok := Codes[code]; ok {
		return cat
	}
	return provider.Retryable
}

// classifyHTTPStatus is the wecomapi adapter's reading of an HTTP status
// without an errcode: a 5xx other than 501/503 may come from a gateway
// after the call went through (Uncertain).
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
