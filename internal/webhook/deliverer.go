package webhook

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/store"
)

// DelivererStore is what the Deliverer needs of the store.
type DelivererStore interface {
	GetWebhook(ctx context.Context, tenant, id string) (store.Webhook, error)
	ListDeliveries(ctx context.Context, p store.ListDeliveriesParams) ([]store.Delivery, error)
	DueDeliveries(ctx context.Context, p store.DueDeliveriesParams) ([]store.Delivery, error)
	UpdateDelivery(ctx context.Context, d store.Delivery) (store.Delivery, error)
}

// Request is one delivery attempt: a POST of Body to URL with Header.
type Request struct {
	URL    string
	Header http.Header
	Body   []byte
}

// Answer is an endpoint's answer to an attempt: its status and the start
// of its body (a WeCom robot says in the body whether it took a message).
type Answer struct {
	Status int
	Body   []byte
}

// Poster makes delivery attempts (webhook/httppost over HTTP). An error
// means no answer (refused, timed out, a URL that may not be reached);
// any answer, whatever its status, is a nil error. Errors never hold the
// URL (a robot's URL holds its key).
type Poster interface {
	Post(ctx context.Context, r Request) (Answer, error)
}

// Deliverer works due deliveries: claims each (its next attempt moved a
// lease ahead, conditional on its version, so two workers never try the
// same one at once), signs and posts it, and records the outcome: any 2xx
// delivers it, anything else schedules a retry with backoff until the
// attempts are used up. Deliveries to one webhook are tried in order; when
// one fails, the later ones of that webhook wait behind it.
type Deliverer struct {
	Store  DelivererStore
	Poster Poster
	Clock  clock.Clock
	Log    *slog.Logger
	Retry  Retry
	// Lease is how long a claimed delivery is kept from other workers
	// (default 2 min; longer than an attempt's timeout).
	Lease time.Duration
	// Batch is the most deliveries claimed per round (default 100).
	Batch int
	// Concurrency is the most webhooks posted to at once (default 8).
	Concurrency int
	// Rand draws jitter in [0,1); nil uses math/rand/v2.
	Rand func() float64
}

// RunResult counts what a run did.
type RunResult struct {
	Delivered, Retried, Failed int
}

func (r *RunResult) add(o RunResult) {
	r.Delivered += o.Delivered
	r.Retried += o.Retried
	r.Failed += o.Failed
}

// RunDue works the deliveries due now, round after round, until none is
// due (or ctx ends).
func (d *Deliverer) RunDue(ctx context.Context) (RunResult, error) {
	var total RunResult
	for ctx.Err() == nil {
		due, err := d.Store.DueDeliveries(ctx, store.DueDeliveriesParams{Now: d.Clock.Now(), Limit: d.batch()})
		if err != nil {
			return total, fmt.Errorf("due deliveries: %w", err)
		}
		if len(due) == 0 {
			return total, nil
		}
		res, err := d.round(ctx, due)
		total.add(res)
		if err != nil {
			return total, err
		}
		if res == (RunResult{}) {
			return total, nil // everything due was claimed by another worker
		}
	}
	return total, ctx.Err()
}

// round tries one set of due deliveries, per webhook in ID order, webhooks
// in parallel.
func (d *Deliverer) round(ctx context.Context, due []store.Delivery) (RunResult, error) {
	byHook := map[[2]string][]store.Delivery{}
	var order [][2]string
	for _, dl := range due {
		k := [2]string{dl.Tenant, dl.WebhookID}
		if _, ok := byHook[k]; !ok {
			order = append(order, k)
		}
		byHook[k] = append(byHook[k], dl)
	}
	var (
		mu    sync.Mutex
		total RunResult
		errs  []error
		wg    sync.WaitGroup
		sem   = make(chan struct{}, d.concurrency())
	)
	for _, k := range order {
		ds := byHook[k]
		sort.Slice(ds, func(i, j int) bool { return ds[i].ID < ds[j].ID })
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			res, err := d.webhook(ctx, ds)
			mu.Lock()
			defer mu.Unlock()
			total.add(res)
			if err != nil {
				errs = append(errs, err)
			}
		})
	}
	wg.Wait()
	return total, errors.Join(errs...)
}

