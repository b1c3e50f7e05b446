// Package storefault is a fault-injecting decorator of the store port, for
// chaos tests: the write operations the engine's promises rest on fail
// before they reach the store (an error), or are applied and then report
// an error (the answer was lost), and any call may be slowed down. Every
// decision comes from a seeded source, so a failing run replays from its
// seed.
package storefault

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/store"
)

// ErrInjected is the error of an injected fault.
var ErrInjected = errors.New("storefault: injected fault")

// ErrAnswerLost is returned when the operation was applied but its answer
// is reported lost.
var ErrAnswerLost = errors.New("storefault: applied, answer lost")

// Config sets the faults. Ratios are per call, between 0 and 1.
type Config struct {
	Seed uint64
	// ErrorRatio: the call fails before it reaches the store.
	ErrorRatio float64
	// LostAnswerRatio: the call is applied, then reports ErrAnswerLost.
	LostAnswerRatio float64
	// LatencyRatio and Latency: the call waits Latency (on Clock) first.
	LatencyRatio float64
	Latency      time.Duration
	Clock        clock.Sleeper
	// Ops, when set, limits the faults to the named operations (method
	// names of store.Store, e.g. "ClaimItems"); the others pass through.
	Ops []string
}

// Store injects faults into the writes of an inner store.
type Store struct {
	store.Store
	cfg Config

	mu      sync.Mutex
	rnd     *rand.Rand
	enabled bool
	counts  map[string]int
}

var _ store.Store = (*Store)(nil)

// New wraps s. Faults are on until Heal.
func New(s store.Store, cfg Config) *Store {
	return &Store{Store: s, cfg: cfg, rnd: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x5f0f)), enabled: true, counts: map[string]int{}}
}

// Heal turns every fault off.
func (s *Store) Heal() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.enabled = false
}

// Injected returns how many faults of each kind were injected.
func (s *Store) Injected() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.counts))
	for k, v := range s.counts {
		out[k] = v
	}
	return out
}

type fault int

const (
	none fault = iota
	before
	after
)

// faulted reports whether op may be faulted.
func (s *Store) faulted(op string) bool {
	if len(s.cfg.Ops) == 0 {
		return true
	}
	for _, o := range s.cfg.Ops {
		if o == op {
			return true
		}
	}
	return false
}

// decide draws the fault of one call of op.
func (s *Store) decide(ctx context.Context, op string) (fault, error) {
	s.mu.Lock()
	if !s.enabled || !s.faulted(op) {
		s.mu.Unlock()
		return none, nil
	}
	slow := s.rnd.Float64() < s.cfg.LatencyRatio
	r := s.rnd.Float64()
	f := none
	switch {
	case r < s.cfg.ErrorRatio:
		f = before
		s.counts["error"]++
	case r < s.cfg.ErrorRatio+s.cfg.LostAnswerRatio:
		f = after
		s.counts["lost_answer"]++
	}
	if slow {
		s.counts["latency"]++
	}
	s.mu.Unlock()
	if slow && s.cfg.Clock != nil && s.cfg.Latency > 0 {
		if err := s.cfg.Clock.Sleep(ctx, s.cfg.Latency); err != nil {
			return none, err
		}
	}
	return f, nil
}

// wrap runs one write with a drawn fault.
func wrap[T any](ctx context.Context, s *Store, op string, call func() (T, error)) (T, error) {
	var zero T
	f, err := s.decide(ctx, op)
	if err != nil {
		return zero, err
	}
	if f == before {
		return zero, ErrInjected
	}
	v, err := call()
	if err == nil && f == after {
		return zero, ErrAnswerLost
	}
	return v, err
}

// ClaimItems injects a fault around the claim.
func (s *Store) ClaimItems(ctx context.Context, p store.ClaimItemsParams) (store.ClaimItemsResult, error) {
	return wrap(ctx, s, "ClaimItems", func() (store.ClaimItemsResult, error) { return s.Store.ClaimItems(ctx, p) })
}

// UpdateItems injects a fault around the item writes.
func (s *Store) UpdateItems(ctx context.Context, p store.UpdateItemsParams) (store.UpdateItemsResult, error) {
	return wrap(ctx, s, "UpdateItems", func() (store.UpdateItemsResult, error) { return s.Store.UpdateItems(ctx, p) })
}

// AdvanceShard injects a fault around the fold.
func (s *Store) AdvanceShard(ctx context.Context, p store.AdvanceShardParams) (store.Shard, error) {
	return wrap(ctx, s, "AdvanceShard", func() (store.Shard, error) { return s.Store.AdvanceShard(ctx, p) })
}

// AddShardCounts injects a fault around the outside-turn fold.
func (s *Store) AddShardCounts(ctx context.Context, p store.AddShardCountsParams) (store.Shard, error) {
	return wrap(ctx, s, "AddShardCounts", func() (store.Shard, error) { return s.Store.AddShardCounts(ctx, p) })
}

// BeginTurn injects a fault around the turn's start.
func (s *Store) BeginTurn(ctx context.Context, p store.BeginTurnParams) (store.Shard, error) {
	return wrap(ctx, s, "BeginTurn", func() (store.Shard, error) { return s.Store.BeginTurn(ctx, p) })
}

// TakeTokens injects a fault around the token bucket.
func (s *Store) TakeTokens(ctx context.Context, p store.TakeTokensParams) (store.TakeTokensResult, error) {
	return wrap(ctx, s, "TakeTokens", func() (store.TakeTokensResult, error) { return s.Store.TakeTokens(ctx, p) })
}

// TakeSlots injects a fault around an account's random schedule.
func (s *Store) TakeSlots(ctx context.Context, p store.TakeSlotsParams) (store.TakeSlotsResult, error) {
	return wrap(ctx, s, "TakeSlots", func() (store.TakeSlotsResult, error) { return s.Store.TakeSlots(ctx, p) })
}

// ReserveBudget injects a fault around the budget counter.
func (s *Store) ReserveBudget(ctx context.Context, jobID string, n int64) (store.BudgetGrant, error) {
	return wrap(ctx, s, "ReserveBudget", func() (store.BudgetGrant, error) { return s.Store.ReserveBudget(ctx, jobID, n) })
}

// TransitionShard injects a fault around shard status changes.
func (s *Store) TransitionShard(ctx context.Context, p store.TransitionShardParams) (store.Shard, error) {
	return wrap(ctx, s, "TransitionShard", func() (store.Shard, error) { return s.Store.TransitionShard(ctx, p) })
}
