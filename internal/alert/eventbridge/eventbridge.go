// Package eventbridge publishes qunfa's alerts to an Amazon EventBridge
// bus with PutEvents: source "qunfa", detail-type the event type, detail
// the event's detail with its tenant (alert.DetailJSON). Rules on the bus
// route them to SNS, e-mail, chat or paging (docs/alerts.md).
package eventbridge

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge/types"

	"github.com/qunfa/qunfa/internal/alert"
)

// PutEvents limits of EventBridge: entries per request, and the request
// size as EventBridge counts it (see entrySize).
const (
	MaxBatchEntries = 10
	MaxBatchBytes   = 256 * 1024
)

// API is the part of the EventBridge client the Publisher uses;
// *eventbridge.Client satisfies it.
type API interface {
	PutEvents(ctx context.Context, in *eventbridge.PutEventsInput, optFns ...func(*eventbridge.Options)) (*eventbridge.PutEventsOutput, error)
}

var _ API = (*eventbridge.Client)(nil)

// Publisher publishes alerts to one EventBridge bus.
type Publisher struct {
	client API
	bus    string
}

var _ alert.Publisher = (*Publisher)(nil)

// New returns a Publisher that puts events on the bus busName (a name or
// ARN; empty means the account's default bus).
func New(client API, busName string) *Publisher {
	return &Publisher{client: client, bus: busName}
}

// EntryFailure is one event EventBridge (or the Publisher, for an event it
// could not encode or that is too large) did not accept.
type EntryFailure struct {
	Type   alert.Type
	Tenant string
	// Code is EventBridge's ErrorCode, or "Encoding"/"TooLarge" for events
	// refused before sending.
	Code    string
	Message string
}

// PublishError lists the events of one Publish call that were not put on
// the bus. The other events were.
type PublishError struct {
	Failures []EntryFailure
}

// Error lists every failed entry.
func (e *PublishError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "eventbridge: %d event(s) not published:", len(e.Failures))
	for _, f := range e.Failures {
		fmt.Fprintf(&b, " [%s tenant=%q %s: %s]", f.Type, f.Tenant, f.Code, f.Message)
	}
	return b.String()
}

// Publish puts events on the bus in batches of at most MaxBatchEntries
// entries and MaxBatchBytes. Every batch is tried even when an earlier one
// fails; the error joins the batches' request errors and a *PublishError
// with the entries EventBridge refused (FailedEntryCount). No retry happens
// here beyond the SDK's own for whole requests.
func (p *Publisher) Publish(ctx context.Context, events ...alert.Event) error {
	var (
		failures []EntryFailure
		errs     []error
		batch    []types.PutEventsRequestEntry
		sent     []alert.Event // sent[i] is the event of batch[i]
		size     int
	)
	flush := func() {
		if len(batch) == 0 {
			return
		}
		f, err := p.put(ctx, batch, sent)
		failures = append(failures, f...)
		if err != nil {
			errs = append(errs, err)
		}
		batch, sent, size = nil, nil, 0
	}
	for _, e := range events {
		entry, err := p.entry(e)
		if err != nil {
			failures = append(failures, EntryFailure{Type: e.Type, Tenant: e.Tenant, Code: "Encoding", Message: err.Error()})
			continue
		}
		n := entrySize(entry)
		if n > MaxBatchBytes {
			failures = append(failures, EntryFailure{Type: e.Type, Tenant: e.Tenant, Code: "TooLarge",
				Message: fmt.Sprintf("entry is %d bytes, PutEvents allows %d", n, MaxBatchBytes)})
			continue
		}
		if len(batch) == MaxBatchEntries || size+n > MaxBatchBytes {
			flush()
		}
		batch = append(batch, entry)
		sent = append(sent, e)
		size += n
	}
	flush()
	if len(failures) > 0 {
		errs = append(errs, &PublishError{Failures: failures})
	}
	return errors.Join(errs...)
}

// put sends one batch and returns the entries EventBridge refused.
func (p *Publisher) put(ctx context.Context, batch []types.PutEventsRequestEntry, sent []alert.Event) ([]EntryFailure, error) {
	out, err := p.client.PutEvents(ctx, &eventbridge.PutEventsInput{Entries: batch})
	if err != nil {
		return nil, fmt.Errorf("eventbridge: put %d event(s) on bus %q: %w", len(batch), p.bus, err)
	}
	if out.FailedEntryCount == 0 {
		return nil, nil
	}
	var failures []EntryFailure
	for i, r := range out.Entries {
		if i >= len(sent) || r.ErrorCode == nil {
			continue
		}
		failures = append(failures, EntryFailure{Type: sent[i].Type, Tenant: sent[i].Tenant,
			Code: aws.ToString(r.ErrorCode), Message: aws.ToString(r.ErrorMessage)})
	}
	if len(failures) != int(out.FailedEntryCount) {
		// The answer does not say which entries failed; report the count.
		return failures, fmt.Errorf("eventbridge: bus %q: FailedEntryCount %d, but %d of %d result entries carry an error",
			p.bus, out.FailedEntryCount, len(failures), len(out.Entries))
	}
	return failures, nil
}

func (p *Publisher) entry(e alert.Event) (types.PutEventsRequestEntry, error) {
	detail, err := alert.DetailJSON(e)
	if err != nil {
		return types.PutEventsRequestEntry{}, err
	}
	entry := types.PutEventsRequestEntry{
		Source:     aws.String(alert.Source),
		DetailType: aws.String(string(e.Type)),
		Detail:     aws.String(string(detail)),
	}
	if p.bus != "" {
		entry.EventBusName = aws.String(p.bus)
	}
	if !e.Time.IsZero() {
		entry.Time = aws.Time(e.Time)
	}
	return entry, nil
}

// entrySize is an entry's size as EventBridge counts it against the
// PutEvents limit: 14 bytes for a time, plus the UTF-8 bytes of source,
// detail-type, detail and resources.
func entrySize(e types.PutEventsRequestEntry) int {
	n := len(aws.ToString(e.Source)) + len(aws.ToString(e.DetailType)) + len(aws.ToString(e.Detail))
	if e.Time != nil {
		n += 14
	}
	for _, r := range e.Resources {
		n += len(r)
	}
	return n
}
