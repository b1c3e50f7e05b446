// Package provider is the port to the messaging provider (a WeCom account
// reached through the wecomapi HTTP API, or any provider with the same
// shape). Adapters classify every failure into a Category, so the sender
// decides what to do from the category alone.
package provider

import (
	"context"
	"errors"
)

// Category classifies a failed send (see DESIGN.md).
type Category string

// Categories. Accepted sends have no category.
const (
	// Retryable: nothing was delivered (timeout before send, 5xx, network,
	// system busy); retry with backoff.
	Retryable Category = "retryable"
	// RateLimited: the provider refused for frequency or concurrency; slow
	// down and retry without using an attempt.
	RateLimited Category = "rate_limited"
	// Permanent: never retry (bad recipient, no permission, content
	// rejected).
	Permanent Category = "permanent"
	// AccountDown: every call of the account fails (token expired or
	// invalid); nothing was delivered. The breaker opens at once.
	AccountDown Category = "account_down"
	// Uncertain: the request went out and no answer came back; the message
	// may have been delivered. Never resend without a status look-up.
	Uncertain Category = "uncertain"
)

// ErrStatusUnsupported is returned by Status when the provider has no
// status look-up.
var ErrStatusUnsupported = errors.New("provider: status look-up not supported")

// Provider sends messages and looks up their status.
type Provider interface {
	// Send delivers one content to one or more recipients of an account.
	// It returns one result per recipient, in order. A call-level failure
	// (network, timeout, account error) is reported as the same result for
	// every recipient, not as an error; err is only for a cancelled ctx or
	// a malformed request.
	Send(ctx context.Context, req SendRequest) (SendResult, error)
	// Status looks up what became of a message key.
	Status(ctx context.Context, req StatusRequest) (Status, error)
}

// SendRequest is one provider call.
type SendRequest struct {
	Account string
	// Keys are the recipients' stable message keys (job + item), in the
	// order of To; the provider uses them as idempotency keys.
	Keys    []string
	To      []string
	Content string
}

// SendResult holds one result per recipient.
type SendResult struct {
	Recipients []RecipientResult
}

// RecipientResult is what happened to one recipient.
type RecipientResult struct {
	Accepted bool
	Category Category // empty when accepted
	Code     string   // provider error code, e.g. "45009"
	Message  string
	MsgID    string
	// AwaitConfirm: the provider accepted the call under MsgID, and its
	// final result comes later (a provider event, or a look-up by MsgID):
	// the item stays submitted until then.
	AwaitConfirm bool
	// EventAccount is the account the provider's events name the call
	// under, when not the call's own (WeChat names a template account
	// "<appid>:<template_id>" by its AppID): the message id is recorded
	// under it.
	EventAccount string
}

// StatusRequest asks about one message key.
type StatusRequest struct {
	Account string
	Key     string
	// MsgID is the provider's message id of the accepted call, when the
	// item has one; a provider that looks up by its own id (WeChat's
	// message/mass/get) needs it.
	MsgID string
}

// Status is what the provider knows of a key.
type Status string

// Statuses.
const (
	StatusDelivered Status = "delivered"
	StatusUnknown   Status = "unknown" // never accepted
)
