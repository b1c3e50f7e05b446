package sender

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/qunfa/qunfa/internal/breaker"
	"github.com/qunfa/qunfa/internal/store"
)

// gate asks the account's breaker whether this shard may send now. While it
// is open the shard pauses (reason breaker) and is handed back until the
// cool-down ends; after it, one shard probes with a few items.
func (tr *turn) gate(ctx context.Context) (bool, Result, error) {
	tr.probe = false
	if tr.s.Breakers == nil {
		return false, Result{}, nil
	}
	dec := tr.gateDecision
	// A closed breaker read a moment ago is trusted (it is the common case,
	// read at every batch otherwise); anything else is asked again.
	if now := tr.s.Clock.Now(); !dec.Allow || dec.Probe || tr.gateReadAt.IsZero() || now.Sub(tr.gateReadAt) >= tr.cfg.AccountRefresh {
		var err error
		if dec, err = tr.s.Breakers.Gate(ctx, tr.job.Tenant, tr.shard.Account, tr.shardName()); err != nil {
			return true, Result{}, err
		}
		tr.gateDecision, tr.gateReadAt = dec, now
	}
	if !dec.Allow {
		if err := tr.pauseShardForBreaker(ctx); err != nil {
			return true, Result{}, err
		}
		res, err := tr.handBack(ctx, dec.Wait, "breaker "+string(dec.State.State)+" for "+tr.shard.Account)
		return true, res, err
	}
	if tr.shard.Status == store.ShardPaused {
		if _, err := tr.s.Store.TransitionShard(ctx, store.TransitionShardParams{
			JobID: tr.job.ID, Index: tr.shard.Index, From: []store.ShardStatus{store.ShardPaused},
			To: store.ShardRunning, At: tr.s.Clock.Now(),
		}); err != nil && !errors.Is(err, store.ErrInvalidTransition) {
			return true, Result{}, fmt.Errorf("resume shard after breaker: %w", err)
		}
		tr.shard.Status, tr.shard.PauseReason = store.ShardRunning, ""
	}
	tr.probe = dec.Probe
	return false, Result{}, nil
}

func (tr *turn) pauseShardForBreaker(ctx context.Context) error {
	if tr.shard.Status == store.ShardPaused {
		return nil
	}
	if _, err := tr.s.Store.TransitionShard(ctx, store.TransitionShardParams{
		JobID: tr.job.ID, Index: tr.shard.Index, From: []store.ShardStatus{store.ShardRunning, store.ShardPending},
		To: store.ShardPaused, PauseReason: store.PauseBreaker, At: tr.s.Clock.Now(),
	}); err != nil && !errors.Is(err, store.ErrInvalidTransition) {
		return fmt.Errorf("pause shard for the breaker: %w", err)
	}
	tr.shard.Status, tr.shard.PauseReason = store.ShardPaused, store.PauseBreaker
	return nil
}

// judgeBreaker applies the breaker's fast path after a batch: an
// account-level error, or a streak of failures as long as the account's
// consecutive_failures, opens it; a half-open probe closes or reopens it.
// The items of the tripping streak go back to pending with their attempt
// given back, so the outage does not burn them.
func (tr *turn) judgeBreaker(ctx context.Context, accountDown, batchFailed bool) error {
	if tr.s.Breakers == nil {
		return nil
	}
	if tr.probe || accountDown || batchFailed {
		tr.gateReadAt = time.Time{} // the breaker may change now: ask it again
	}
	tenant, account := tr.job.Tenant, tr.shard.Account
	if tr.probe {
		ok := !accountDown && !batchFailed
		if err := tr.s.Breakers.ProbeResult(ctx, tenant, account, tr.shardName(), ok); err != nil {
			return fmt.Errorf("probe result: %w", err)
		}
		if ok {
			tr.probe, tr.streak = false, tr.streak[:0]
			return nil
		}
		return tr.restoreStreak(ctx)
	}
	n := tr.account.Breaker.ConsecutiveFailures
	switch {
	case accountDown:
		if _, err := tr.s.Breakers.Open(ctx, tenant, account, "the account refuses every call (credential expired or invalid)"); err != nil {
			return err
		}
	case n > 0 && len(tr.streak) >= n:
		cause := breaker.Cause{Reason: fmt.Sprintf("%d failed sends in a row", len(tr.streak)), ConsecutiveFailures: len(tr.streak)}
		if _, err := tr.s.Breakers.OpenFor(ctx, tenant, account, cause); err != nil {
			return err
		}
	default:
		return nil
	}
	return tr.restoreStreak(ctx)
}

// restoreStreak returns the items of the failure streak that are not in
// flight to pending without using an attempt: retried items keep their
// place, exhausted ones come back. Items left submitted (no answer) stay
// for the reconciler.
func (tr *turn) restoreStreak(ctx context.Context) error {
	var ups []store.ItemUpdate
	for _, u := range tr.streak {
		switch u.To {
		case store.ItemPending, store.ItemFailed:
			ups = append(ups, store.ItemUpdate{
				Seq: u.Seq, From: u.To, To: store.ItemPending, AttemptsDelta: -1, NextAttemptAt: tr.s.Clock.Now(),
				Error: &store.ItemError{Category: store.CategoryRetryable, Code: "breaker",
					Message: "failed while the account's breaker tripped; will be sent again after the cool-down"},
			})
		}
	}
	tr.streak = tr.streak[:0]
	if len(ups) == 0 {
		return nil
	}
	res, err := tr.s.Store.UpdateItems(ctx, store.UpdateItemsParams{JobID: tr.job.ID, Index: tr.shard.Index, Updates: ups, At: tr.s.Clock.Now()})
	if err != nil {
		return fmt.Errorf("restore items of the tripping streak: %w", err)
	}
	tr.fold(res.Delta, res.FailuresDelta)
	tr.giveBackBudget(ctx, int64(len(ups)-len(res.Rejected))) // they get their attempt back, and their budget
	return tr.flush(ctx, false)
}
