package sender_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/mockprovider"
	"github.com/qunfa/qunfa/internal/provider"
	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/submit"
)

// breakerGets counts the breaker reads of the sender's Breakers.
type breakerGets struct {
	store.Store
	n atomic.Int64
}

func (s *breakerGets) GetBreaker(ctx context.Context, tenant, account string) (store.Breaker, error) {
	s.n.Add(1)
	return s.Store.GetBreaker(ctx, tenant, account)
}

// TestOpenBreakerHandsTheShardBack: a turn that finds its account's
// breaker open sends nothing, pauses its shard (reason breaker) and hands
// the shard back to the queue until the cool-down ends; then the shard
// comes back, probes, and the job completes.
func TestOpenBreakerHandsTheShardBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 5})
	breakerAccount(p, "a", 5)
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 4)}, "open-breaker")
	if _, err := p.sender.Breakers.Open(ctx, tenant, "a", "test: the account was down"); err != nil {
		t.Fatal(err)
	}
	res := p.step(ctx)
	if len(res) != 1 || res[0].Disposition != sender.HandedBack || res[0].Delay != 30*time.Second || res[0].Sent != 0 {
		t.Fatalf("turn results %+v, want one hand-back of the 30 s cool-down, nothing sent", res)
	}
	v, err := p.store.GetJob(ctx, job.Job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if sh := v.Shards[0]; sh.Status != store.ShardPaused || sh.PauseReason != store.PauseBreaker {
		t.Fatalf("shard %s (%s), want paused for the breaker", sh.Status, sh.PauseReason)
	}
	if calls := p.mock.Stats()["a"].Calls; calls != 0 {
		t.Fatalf("%d calls while the breaker was open", calls)
	}
	if again := p.step(ctx); len(again) != 0 {
		t.Fatalf("the shard came back before its cool-down: %+v", again)
	}
	clk.Advance(30 * time.Second)
	if again := p.step(ctx); len(again) != 1 {
		t.Fatalf("%d turns after the cool-down, want the handed-back shard's", len(again))
	}
	if v := p.driveUntil(clk, final, job.Job.ID); v.Job.Status != store.JobCompleted || v.Counts().Confirmed != 4 {
		t.Fatalf("job %s %+v", v.Job.Status, v.Counts())
	}
	p.checkExactlyOnce(job.Job.ID)
}

// TestClosedBreakerReadOncePerAccountRefresh: a turn trusts a closed
// breaker it read for AccountRefresh (the breaker is one more read per
// batch otherwise): the batches of one turn within AccountRefresh read it
// once.
func TestClosedBreakerReadOncePerAccountRefresh(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 5})
	breakerAccount(p, "a", 5)
	counted := &breakerGets{Store: p.store}
	p.sender.Breakers.Store = counted
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 20)}, "breaker-reads")
	start := clk.Now()
	res := p.step(ctx)
	if len(res) != 1 || res[0].Sent != 20 || clk.Now().Sub(start) >= time.Second {
		t.Fatalf("turn results %+v after %v: want the 20 items in 4 batches within one AccountRefresh", res, clk.Now().Sub(start))
	}
	if n := counted.n.Load(); n != 1 {
		t.Errorf("%d breaker reads for 4 batches within AccountRefresh, want 1", n)
	}
	if v := p.driveUntil(clk, final, job.Job.ID); v.Job.Status != store.JobCompleted {
		t.Fatalf("job %s %+v", v.Job.Status, v.Counts())
	}
}

// TestBreakerOpensAtTheStreakAndGivesBackItsAttempts: an account whose
// every send fails (retryable) opens its breaker after exactly as many
// failed sends in a row as its consecutive_failures, with that streak as
// the cause; the streak's items go back to pending with their attempt
// given back (the outage burns none of them) and no further call is made
// while the breaker is open. A batch never has more sends without an
// answer than that streak (batches of 5, a streak of 3: 3 calls); with
// batches of 1 the breaker opens at the third failed send, not before.
func TestBreakerOpensAtTheStreakAndGivesBackItsAttempts(t *testing.T) {
	t.Parallel()
	for _, batch := range []int{1, 5} {
		t.Run(fmt.Sprintf("batches of %d", batch), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			p, clk := fakePipeline(t, sender.Config{ClaimBatch: batch, MaxAttempts: 5, BackoffBase: time.Millisecond, BackoffCap: time.Millisecond})
			breakerAccount(p, "a", 3)
			_ = p.mock.SetBehaviour("a", mockprovider.Behaviour{Errors: []mockprovider.InjectedError{{Errcode: -1, Ratio: 1}}})
			job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 6)}, "streak-of-three")
			v := p.driveUntil(clk, func(v store.JobView) bool { return v.Shards[0].Status == store.ShardPaused }, job.Job.ID)
			if calls := p.mock.Stats()["a"].Calls; calls != 3 {
				t.Fatalf("%d calls before the breaker opened, want the streak of 3", calls)
			}
			br, err := p.store.GetBreaker(ctx, tenant, "a")
			if err != nil || br.State != store.BreakerOpen || br.Reason != "3 failed sends in a row" {
				t.Fatalf("breaker %+v %v, want open for 3 failed sends in a row", br, err)
			}
			if c := v.Counts(); c.Pending != 6 || c.Failed != 0 {
				t.Fatalf("counts %+v, want the 6 items pending", c)
			}
			for _, it := range p.items(job.Job.ID) {
				if it.Attempts != 0 {
					t.Errorf("item %d has %d attempts after the breaker opened, want its attempt given back", it.Seq, it.Attempts)
				}
			}
		})
	}
}

