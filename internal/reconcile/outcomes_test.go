package reconcile_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/alert"
	"github.com/qunfa/qunfa/internal/alert/alerttest"
	"github.com/qunfa/qunfa/internal/store"
)

// refusingPublisher refuses every event: the bus is down, or the process
// died before it published.
type refusingPublisher struct{}

func (refusingPublisher) Publish(context.Context, ...alert.Event) error {
	return errors.New("bus unavailable")
}

// TestSettledOutcomesNotPublishedArePublishedAgain: a pass settles the
// look-ups of a cancelled job's final shard (no more turns) and cannot
// publish their outcomes; the shard stays dirty and marked, and the next
// pass publishes every one of them before it clears the mark.
func TestSettledOutcomesNotPublishedArePublishedAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	id := f.job(t, 1, 4, 4, 0)
	f.deliveredThenCancelled(t, id)
	f.clk.Advance(2 * time.Minute)
	f.rec.Outcomes = refusingPublisher{}
	if _, err := f.rec.Run(ctx); err != nil {
		t.Fatal(err)
	}
	sh, err := f.store.GetShard(ctx, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	if sh.Counts.Submitted != 0 || sh.Counts.Confirmed == 0 || !sh.Dirty || !store.OutcomesMayBeUnpublished(sh) {
		t.Fatalf("after the pass that could not publish: counts %+v dirty %v outside changes %d; want settled, dirty, marked", sh.Counts, sh.Dirty, sh.OutcomesOutside)
	}
	status := map[int64]store.ItemStatus{}
	page, err := f.store.ListItems(ctx, store.ListItemsParams{JobID: id})
	if err != nil {
		t.Fatal(err)
	}
	var want []int64
	for _, it := range page.Items {
		status[it.Seq] = it.Status
		want = append(want, it.Seq)
	}
	slices.Sort(want)

	outcomes := &alerttest.Recorder{}
	f.rec.Outcomes = outcomes
	f.clk.Advance(time.Minute)
	if _, err := f.rec.Run(ctx); err != nil {
		t.Fatal(err)
	}
	var seqs []int64
	for _, e := range outcomes.Of(alert.ItemOutcomes) {
		d := e.Detail.(alert.ItemOutcomesDetail)
		if e.Tenant != "t1" || d.JobID != id {
			t.Errorf("event %+v", e)
		}
		for _, o := range d.Items {
			if o.Status != string(status[o.Seq]) || o.At.IsZero() {
				t.Errorf("outcome %+v", o)
			}
			seqs = append(seqs, o.Seq)
		}
	}
	slices.Sort(seqs)
	if len(want) != 4 || !slices.Equal(seqs, want) {
		t.Fatalf("published again %v, want the four settled items %v", seqs, want)
	}
	if sh, _ := f.store.GetShard(ctx, id, 0); sh.Dirty || store.OutcomesMayBeUnpublished(sh) {
		t.Errorf("the shard stays dirty (%v) or marked (%d outside changes) after its outcomes went out", sh.Dirty, sh.OutcomesOutside)
	}
}
