// Package webhook delivers qunfa's events to tenants' HTTPS endpoints:
// signed, retried with backoff, logged per delivery (docs/webhooks.md).
//
// Events come from the alert stream (internal/alert): Publisher is an
// alert.Publisher that turns each event a tenant's webhooks subscribe to
// into one stored delivery per webhook, and Deliverer works the due
// deliveries through a Poster (the HTTP adapter is webhook/httppost). The
// local runtime chains Publisher into its alert publishers and runs
// Deliverer on a ticker; on AWS the webhooks function receives the alert
// bus's events through an EventBridge rule (FromEventBridge) and runs
// Deliverer on a schedule. Deliveries are stored before they are tried, so
// a crash loses none: delivery is at least once, and receivers dedupe by
// the event id, which is the same on every attempt.
package webhook

import (
	"bytes"
	"crypto/rand"
	"encoding/base32"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/qunfa/qunfa/internal/alert"
)

// EventType names a webhook event.
type EventType string

// The event types a webhook may subscribe to.
const (
	JobStarted         EventType = "job.started"
	JobPaused          EventType = "job.paused"
	JobCanaryReady     EventType = "job.canary_ready"
	JobFinished        EventType = "job.finished"
	JobDeadLetters     EventType = "job.dead_letters"
	JobItemsNeedReview EventType = "job.items_need_review"
	ItemsOutcomes      EventType = "items.outcomes"
)

// fromAlert maps the alert types webhooks deliver to their event types.
// The operator alerts (breakers, count mismatches, campaign skips) go to
// WeCom group robots only (EventType.ValidFor).
var fromAlert = map[alert.Type]EventType{
	alert.JobStarted:      JobStarted,
	alert.JobPaused:       JobPaused,
	alert.CanaryReady:     JobCanaryReady,
	alert.JobFinished:     JobFinished,
	alert.DeadLetters:     JobDeadLetters,
	alert.ItemsNeedReview: JobItemsNeedReview,
	alert.ItemOutcomes:    ItemsOutcomes,
	alert.BreakerOpened:   BreakerOpened,
	alert.BreakerClosed:   BreakerClosed,
	alert.CountsMismatch:  CountsMismatch,
	alert.CampaignSkipped: CampaignSkipped,
}

// AlertTypes lists the alert types webhooks deliver (to HTTP endpoints or
// to WeCom group robots), sorted: the detail-types the webhooks
// function's EventBridge rule takes.
func AlertTypes() []alert.Type {
	out := make([]alert.Type, 0, len(fromAlert))
	for t := range fromAlert {
		out = append(out, t)
	}
	slices.Sort(out)
	return out
}

// EventTypes lists every event type, in the order of the documentation.
func EventTypes() []EventType {
	return []EventType{JobStarted, JobPaused, JobCanaryReady, JobFinished, JobDeadLetters, JobItemsNeedReview, ItemsOutcomes}
}

// Valid reports whether t is an event type webhooks can subscribe to.
func (t EventType) Valid() bool {
	for _, v := range EventTypes() {
		if t == v {
			return true
		}
	}
	return false
}

// Event is what an endpoint receives: the body of every delivery.
type Event struct {
	// ID is unique per event and the same on every attempt and every
	// webhook: receivers dedupe by it.
	ID        string          `json:"id"`
	Type      EventType       `json:"type"`
	CreatedAt time.Time       `json:"created_at"`
	Data      json.RawMessage `json:"data"`
}

// Source is an alert as it reaches webhooks: in process (an alert.Event)
// or from the alert bus (an EventBridge event), reduced to what both have.
type Source struct {
	// ID identifies the alert; empty makes a new random one. The
	// EventBridge event id keeps it stable when a rule retries.
	ID     string
	Type   alert.Type
	Tenant string
	Time   time.Time
	// Detail is the alert's detail JSON (alert.DetailJSON: its fields with
	// "tenant" first).
	Detail json.RawMessage
}

// SourceOf reduces an in-process alert to a Source.
func SourceOf(e alert.Event) (Source, error) {
	detail, err := alert.DetailJSON(e)
	if err != nil {
		return Source{}, err
	}
	return Source{Type: e.Type, Tenant: e.Tenant, Time: e.Time, Detail: detail}, nil
}

// NewEvent builds the webhook event of an alert; ok is false for alerts
// webhooks do not deliver. The data is the alert's detail without its
// tenant (the receiver is the tenant).
func NewEvent(src Source, now time.Time) (ev Event, ok bool, err error) {
	typ, ok := fromAlert[src.Type]
	if !ok {
		return Event{}, false, nil
	}
	var fields map[string]json.RawMessage
	if len(bytes.TrimSpace(src.Detail)) > 0 {
		if err := json.Unmarshal(src.Detail, &fields); err != nil {
			return Event{}, false, fmt.Errorf("%s detail: %w", src.Type, err)
		}
	}
	delete(fields, "tenant")
	if fields == nil {
		fields = map[string]json.RawMessage{}
	}
	data, err := json.Marshal(fields)
	if err != nil {
		return Event{}, false, fmt.Errorf("%s detail: %w", src.Type, err)
	}
	at := src.Time
	if at.IsZero() {
		at = now
	}
	id := src.ID
	if id == "" {
		id = randomID()
	}
	return Event{ID: "evt_" + id, Type: typ, CreatedAt: at.UTC(), Data: data}, true, nil
}

var idEncoding = base32.NewEncoding("0123456789abcdefghijklmnopqrstuv").WithPadding(base32.NoPadding)

// randomID returns 128 random bits, base32 (26 characters).
func randomID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return idEncoding.EncodeToString(b[:])
}

// NewWebhookID returns a new webhook id.
func NewWebhookID() string { return "wh_" + randomID() }

// deliveryID names the delivery of event ev to webhook: the event's time
// first, so IDs sort by creation (the delivery log's order), then a part
// derived from the event id, so that delivering the same event twice (a
// retried publish) names the same delivery.
func deliveryID(ev Event) string {
	id := strings.TrimPrefix(ev.ID, "evt_")
	if len(id) > 40 {
		id = id[:40]
	}
	// Nanoseconds: two events of one millisecond (a batch's outcomes and the
	// job's end, say) must keep their order.
	return fmt.Sprintf("dl_%019d_%s", ev.CreatedAt.UnixNano(), id)
}