// downAfterFailuresProvider answers its first calls "retry later" for
// every recipient and every call after them "account down" (a credential
// revoked while a streak of failures was running); it delivers nothing.
type downAfterFailuresProvider struct {
	provider.Provider
	retries atomic.Int64 // calls still to answer "retry later"
}

func (d *downAfterFailuresProvider) Send(_ context.Context, req provider.SendRequest) (provider.SendResult, error) {
	r := provider.RecipientResult{Category: provider.AccountDown, Code: "42001", Message: "access token expired"}
	if d.retries.Add(-1) >= 0 {
		r = provider.RecipientResult{Category: provider.Retryable, Code: "-1", Message: "system busy"}
	}
	out := provider.SendResult{Recipients: make([]provider.RecipientResult, len(req.To))}
	for i := range out.Recipients {
		out.Recipients[i] = r
	}
	return out, nil
}

// TestAccountDownGivesBackTheStreakBeforeIt: when the account goes down
// (every call refused) in the middle of a streak of failed sends, the
// breaker opens and the items of that streak get their attempt back as
// well as those refused for the account: the outage burns none of them.
func TestAccountDownGivesBackTheStreakBeforeIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 2, MaxAttempts: 5, BackoffBase: time.Minute, BackoffCap: time.Minute})
	breakerAccount(p, "a", 5)
	prov := &downAfterFailuresProvider{Provider: p.sender.Provider}
	prov.retries.Store(1)
	p.sender.Provider = prov
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 6)}, "down-mid-streak")
	v := p.driveUntil(clk, func(v store.JobView) bool { return v.Shards[0].Status == store.ShardPaused }, job.Job.ID)
	br, err := p.store.GetBreaker(ctx, tenant, "a")
	if err != nil || br.State != store.BreakerOpen {
		t.Fatalf("breaker %+v %v, want open", br, err)
	}
	if c := v.Counts(); c.Pending != 6 || c.Failed != 0 {
		t.Fatalf("counts %+v, want the 6 items pending", c)
	}
	for _, it := range p.items(job.Job.ID) {
		if it.Attempts != 0 {
			t.Errorf("item %d has %d attempts after the account went down, want its attempt given back", it.Seq, it.Attempts)
		}
	}
}

// restoreRacedStore abandons the first item of the breaker's restore of a
// streak just before the restore is written, as another writer would
// between the streak's outcomes and their restore: that item's update is
// rejected.
type restoreRacedStore struct {
	store.Store
	raced atomic.Bool
}

func (s *restoreRacedStore) UpdateItems(ctx context.Context, p store.UpdateItemsParams) (store.UpdateItemsResult, error) {
	if len(p.Updates) > 0 && p.Updates[0].Error != nil && p.Updates[0].Error.Code == "breaker" && s.raced.CompareAndSwap(false, true) {
		u := p.Updates[0]
		if _, err := s.Store.UpdateItems(ctx, store.UpdateItemsParams{JobID: p.JobID, Index: p.Index, At: p.At, Updates: []store.ItemUpdate{{
			Seq: u.Seq, From: u.From, To: store.ItemAbandoned, Error: &store.ItemError{Category: store.CategoryCancelled, Message: "raced"},
		}}}); err != nil {
			return store.UpdateItemsResult{}, err
		}
	}
	return s.Store.UpdateItems(ctx, p)
}

// TestStreakRestoreGivesBackOnlyTheBudgetOfWhatItRestored: the streak's
// items restored when the breaker opens get their budget back, and only
// they: an item another writer changed meanwhile (its restore rejected)
// was sent and still counts against the job's budget.
func TestStreakRestoreGivesBackOnlyTheBudgetOfWhatItRestored(t *testing.T) {
	t.Parallel()
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 3, MaxAttempts: 5, BackoffBase: time.Minute, BackoffCap: time.Minute})
	breakerAccount(p, "a", 3)
	_ = p.mock.SetBehaviour("a", mockprovider.Behaviour{Errors: []mockprovider.InjectedError{{Errcode: -1, Ratio: 1}}})
	raced := &restoreRacedStore{Store: p.store}
	p.sender.Store = raced
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 6), Budget: 10}, "restore-raced")
	v := p.driveUntil(clk, func(v store.JobView) bool { return v.Shards[0].Status == store.ShardPaused }, job.Job.ID)
	if !raced.raced.Load() {
		t.Fatal("the breaker restored no streak")
	}
	if calls := p.mock.Stats()["a"].Calls; calls != 3 {
		t.Fatalf("%d calls, want the streak of 3", calls)
	}
	if v.Job.BudgetUsed != 1 {
		t.Fatalf("budget used %d after 3 sends of which 2 were restored, want 1", v.Job.BudgetUsed)
	}
}
