// Package storefault is a fault-injecting decorator of the store port, for
// chaos tests: every write operation of store.Store fails before it
// reaches the store (an error), or is applied and then reports an error
// (the answer was lost), and may be slowed down; reads pass through
// (TestEveryWriteIsFaulted lists them). Every
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

// wrap0 is wrap for a write that returns only an error.
func wrap0(ctx context.Context, s *Store, op string, call func() error) error {
	_, err := wrap(ctx, s, op, func() (struct{}, error) { return struct{}{}, call() })
	return err
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

// CreateJob injects a fault around the job's creation.
func (s *Store) CreateJob(ctx context.Context, p store.CreateJobParams) (store.CreateJobResult, error) {
	return wrap(ctx, s, "CreateJob", func() (store.CreateJobResult, error) { return s.Store.CreateJob(ctx, p) })
}

// PutItems injects a fault around a page of the item snapshot.
func (s *Store) PutItems(ctx context.Context, p store.PutItemsParams) error {
	return wrap0(ctx, s, "PutItems", func() error { return s.Store.PutItems(ctx, p) })
}

// TransitionJob injects a fault around job status changes.
func (s *Store) TransitionJob(ctx context.Context, p store.TransitionJobParams) (store.Job, error) {
	return wrap(ctx, s, "TransitionJob", func() (store.Job, error) { return s.Store.TransitionJob(ctx, p) })
}

// UpdateJobLimits injects a fault around rate and budget changes.
func (s *Store) UpdateJobLimits(ctx context.Context, p store.UpdateJobLimitsParams) (store.Job, error) {
	return wrap(ctx, s, "UpdateJobLimits", func() (store.Job, error) { return s.Store.UpdateJobLimits(ctx, p) })
}

// RecountShard injects a fault around the recount.
func (s *Store) RecountShard(ctx context.Context, jobID string, index int) (store.Shard, error) {
	return wrap(ctx, s, "RecountShard", func() (store.Shard, error) { return s.Store.RecountShard(ctx, jobID, index) })
}

// MarkShardDirty injects a fault around the dirty mark of an outside-turn
// change.
func (s *Store) MarkShardDirty(ctx context.Context, jobID string, index int) (store.Shard, error) {
	return wrap(ctx, s, "MarkShardDirty", func() (store.Shard, error) { return s.Store.MarkShardDirty(ctx, jobID, index) })
}

// ChargeFrequency injects a fault around the frequency-cap charge.
func (s *Store) ChargeFrequency(ctx context.Context, p store.ChargeFrequencyParams) (store.ChargeFrequencyResult, error) {
	return wrap(ctx, s, "ChargeFrequency", func() (store.ChargeFrequencyResult, error) { return s.Store.ChargeFrequency(ctx, p) })
}

// SaveAccountSizing injects a fault around the save of an account's
// measured batch size and calls in flight.
func (s *Store) SaveAccountSizing(ctx context.Context, p store.SaveAccountSizingParams) error {
	return wrap0(ctx, s, "SaveAccountSizing", func() error { return s.Store.SaveAccountSizing(ctx, p) })
}

// PutAccount injects a fault around an account's config write.
func (s *Store) PutAccount(ctx context.Context, a store.Account) (store.Account, error) {
	return wrap(ctx, s, "PutAccount", func() (store.Account, error) { return s.Store.PutAccount(ctx, a) })
}

// PutToken injects a fault around an API token's binding.
func (s *Store) PutToken(ctx context.Context, tokenHash, tenant string) error {
	return wrap0(ctx, s, "PutToken", func() error { return s.Store.PutToken(ctx, tokenHash, tenant) })
}

// SaveBreaker injects a fault around a breaker's save.
func (s *Store) SaveBreaker(ctx context.Context, b store.Breaker) (store.Breaker, error) {
	return wrap(ctx, s, "SaveBreaker", func() (store.Breaker, error) { return s.Store.SaveBreaker(ctx, b) })
}

// PutSuppressions injects a fault around additions to the suppression list.
func (s *Store) PutSuppressions(ctx context.Context, tenant string, entries []store.Suppression) error {
	return wrap0(ctx, s, "PutSuppressions", func() error { return s.Store.PutSuppressions(ctx, tenant, entries) })
}

// DeleteSuppression injects a fault around a removal from the suppression
// list.
func (s *Store) DeleteSuppression(ctx context.Context, tenant, account, to string) error {
	return wrap0(ctx, s, "DeleteSuppression", func() error { return s.Store.DeleteSuppression(ctx, tenant, account, to) })
}

// PutCampaign injects a fault around a campaign's write.
func (s *Store) PutCampaign(ctx context.Context, c store.Campaign) (store.Campaign, error) {
	return wrap(ctx, s, "PutCampaign", func() (store.Campaign, error) { return s.Store.PutCampaign(ctx, c) })
}

// DeleteCampaign injects a fault around a campaign's removal.
func (s *Store) DeleteCampaign(ctx context.Context, tenant, id string) error {
	return wrap0(ctx, s, "DeleteCampaign", func() error { return s.Store.DeleteCampaign(ctx, tenant, id) })
}

// AcquireLease injects a fault around taking or renewing a lease.
func (s *Store) AcquireLease(ctx context.Context, p store.AcquireLeaseParams) (store.Lease, error) {
	return wrap(ctx, s, "AcquireLease", func() (store.Lease, error) { return s.Store.AcquireLease(ctx, p) })
}

// ReleaseLease injects a fault around a lease's release.
func (s *Store) ReleaseLease(ctx context.Context, p store.ReleaseLeaseParams) error {
	return wrap0(ctx, s, "ReleaseLease", func() error { return s.Store.ReleaseLease(ctx, p) })
}
