package handlers

import (
	"context"
	"log/slog"

	"github.com/aws/aws-lambda-go/events"

	"github.com/qunfa/qunfa/internal/breaker"
	"github.com/qunfa/qunfa/internal/reconcile"
)

// Reconciler handles the reconciler's EventBridge schedule: one
// reconciliation pass per event.
func Reconciler(r *reconcile.Reconciler, log *slog.Logger) func(context.Context, events.EventBridgeEvent) error {
	return func(ctx context.Context, ev events.EventBridgeEvent) error {
		rep, err := r.Run(ctx)
		if err != nil {
			log.Error("reconciliation pass failed", slog.String("event", ev.ID), slog.Any("err", err))
			return err
		}
		log.Debug("reconciliation pass", slog.String("event", ev.ID), slog.Int("redriven", rep.Redriven),
			slog.Int("confirmed", rep.Confirmed), slog.Int("repended", rep.Repended))
		return nil
	}
}

// Breaker handles the breaker's EventBridge schedule: one failure-rate
// check over every account with running shards per event.
func Breaker(b *breaker.Breakers, log *slog.Logger) func(context.Context, events.EventBridgeEvent) error {
	return func(ctx context.Context, ev events.EventBridgeEvent) error {
		rep, err := b.Check(ctx)
		if err != nil {
			log.Error("breaker check failed", slog.String("event", ev.ID), slog.Any("err", err))
			return err
		}
		log.Debug("breaker check", slog.String("event", ev.ID), slog.Int("accounts", rep.Accounts), slog.Int("opened", rep.Opened), slog.Int("missing", rep.Missing))
		return nil
	}
}
