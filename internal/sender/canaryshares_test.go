package sender_test

import (
	"testing"

	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/submit"
)

// TestCanaryShareLargerThanABatch: each shard sends exactly its share of
// the canary even when the share takes several claims, the later shards'
// as well as the first's — a shard's canary is the first items of its own
// seqs, which start after all the items of the shards before it. Then the
// job pauses for approval, having sent the canary and nothing more.
func TestCanaryShareLargerThanABatch(t *testing.T) {
	t.Parallel()
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 4})
	p.account("a", 1000, 1000, 0, 1)
	p.account("b", 1000, 1000, 0, 1)
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a", "b"}, 20),
		Canary: &submit.Canary{Count: 12}}, "canary-shares")
	v := p.driveUntil(clk, func(v store.JobView) bool { return v.Job.Status == store.JobPaused }, job.Job.ID)
	if v.Job.PauseReason != store.PauseCanary {
		t.Fatalf("paused for %q, want canary", v.Job.PauseReason)
	}
	n, per := 0, map[string]int{}
	for _, ds := range p.deliveries() {
		n += len(ds)
		for _, d := range ds {
			per[d.GUID]++
		}
	}
	if n != 12 || per["a"] != 6 || per["b"] != 6 {
		t.Fatalf("the canary delivered %d (%v), want 12 spread as a:6 b:6 (shares of 6, claims of 4)", n, per)
	}
	if c, f := store.CanaryResults(v); c != 12 || f != 0 {
		t.Fatalf("canary results %d confirmed %d failed, want 12 confirmed", c, f)
	}
}