// webhook tries the due deliveries of one webhook in order; after a failed
// attempt the rest wait until the failed one's next attempt.
func (d *Deliverer) webhook(ctx context.Context, ds []store.Delivery) (RunResult, error) {
	var res RunResult
	hook, err := d.Store.GetWebhook(ctx, ds[0].Tenant, ds[0].WebhookID)
	gone := errors.Is(err, store.ErrNotFound)
	if err != nil && !gone {
		return res, fmt.Errorf("webhook %s: %w", ds[0].WebhookID, err)
	}
	var blocked *store.Delivery // the failed attempt the rest wait behind
	for _, dl := range ds {
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		now := d.Clock.Now()
		if blocked != nil {
			dl.Attempts++
			dl.LastError = "waiting behind an earlier delivery to this webhook (" + blocked.ID + ")"
			dl.LastAttemptAt = now
			if dl.Attempts >= d.retry().MaxAttempts {
				dl.Status = store.DeliveryFailed
			} else if dl.NextAttemptAt.Before(blocked.NextAttemptAt) {
				dl.NextAttemptAt = blocked.NextAttemptAt
			}
			if _, err := d.Store.UpdateDelivery(ctx, dl); err != nil && !errors.Is(err, store.ErrConflict) {
				return res, fmt.Errorf("defer delivery %s: %w", dl.ID, err)
			}
			continue
		}
		if gone {
			dl.Status, dl.LastError, dl.LastAttemptAt = store.DeliveryFailed, "the webhook was deleted", now
			if _, err := d.Store.UpdateDelivery(ctx, dl); err != nil && !errors.Is(err, store.ErrConflict) {
				return res, fmt.Errorf("fail delivery %s: %w", dl.ID, err)
			}
			res.Failed++
			continue
		}
		if hook.Kind == store.WebhookWeComRobot {
			r, err := d.robot(ctx, hook, ds)
			res.add(r)
			return res, err
		}
		out, err := d.attempt(ctx, hook, dl)
		if errors.Is(err, store.ErrConflict) {
			continue // another worker has it
		}
		if err != nil {
			return res, err
		}
		switch out.Status {
		case store.DeliveryDelivered:
			res.Delivered++
		case store.DeliveryFailed:
			res.Failed++
		default:
			res.Retried++
			blocked = &out
		}
	}
	return res, nil
}

// claim takes a delivery for an attempt: its next attempt moves a lease
// ahead, conditional on its version (ErrConflict: another worker has it).
func (d *Deliverer) claim(ctx context.Context, dl store.Delivery) (store.Delivery, error) {
	claim := dl
	claim.NextAttemptAt = d.Clock.Now().Add(d.lease())
	claimed, err := d.Store.UpdateDelivery(ctx, claim)
	if err != nil {
		return dl, fmt.Errorf("claim delivery %s: %w", dl.ID, err)
	}
	return claimed, nil
}

// attempt claims, posts and records one delivery.
func (d *Deliverer) attempt(ctx context.Context, hook store.Webhook, dl store.Delivery) (store.Delivery, error) {
	now := d.Clock.Now()
	claimed, err := d.claim(ctx, dl)
	if err != nil {
		return dl, err
	}
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("User-Agent", "qunfa-webhooks/1")
	h.Set("Qunfa-Event-Id", dl.EventID)
	h.Set("Qunfa-Event-Type", dl.EventType)
	h.Set(SignatureHeader, Sign(hook.Secret, now, dl.Body))
	ans, perr := d.Poster.Post(ctx, Request{URL: hook.URL, Header: h, Body: dl.Body})
	return d.record(ctx, claimed, ans.Status, perr)
}

// record stores the outcome of an attempt on a claimed delivery: a 2xx
// answer (and no error) delivers it; anything else schedules a retry with
// backoff, or fails it when its attempts are used up.
func (d *Deliverer) record(ctx context.Context, claimed store.Delivery, status int, perr error) (store.Delivery, error) {
	dl := claimed
	done := d.Clock.Now()
	rec := claimed
	rec.Attempts++
	rec.LastAttemptAt, rec.LastStatus, rec.LastError = done, status, ""
	switch {
	case perr == nil && status >= 200 && status < 300:
		rec.Status, rec.DeliveredAt, rec.NextAttemptAt = store.DeliveryDelivered, done, time.Time{}
	default:
		if perr != nil {
			rec.LastStatus, rec.LastError = 0, perr.Error()
		} else {
			rec.LastError = fmt.Sprintf("HTTP %d", status)
		}
		if rec.Attempts >= d.retry().MaxAttempts {
			rec.Status, rec.NextAttemptAt = store.DeliveryFailed, time.Time{}
		} else {
			rec.NextAttemptAt = done.Add(d.retry().Wait(rec.Attempts, d.rand()))
		}
	}
	out, err := d.Store.UpdateDelivery(context.WithoutCancel(ctx), rec)
	if err != nil {
		return dl, fmt.Errorf("record delivery %s: %w", dl.ID, err)
	}
	if out.Status != store.DeliveryDelivered && d.Log != nil {
		d.Log.Warn("webhook delivery failed", slog.String("tenant", dl.Tenant), slog.String("webhook", dl.WebhookID),
			slog.String("delivery", dl.ID), slog.String("event_type", dl.EventType), slog.Int("attempts", out.Attempts),
			slog.Int("status", out.LastStatus), slog.String("error", out.LastError), slog.String("outcome", string(out.Status)))
	}
	return out, nil
}

// Redeliver makes a delivery due now with a fresh set of attempts (the
// delivery log's "redeliver"): the same event, id and body.
func Redeliver(ctx context.Context, st DelivererStore, dl store.Delivery, now time.Time) (store.Delivery, error) {
	dl.Status, dl.Attempts, dl.NextAttemptAt = store.DeliveryPending, 0, now
	return st.UpdateDelivery(ctx, dl)
}

func (d *Deliverer) retry() Retry { return d.Retry.withDefaults() }

func (d *Deliverer) lease() time.Duration {
	if d.Lease <= 0 {
		return 2 * time.Minute
	}
	return d.Lease
}

func (d *Deliverer) batch() int {
	if d.Batch <= 0 {
		return 100
	}
	return d.Batch
}

func (d *Deliverer) concurrency() int {
	if d.Concurrency <= 0 {
		return 8
	}
	return d.Concurrency
}

func (d *Deliverer) rand() float64 {
	if d.Rand != nil {
		return d.Rand()
	}
	return rand.Float64()
}
