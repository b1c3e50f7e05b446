package reconcile_test

import (
	"context"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/alert"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/store/storetest"
)

// TestCountsMismatchCountsTheItemsThere: a running job one of whose items
// was never written (its shard counts 3 pending, its items are 2) is
// reported by CountsMismatch with the number of items the job really
// holds after the recount — 5 of its total of 6, so the operator sees one
// is missing — not the stale stored sum, which still says 6.
func TestCountsMismatchCountsTheItemsThere(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	p, items := storetest.NewJob("t1", 2, 3)
	if _, err := f.store.CreateJob(ctx, p); err != nil {
		t.Fatal(err)
	}
	var written []store.Item
	for _, it := range items {
		if it.Shard == 1 && it.Seq == items[len(items)-1].Seq {
			continue // lost: never written
		}
		written = append(written, it)
	}
	if err := f.store.PutItems(ctx, store.PutItemsParams{JobID: p.Job.ID, Items: written}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.TransitionJob(ctx, store.TransitionJobParams{JobID: p.Job.ID, To: store.JobRunning, At: f.clk.Now()}); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if _, err := f.store.TransitionShard(ctx, store.TransitionShardParams{JobID: p.Job.ID, Index: i, To: store.ShardRunning, At: f.clk.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	f.clk.Advance(5 * time.Minute) // stale: the pass re-drives the shards and checks the job
	rep, err := f.rec.Run(ctx)
	if err != nil || rep.Mismatches != 1 {
		t.Fatalf("pass: %+v %v; want one mismatch", rep, err)
	}
	ev := f.alerts.Of(alert.CountsMismatch)
	if len(ev) != 1 {
		t.Fatalf("mismatch alerts %+v, want 1", ev)
	}
	d := ev[0].Detail.(alert.CountsMismatchDetail)
	if d.Total != 6 || d.Counted != 5 || d.Shard == nil || *d.Shard != 1 || d.Stored == nil || d.Stored.Pending != 3 || d.Items == nil || d.Items.Pending != 2 {
		t.Fatalf("detail %+v; want total 6, counted 5, shard 1 stored pending 3, items pending 2", d)
	}
}
