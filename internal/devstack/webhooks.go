package devstack

import (
	"context"
	"log/slog"
	"time"

	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/webhook"
	"github.com/qunfa/qunfa/internal/webhook/httppost"
)

// WebhookTick is how often the local runtime works due webhook
// deliveries: the stand-in for the webhooks function's schedule.
const WebhookTick = time.Second

// newWebhooks builds the webhook publisher (chained into the stack's
// alerts and given the sender's outcomes) and the delivery worker.
func (s *Stack) newWebhooks(clk clock.Clock) (*webhook.Publisher, *webhook.Deliverer) {
	pub := &webhook.Publisher{Store: s.Store, Clock: clk, Log: s.Log}
	del := &webhook.Deliverer{
		Store: s.Store, Clock: clk, Log: s.Log,
		Poster: httppost.New(httppost.Config{AllowPrivate: s.Config.AllowPrivateURLs}),
		Retry:  webhook.Retry{Base: s.Config.WebhookRetryBase},
	}
	return pub, del
}

// deliverWebhooks works due deliveries at every tick until ctx is done.
// Pending deliveries survive a restart in the store and are worked on the
// first tick.
func (s *Stack) deliverWebhooks(ctx context.Context, tick <-chan time.Time) {
	for {
		res, err := s.Webhooks.RunDue(ctx)
		if err != nil && ctx.Err() == nil {
			s.Log.Error("webhook deliveries failed", slog.Any("err", err))
		}
		if res != (webhook.RunResult{}) {
			s.Log.Info("webhook deliveries", slog.Int("delivered", res.Delivered), slog.Int("retried", res.Retried), slog.Int("failed", res.Failed))
		}
		select {
		case <-ctx.Done():
			return
		case <-tick:
		}
	}
}
