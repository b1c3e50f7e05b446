package sender_test

import (
	"context"
	"testing"

	"github.com/qunfa/qunfa/internal/mockprovider"
	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/submit"
)

// TestShardCountsAttemptsAndFailures: the shard counts every provider
// attempt and, of them, those that failed — a recipient the provider
// refused counts as a failed attempt, a delivered one does not — the
// figures the breaker's failure rate is judged on.
func TestShardCountsAttemptsAndFailures(t *testing.T) {
	t.Parallel()
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 3})
	p.account("a", 1000, 1000, 0, 1)
	if err := p.mock.SetBehaviour("a", mockprovider.Behaviour{InvalidToIDs: []string{"user-1", "user-4"}}); err != nil {
		t.Fatal(err)
	}
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 6)}, "attempts")
	v := p.driveUntil(clk, final, job.Job.ID)
	if c := v.Counts(); c.Confirmed != 4 || c.Failed != 2 {
		t.Fatalf("counts %+v, want 4 confirmed and 2 failed", c)
	}
	sh, err := p.store.GetShard(context.Background(), job.Job.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if sh.Attempts != 6 || sh.AttemptFailures != 2 {
		t.Errorf("shard attempts %d, failures %d; want 6 and 2 (the two refused recipients)", sh.Attempts, sh.AttemptFailures)
	}
}
