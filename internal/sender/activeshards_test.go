package sender_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/metrics"
	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/submit"
)

// activeShards is a metrics.Recorder that keeps the active shards gauge
// as the sender moves it: its value and the most it reached.
type activeShards struct {
	metrics.Nop
	mu        sync.Mutex
	now, most int
	starts    int
}

func (a *activeShards) AddActiveShards(_ context.Context, delta int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.now += delta
	a.most = max(a.most, a.now)
	if delta > 0 {
		a.starts++
	}
}

func (a *activeShards) read() (now, most, starts int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.now, a.most, a.starts
}

// TestActiveShardsGaugeFallsBackWhenTurnsEnd: qunfa_active_shards counts
// the shard turns being worked, so after every turn has ended it is back
// at zero, and turns worked one after the other never show more than one
// (a gauge that only grew would read as a stuck fleet on the dashboard).
func TestActiveShardsGaugeFallsBackWhenTurnsEnd(t *testing.T) {
	t.Parallel()
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 2, MaxWait: 300 * time.Millisecond})
	gauge := &activeShards{}
	p.sender.Metrics = gauge
	p.account("a", 2, 2, 0, 1) // a token every 500 ms: several turns, handed back
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 4)}, "gauge")
	v := p.driveUntil(clk, func(v store.JobView) bool { return v.Job.Status == store.JobCompleted }, job.Job.ID)
	if c := v.Counts(); c.Confirmed != 4 {
		t.Fatalf("counts %+v, want 4 confirmed", c)
	}
	now, most, starts := gauge.read()
	if starts < 2 {
		t.Fatalf("%d turns started, want several (the test needs turns one after another)", starts)
	}
	if now != 0 || most != 1 {
		t.Fatalf("active shards %d after %d turns ended (at most %d), want 0 (at most 1)", now, starts, most)
	}
}
