package sender_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/store/sqlitestore"
	"github.com/qunfa/qunfa/internal/store/storetest"
	"github.com/qunfa/qunfa/internal/submit"
)

// TestLostClaimReleasesOnlyItsOwnItems: when a turn's claim answer is lost
// while another claim (a turn before it, its calls still running) holds
// items of the same shard, the turn releases the items of its own claim
// only — the other claim's items stay submitted under it, to be settled by
// their own outcomes — and gives back the budget it reserved for them, so
// the job still sends its whole budget.
func TestLostClaimReleasesOnlyItsOwnItems(t *testing.T) {
	t.Parallel()
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 4})
	p.account("a", 1000, 1000, 0, 1)
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 10), Budget: 6}, "lostclaim-other")
	ctx := context.Background()
	before, err := store.BeginOutsideTurn(ctx, p.store, job.Job.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	other, err := p.store.ClaimItems(ctx, store.ClaimItemsParams{JobID: job.Job.ID, Index: 0, Max: 2, Now: clk.Now(), ClaimID: "an-earlier-turn"})
	if err != nil || len(other.Items) != 2 {
		t.Fatalf("claim: %d items, %v", len(other.Items), err)
	}
	if _, err := store.FoldOutsideTurn(ctx, p.store, before, other.Delta, nil); err != nil {
		t.Fatal(err)
	}
	lostClaim(t, p, false)
	held, pending := 0, 0
	for _, it := range p.items(job.Job.ID) {
		switch it.Status {
		case store.ItemSubmitted:
			if it.ClaimID != "an-earlier-turn" {
				t.Errorf("item %d left submitted under the lost claim %q", it.Seq, it.ClaimID)
			}
			held++
		case store.ItemPending:
			pending++
		default:
			t.Errorf("item %d %s", it.Seq, it.Status)
		}
	}
	if held != 2 || pending != 8 {
		t.Fatalf("%d items held by the earlier claim, %d pending; want 2 and 8", held, pending)
	}
	v, err := p.store.GetJob(ctx, job.Job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if v.Job.BudgetUsed != 0 {
		t.Fatalf("budget used %d after a claim released unsent; want it all given back", v.Job.BudgetUsed)
	}
	if len(p.deliveries()) != 0 {
		t.Fatalf("delivered %d", len(p.deliveries()))
	}
}

// racedFirstUpdate pages ListItems 3 items at a time and, just before the
// first UpdateItems, claims the first item it updates for another sender:
// the update is rejected for that item, as when a turn races the abandon.
type racedFirstUpdate struct {
	store.Store
	raced bool
}

func (r *racedFirstUpdate) ListItems(ctx context.Context, p store.ListItemsParams) (store.ListItemsResult, error) {
	p.Limit = 3
	return r.Store.ListItems(ctx, p)
}

func (r *racedFirstUpdate) UpdateItems(ctx context.Context, p store.UpdateItemsParams) (store.UpdateItemsResult, error) {
	if !r.raced && len(p.Updates) > 0 {
		r.raced = true
		before, err := store.BeginOutsideTurn(ctx, r.Store, p.JobID, p.Index)
		if err != nil {
			return store.UpdateItemsResult{}, err
		}
		c, err := r.Store.ClaimItems(ctx, store.ClaimItemsParams{JobID: p.JobID, Index: p.Index, Max: 1, Now: p.At, ClaimID: "a-racing-turn"})
		if err != nil || len(c.Items) != 1 || c.Items[0].Seq != p.Updates[0].Seq {
			return store.UpdateItemsResult{}, fmt.Errorf("racing claim: %+v %v", c.Items, err)
		}
		if _, err := store.FoldOutsideTurn(ctx, r.Store, before, c.Delta, nil); err != nil {
			return store.UpdateItemsResult{}, err
		}
	}
	return r.Store.UpdateItems(ctx, p)
}

// TestAbandonPendingGoesOnPastARacedItem: abandoning a cancelled shard's
// pending items goes on past a page in which one item was taken meanwhile
// (a racing turn claimed it): every other pending item of the shard is
// abandoned, not only those of the pages before.
func TestAbandonPendingGoesOnPastARacedItem(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "store.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	p, items := storetest.NewJob(tenant, 1, 10)
	if _, err := st.CreateJob(ctx, p); err != nil {
		t.Fatal(err)
	}
	if err := st.PutItems(ctx, store.PutItemsParams{JobID: p.Job.ID, Items: items}); err != nil {
		t.Fatal(err)
	}
	raced := &racedFirstUpdate{Store: st}
	if err := sender.AbandonPending(ctx, raced, p.Job.ID, 0, "job cancelled", storetest.Epoch.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if !raced.raced {
		t.Fatal("no update was raced")
	}
	sh, err := st.GetShard(ctx, p.Job.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if sh.Counts != (store.Counts{Submitted: 1, Abandoned: 9}) {
		t.Fatalf("shard counts %+v, want the raced item submitted and the 9 others abandoned", sh.Counts)
	}
}

// TestBudgetCountsOnlyWhatWasClaimed: a batch reserves budget for a full
// claim, and the claim may find fewer items due (here the last batch finds
// one of four): what it did not claim goes back, so the budget used is the
// number of sends, and a job whose budget covers its recipients completes
// without a budget pause.
func TestBudgetCountsOnlyWhatWasClaimed(t *testing.T) {
	t.Parallel()
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 4})
	p.account("a", 1000, 1000, 0, 1)
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 5), Budget: 7}, "budget-claimed")
	v := p.driveUntil(clk, final, job.Job.ID)
	if v.Job.Status != store.JobCompleted || v.Counts().Confirmed != 5 {
		t.Fatalf("job %s %+v, want completed with 5 confirmed", v.Job.Status, v.Counts())
	}
	if v.Job.BudgetUsed != 5 || len(p.deliveries()) != 5 {
		t.Fatalf("budget used %d for %d deliveries, want 5 for 5", v.Job.BudgetUsed, len(p.deliveries()))
	}
}
