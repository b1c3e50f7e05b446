package reconcile_test

import (
	"context"
	"testing"

	"github.com/qunfa/qunfa/internal/alert"
	"github.com/qunfa/qunfa/internal/alert/alerttest"
	"github.com/qunfa/qunfa/internal/reconcile"
	"github.com/qunfa/qunfa/internal/store"
)

// TestSettleMsgCallFindsItsItemsAcrossAPageBoundary: without an item
// getter, the items of an event's call are read by listing the shard's
// submitted items; a call whose items straddle two pages of that listing
// has every one of them published, those on the second page too.
func TestSettleMsgCallFindsItsItemsAcrossAPageBoundary(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	const n = 2 * store.MaxPutItems
	id := f.job(t, 1, n, n, 0)
	var seqs []int64
	for seq := int64(store.MaxPutItems - 9); seq <= store.MaxPutItems+10; seq++ {
		seqs = append(seqs, seq)
	}
	call := store.MsgCall{Account: "acct-0", MsgID: "m-straddle", JobID: id, Shard: 0, ClaimID: "c", Seqs: seqs, At: f.clk.Now()}
	if err := f.store.PutMsgCall(ctx, call); err != nil {
		t.Fatal(err)
	}
	outcomes := &alerttest.Recorder{}
	f.rec.MsgCalls, f.rec.Outcomes = f.store, outcomes
	if got, err := f.rec.SettleMsgCall(ctx, "acct-0", "m-straddle", reconcile.Settlement{To: store.ItemConfirmed}); err != nil || got != len(seqs) {
		t.Fatalf("settle: %d, %v; want %d", got, err, len(seqs))
	}
	items := f.items(t, id)
	published := map[int64]bool{}
	for _, e := range outcomes.Of(alert.ItemOutcomes) {
		for _, o := range e.Detail.(alert.ItemOutcomesDetail).Items {
			if o.Seq < seqs[0] || o.Seq > seqs[len(seqs)-1] || published[o.Seq] || o.To != items[o.Seq].To {
				t.Fatalf("outcome %+v: not of the call's items, twice, or of another recipient", o)
			}
			published[o.Seq] = true
		}
	}
	if len(published) != len(seqs) {
		t.Fatalf("%d outcomes published, want one for each of the call's %d items (pages of %d)", len(published), len(seqs), store.MaxPutItems)
	}
}
