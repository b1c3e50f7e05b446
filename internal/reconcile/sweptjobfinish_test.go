package reconcile_test

import (
	"context"
	"testing"

	"github.com/qunfa/qunfa/internal/alert"
	"github.com/qunfa/qunfa/internal/store"
)

// TestSweptShardsJobIsFinished: a job whose last shard completed and was
// then left dirty by an outside change that died before its fold gets no
// more turns, and no shard of it is stale; the pass that sweeps the shard
// checks the job too, and finishes it (JobFinished) — otherwise it would
// stay running for ever with nothing left to send.
func TestSweptShardsJobIsFinished(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := f.dirtyFinishedShard(t)
	if v := f.view(t, id); v.Job.Status != store.JobRunning || !v.Shards[0].Dirty {
		t.Fatalf("fixture: job %s, shard dirty %v; want a running job with a dirty completed shard", v.Job.Status, v.Shards[0].Dirty)
	}
	rep, err := f.rec.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Swept != 1 {
		t.Fatalf("report %+v; want the dirty shard swept", rep)
	}
	v := f.view(t, id)
	if v.Job.Status != store.JobCompleted || v.Shards[0].Dirty {
		t.Fatalf("job %s, shard dirty %v after the pass; want the job completed and the mark cleared", v.Job.Status, v.Shards[0].Dirty)
	}
	finished := 0
	for _, e := range f.alerts.Of(alert.JobFinished) {
		if d := e.Detail.(alert.JobFinishedDetail); d.JobID == id && d.Status == string(store.JobCompleted) {
			finished++
		}
	}
	if finished != 1 {
		t.Fatalf("%d JobFinished alerts for the job, want 1", finished)
	}
}
