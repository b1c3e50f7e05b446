package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/qunfa/qunfa/internal/alert"
	"github.com/qunfa/qunfa/internal/webhook"
)

// webhookMargin is kept free before the invocation deadline: no new
// delivery round starts later (an attempt's timeout is shorter).
const webhookMargin = 15 * time.Second

// Webhooks handles the webhooks function's events: an alert from the alert
// bus (source qunfa, through the webhook rule) is stored as deliveries to
// the tenant's subscribed webhooks, then every due delivery is worked; a
// scheduled event only works the due deliveries (retries). Storing is
// idempotent by the EventBridge event id, so a retried invocation stores
// nothing twice.
func Webhooks(pub *webhook.Publisher, del *webhook.Deliverer, log *slog.Logger) func(context.Context, events.EventBridgeEvent) error {
	return func(ctx context.Context, ev events.EventBridgeEvent) error {
		if ev.Source == alert.Source {
			var head struct {
				Tenant string `json:"tenant"`
			}
			if err := json.Unmarshal(ev.Detail, &head); err != nil || head.Tenant == "" {
				log.Error("alert event without a tenant", slog.String("event", ev.ID), slog.String("type", ev.DetailType))
				return nil // retrying cannot help
			}
			n, err := pub.Deliver(ctx, webhook.Source{ID: ev.ID, Type: alert.Type(ev.DetailType), Tenant: head.Tenant, Time: ev.Time, Detail: ev.Detail})
			if err != nil {
				log.Error("store webhook deliveries failed", slog.String("event", ev.ID), slog.String("type", ev.DetailType), slog.Any("err", err))
				return fmt.Errorf("store deliveries of %s: %w", ev.ID, err)
			}
			log.Debug("webhook deliveries stored", slog.String("event", ev.ID), slog.String("type", ev.DetailType), slog.Int("deliveries", n))
		}
		runCtx := ctx
		if dl, ok := ctx.Deadline(); ok {
			var cancel context.CancelFunc
			runCtx, cancel = context.WithDeadline(ctx, dl.Add(-webhookMargin))
			defer cancel()
		}
		res, err := del.RunDue(runCtx)
		if err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
			log.Error("webhook deliveries failed", slog.String("event", ev.ID), slog.Any("err", err))
			return err
		}
		log.Info("webhook deliveries", slog.String("event", ev.ID), slog.Int("delivered", res.Delivered),
			slog.Int("retried", res.Retried), slog.Int("failed", res.Failed))
		return nil
	}
}
