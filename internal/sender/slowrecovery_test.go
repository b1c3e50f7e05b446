package sender_test

import (
	"context"
	"testing"

	"github.com/qunfa/qunfa/internal/mockprovider"
	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/submit"
)

// TestSlowDownRecoversAfterCleanBatches: a shard slowed down by the
// provider's rate limiting (45009) speeds up again by a tenth of the full
// rate per clean batch once the limiting stops, back to the full rate,
// and stays there: the shard's slow factor is 1 when the job completes.
func TestSlowDownRecoversAfterCleanBatches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 2})
	p.account("a", 100, 100, 0, 1)
	if err := p.mock.SetBehaviour("a", mockprovider.Behaviour{Errors: []mockprovider.InjectedError{{Errcode: 45009, Ratio: 1}}}); err != nil {
		t.Fatal(err)
	}
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 60)}, "slow-recovery")
	p.step(ctx)
	v, err := p.store.GetJob(ctx, job.Job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if sf := v.Shards[0].SlowFactor; sf > 0.5 || sf <= 0 {
		t.Fatalf("slow factor %v after rate limiting, want at most half speed", sf)
	}
	if err := p.mock.SetBehaviour("a", mockprovider.Behaviour{}); err != nil {
		t.Fatal(err)
	}
	v = p.driveUntil(clk, final, job.Job.ID)
	if v.Job.Status != store.JobCompleted || v.Counts().Confirmed != 60 {
		t.Fatalf("%s %+v", v.Job.Status, v.Counts())
	}
	if sf := v.Shards[0].SlowFactor; sf != 1 {
		t.Fatalf("slow factor %v after 30 clean batches, want back to 1 (full speed)", sf)
	}
	p.checkExactlyOnce(job.Job.ID)
}
