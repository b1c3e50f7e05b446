package sender_test

import (
	"context"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/alert"
	"github.com/qunfa/qunfa/internal/mockprovider"
	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/submit"
)

func breakerAccount(p *pipeline, id string, consecutive int) {
	p.putAccount(store.Account{ID: id, RatePerSec: 1000, Burst: 1000, MaxRecipientsPerCall: 1,
		Breaker: store.BreakerConfig{ConsecutiveFailures: consecutive, CooldownSec: 30}})
}

// TestBreakerAccountDown: an account whose every call fails (expired
// credential) opens its breaker at its first answer, its shard pauses
// (reason breaker), the other account finishes; after the account
// recovers, the probe closes the breaker and every recipient gets its
// message exactly once, with no item burned.
func TestBreakerAccountDown(t *testing.T) {
	t.Parallel()
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 5, TurnDuration: 5 * time.Second})
	breakerAccount(p, "down", 5)
	breakerAccount(p, "ok", 5)
	if err := p.mock.SetBehaviour("down", mockprovider.Behaviour{Down: true}); err != nil {
		t.Fatal(err)
	}
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"down", "ok"}, 20)}, "down")
	ctx := context.Background()
	v := p.driveUntil(clk, func(v store.JobView) bool {
		return v.Shards[0].Status == store.ShardPaused && v.Shards[1].Status == store.ShardCompleted
	}, job.Job.ID)
	if v.Shards[0].PauseReason != store.PauseBreaker || v.Job.Status != store.JobRunning {
		t.Fatalf("shard %+v job %s", v.Shards[0], v.Job.Status)
	}
	if calls := p.mock.Stats()["down"].Calls; calls > 5 {
		t.Fatalf("the down account got %d calls before its breaker opened, want at most one batch (5)", calls)
	}
	br, err := p.store.GetBreaker(ctx, tenant, "down")
	if err != nil || br.State != store.BreakerOpen {
		t.Fatalf("breaker %+v %v", br, err)
	}
	if len(p.alerts.Of(alert.BreakerOpened)) != 1 {
		t.Fatalf("BreakerOpened alerts: %+v", p.alerts.Of(alert.BreakerOpened))
	}
	for _, it := range p.items(job.Job.ID) {
		if it.Account == "down" && (it.Status != store.ItemPending || it.Attempts != 0) {
			t.Fatalf("item %+v burned by the outage", it)
		}
	}
	// Still down after the cool-down: the probe fails and the breaker
	// reopens with a doubled cool-down.
	clk.Advance(31 * time.Second)
	p.driveUntil(clk, func(store.JobView) bool {
		b, _ := p.store.GetBreaker(ctx, tenant, "down")
		return b.Opens == 2
	}, job.Job.ID)
	br, _ = p.store.GetBreaker(ctx, tenant, "down")
	if br.State != store.BreakerOpen || br.Until.Sub(br.OpenedAt) != 60*time.Second {
		t.Fatalf("after a failed probe: %+v", br)
	}
	_ = p.mock.SetBehaviour("down", mockprovider.Behaviour{})
	v = p.driveUntil(clk, final, job.Job.ID)
	if v.Job.Status != store.JobCompleted {
		t.Fatalf("status %s counts %+v", v.Job.Status, v.Counts())
	}
	if br, _ := p.store.GetBreaker(ctx, tenant, "down"); br.State != store.BreakerClosed {
		t.Fatalf("breaker after recovery: %+v", br)
	}
	if len(p.alerts.Of(alert.BreakerClosed)) != 1 {
		t.Fatalf("BreakerClosed alerts: %+v", p.alerts.Of(alert.BreakerClosed))
	}
	p.checkExactlyOnce(job.Job.ID)
}

// TestBreakerStreak: a streak of failed sends as long as the account's
// consecutive_failures opens the breaker; the items of the streak go back
// to pending with their attempts given back instead of being exhausted.
func TestBreakerStreak(t *testing.T) {
	t.Parallel()
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 2, MaxAttempts: 2, BackoffBase: time.Millisecond, BackoffCap: time.Millisecond})
	breakerAccount(p, "a", 4)
	_ = p.mock.SetBehaviour("a", mockprovider.Behaviour{Errors: []mockprovider.InjectedError{{Errcode: -1, Ratio: 1}}})
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 10)}, "streak")
	v := p.driveUntil(clk, func(v store.JobView) bool { return v.Shards[0].Status == store.ShardPaused }, job.Job.ID)
	if c := v.Counts(); c.Failed != 0 || c.Pending != 10 {
		t.Fatalf("counts after the breaker opened %+v: the streak's items must not be burned", c)
	}
	if calls := p.mock.Stats()["a"].Calls; calls < 4 || calls > 6 {
		t.Fatalf("%d calls before opening, want the streak of 4 (+ one batch)", calls)
	}
	_ = p.mock.SetBehaviour("a", mockprovider.Behaviour{})
	clk.Advance(31 * time.Second)
	v = p.driveUntil(clk, final, job.Job.ID)
	if v.Job.Status != store.JobCompleted {
		t.Fatalf("%s %+v %v", v.Job.Status, v.Counts(), v.Failures())
	}
	p.checkExactlyOnce(job.Job.ID)
}
