package reconcile_test

import (
	"context"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/provider"
	"github.com/qunfa/qunfa/internal/store"
)

// TestSettledShardGetsATurnAtOnce: a shard whose submitted items the
// reconciler settles (confirmed, or left under review) gets its next turn
// from that pass — the turn finishes the shard and the job — not from a
// redrive once the shard has gone StaleAfter without progress.
func TestSettledShardGetsATurnAtOnce(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		answer provider.Status
		err    error
	}{
		{"delivered", provider.StatusDelivered, nil},
		{"no status look-up", "", provider.ErrStatusUnsupported},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			f.rec.StaleAfter = time.Hour // no shard is stale: only settling kicks
			ctx := context.Background()
			id := f.job(t, 2, 3, 2, 0)
			_, q := f.answering(id, func(int64) (provider.Status, error) { return tt.answer, tt.err })
			f.clk.Advance(2 * time.Minute)
			rep, err := f.rec.Run(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Redriven != 0 {
				t.Fatalf("report %+v: a shard was redriven, the test needs none stale", rep)
			}
			v := f.view(t, id)
			got := q.Shards()
			for _, sh := range v.Shards {
				if turn, ok := got[sh.Index]; !ok || turn != sh.Turn+1 {
					t.Errorf("shard %d (turn %d) got turns %v after its items were settled, want its next turn", sh.Index, sh.Turn, got)
				}
			}
		})
	}
}

// TestSweepKeepsTheMarkWhileItemsAreSubmitted: a dirty final shard whose
// items are still submitted (calls of a cancelled job's last turn not yet
// answered) keeps its mark — a turn may still record their outcomes, and
// the recount would miss them — until a later pass finds nothing left to
// move; then it is recounted, clean, with counts that match its items.
func TestSweepKeepsTheMarkWhileItemsAreSubmitted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	id := f.job(t, 1, 3, 3, 0)
	f.deliveredThenCancelled(t, id)
	if _, err := f.store.MarkShardDirty(ctx, id, 0); err != nil {
		t.Fatal(err)
	}
	rep, err := f.rec.Run(ctx) // the items are younger than SettleAfter: not looked up
	if err != nil {
		t.Fatal(err)
	}
	if sh := f.view(t, id).Shards[0]; !sh.Dirty || rep.Swept != 0 || sh.Counts.Submitted != 3 {
		t.Fatalf("pass %+v, shard %+v: want the mark kept while 3 items are submitted", rep, sh)
	}
	f.clk.Advance(2 * time.Minute)
	for range 2 {
		if _, err := f.rec.Run(ctx); err != nil {
			t.Fatal(err)
		}
		f.clk.Advance(time.Minute)
	}
	if sh := f.view(t, id).Shards[0]; sh.Dirty || sh.Counts != (store.Counts{Confirmed: 3}) {
		t.Fatalf("after the items were settled: shard %+v, want clean with 3 confirmed", sh)
	}
}
