package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/qunfa/qunfa/internal/alert"
	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/store"
)

// PublisherStore is what the Publisher needs of the store.
type PublisherStore interface {
	ListWebhooks(ctx context.Context, tenant string) ([]store.Webhook, error)
	ListDeliveries(ctx context.Context, p store.ListDeliveriesParams) ([]store.Delivery, error)
	AddDeliveries(ctx context.Context, ds []store.Delivery) error
}

// Publisher turns alerts into stored deliveries: for each alert webhooks
// deliver, one delivery per webhook of its tenant subscribed to the event
// type, due at once. It is an alert.Publisher, so it sits beside the log
// and the feed in an alert.Multi.
type Publisher struct {
	Store PublisherStore
	Clock clock.Clock // default clock.System{}
	Log   *slog.Logger
}

var _ alert.Publisher = (*Publisher)(nil)

// Publish stores the deliveries of events. An event no webhook of its
// tenant subscribes to costs one listing of the tenant's webhooks and
// nothing else: a sender publishes the outcomes of every batch, and
// encoding them for nobody took a tenth of its time.
func (p *Publisher) Publish(ctx context.Context, events ...alert.Event) error {
	var errs []error
	for _, e := range events {
		typ, ok := fromAlert[e.Type]
		if !ok {
			continue
		}
		hooks, err := p.subscribed(ctx, e.Tenant, typ)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if len(hooks) == 0 {
			continue
		}
		src, err := SourceOf(e)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if _, err := p.deliver(ctx, src, hooks); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Deliver stores the deliveries of one alert (none when no webhook of its
// tenant subscribes to it) and returns how many. Storing the same source
// again (same ID) stores nothing new.
func (p *Publisher) Deliver(ctx context.Context, src Source) (int, error) {
	typ, ok := fromAlert[src.Type]
	if !ok {
		return 0, nil
	}
	hooks, err := p.subscribed(ctx, src.Tenant, typ)
	if err != nil || len(hooks) == 0 {
		return 0, err
	}
	return p.deliver(ctx, src, hooks)
}

// subscribed lists the webhooks of tenant that take events of type typ.
func (p *Publisher) subscribed(ctx context.Context, tenant string, typ EventType) ([]store.Webhook, error) {
	hooks, err := p.Store.ListWebhooks(ctx, tenant)
	if err != nil {
		return nil, fmt.Errorf("webhooks of %s: %w", tenant, err)
	}
	var out []store.Webhook
	for _, h := range hooks {
		if slices.Contains(h.Events, string(typ)) && typ.ValidFor(h.Kind) {
			out = append(out, h)
		}
	}
	return out, nil
}

// deliver stores one delivery of src per webhook of hooks, all
// subscribed to its type.
func (p *Publisher) deliver(ctx context.Context, src Source, hooks []store.Webhook) (int, error) {
	now := p.now()
	ev, ok, err := NewEvent(src, now)
	if err != nil || !ok {
		return 0, err
	}
	var signed, markdown []byte
	var ds []store.Delivery
	for _, h := range hooks {
		var body []byte
		switch h.Kind {
		case store.WebhookWeComRobot:
			if markdown == nil {
				if markdown, err = robotBody(RobotMarkdown(ev)); err != nil {
					return 0, fmt.Errorf("encode %s robot message: %w", ev.Type, err)
				}
			}
			body = markdown
		default:
			if signed == nil {
				if signed, err = json.Marshal(ev); err != nil {
					return 0, fmt.Errorf("encode %s event: %w", ev.Type, err)
				}
			}
			body = signed
		}
		next, err := p.behindPending(ctx, h, now)
		if err != nil {
			return 0, err
		}
		ds = append(ds, store.Delivery{
			Tenant: h.Tenant, WebhookID: h.ID, ID: deliveryID(ev), EventID: ev.ID, EventType: string(ev.Type),
			Body: body, Status: store.DeliveryPending, NextAttemptAt: next, CreatedAt: now,
		})
	}
	if len(ds) == 0 {
		return 0, nil
	}
	if err := p.Store.AddDeliveries(ctx, ds); err != nil {
		return 0, fmt.Errorf("store %s deliveries: %w", ev.Type, err)
	}
	return len(ds), nil
}

// behindPending is when a new delivery to h may be tried: now, or, while
// the webhook's latest delivery is waiting to be retried after a failed
// attempt, not before it, so that one webhook gets its events in order. A
// delivery whose first attempt is in flight (claimed: its next attempt is
// the claim's lease) is not waited for: the new one goes after it in the
// next round, instead of two minutes later.
func (p *Publisher) behindPending(ctx context.Context, h store.Webhook, now time.Time) (time.Time, error) {
	last, err := p.Store.ListDeliveries(ctx, store.ListDeliveriesParams{Tenant: h.Tenant, WebhookID: h.ID, Limit: 1})
	if err != nil {
		return time.Time{}, fmt.Errorf("latest delivery of webhook %s: %w", h.ID, err)
	}
	if len(last) == 1 && last[0].Status == store.DeliveryPending && last[0].Attempts > 0 && last[0].NextAttemptAt.After(now) {
		return last[0].NextAttemptAt, nil
	}
	return now, nil
}

func (p *Publisher) now() time.Time {
	if p.Clock == nil {
		return clock.System{}.Now()
	}
	return p.Clock.Now()
}
