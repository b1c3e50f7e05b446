package sender_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/alert"
	"github.com/qunfa/qunfa/internal/alert/alerttest"
	"github.com/qunfa/qunfa/internal/mockprovider"
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
// their own outcomes — with their attempt given back, and gives back the
// budget it reserved for them, so the job still sends its whole budget.
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
			// Released unsent: the claim's attempt is given back.
			if it.Attempts != 0 {
				t.Errorf("item %d pending with %d attempts, want 0", it.Seq, it.Attempts)
			}
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

// TestBudgetCountsOnlyWhatWasClaimed: a batch reserves budget for the
// shard's pending items, and its claim may find fewer of them due (here
// every item waits out a backoff after a failed send): what it did not
// claim goes back, so the budget used is the number of sends made, however
// often the turn looked for due items meanwhile.
func TestBudgetCountsOnlyWhatWasClaimed(t *testing.T) {
	t.Parallel()
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 4, MaxAttempts: 2, BackoffBase: 10 * time.Second, BackoffCap: 10 * time.Second})
	p.account("a", 1000, 1000, 0, 1)
	if err := p.mock.SetBehaviour("a", mockprovider.Behaviour{Errors: []mockprovider.InjectedError{{Errcode: -1, Ratio: 1}}}); err != nil {
		t.Fatal(err)
	}
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 4), Budget: 20}, "budget-claimed")
	v := p.driveUntil(clk, final, job.Job.ID)
	if v.Job.Status != store.JobFailed || v.Counts().Failed != 4 {
		t.Fatalf("job %s %+v, want failed with every item exhausted", v.Job.Status, v.Counts())
	}
	calls := p.mock.Stats()["a"].Calls
	if calls != 8 || v.Job.BudgetUsed != int64(calls) {
		t.Fatalf("budget used %d for %d sends, want 8 for 8 (two attempts of 4 items)", v.Job.BudgetUsed, calls)
	}
}

// TestFailuresByCategoryWhileRunning: the failures a job shows by
// category add up to its failed items while it runs, not only once a
// recount finishes it: here every send is refused permanently (invalid
// recipient) and the job pauses at its budget with four items failed.
func TestFailuresByCategoryWhileRunning(t *testing.T) {
	t.Parallel()
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 2})
	p.account("a", 1000, 1000, 0, 1)
	if err := p.mock.SetBehaviour("a", mockprovider.Behaviour{Errors: []mockprovider.InjectedError{{Errcode: mockprovider.CodeRecipientInvalid, Ratio: 1}}}); err != nil {
		t.Fatal(err)
	}
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 8), Budget: 4}, "failures-running")
	v := p.driveUntil(clk, func(v store.JobView) bool { return v.Job.Status == store.JobPaused }, job.Job.ID)
	if c := v.Counts(); c.Failed != 4 || c.Pending != 4 {
		t.Fatalf("counts %+v at the budget pause, want 4 failed and 4 pending", c)
	}
	if f := v.Failures(); f[store.CategoryPermanent] != 4 {
		t.Fatalf("failures %v, want the 4 failed items under %s", f, store.CategoryPermanent)
	}
}

// settledMeanwhile is a store on which the first item of the first batch
// of outcomes is settled by someone else (an operator's resolution, the
// reconciler) right before the sender records it: the sender's update of
// that item is rejected.
type settledMeanwhile struct {
	store.Store
	mu   sync.Mutex
	seq  int64
	done bool
}

func (s *settledMeanwhile) UpdateItems(ctx context.Context, p store.UpdateItemsParams) (store.UpdateItemsResult, error) {
	s.mu.Lock()
	first := !s.done && len(p.Updates) > 0 && p.Updates[0].To == store.ItemConfirmed && p.Updates[0].ClaimID != ""
	if first {
		s.done, s.seq = true, p.Updates[0].Seq
	}
	s.mu.Unlock()
	if first {
		u := p.Updates[0]
		before, err := store.BeginOutsideTurn(ctx, s.Store, p.JobID, p.Index)
		if err != nil {
			return store.UpdateItemsResult{}, err
		}
		res, err := s.Store.UpdateItems(ctx, store.UpdateItemsParams{JobID: p.JobID, Index: p.Index, At: p.At, Updates: []store.ItemUpdate{
			{Seq: u.Seq, From: store.ItemSubmitted, ClaimID: u.ClaimID, To: store.ItemConfirmed, MsgID: "settled-meanwhile"}}})
		if err != nil || len(res.Rejected) > 0 {
			return store.UpdateItemsResult{}, fmt.Errorf("settle meanwhile: %+v %v", res, err)
		}
		if _, err := store.FoldOutsideTurn(ctx, s.Store, before, res.Delta, res.FailuresDelta); err != nil {
			return store.UpdateItemsResult{}, err
		}
	}
	return s.Store.UpdateItems(ctx, p)
}

// TestRejectedOutcomesAreNotPublished: an outcome the store rejects (the
// item was settled by someone else meanwhile) is not published as an
// ItemOutcomes event by the sender: it is not the item's outcome. Every
// other item's outcome is published once.
func TestRejectedOutcomesAreNotPublished(t *testing.T) {
	t.Parallel()
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 4})
	outcomes := &alerttest.Recorder{}
	p.sender.Outcomes = outcomes
	settled := &settledMeanwhile{Store: p.store}
	p.sender.Store = settled
	p.account("a", 1000, 1000, 0, 1)
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 8)}, "rejected-outcomes")
	v := p.driveUntil(clk, final, job.Job.ID)
	if !settled.done || v.Job.Status != store.JobCompleted || v.Counts().Confirmed != 8 {
		t.Fatalf("settled meanwhile %v; job %s %+v, want completed with 8 confirmed", settled.done, v.Job.Status, v.Counts())
	}
	seen := map[int64]int{}
	for _, e := range outcomes.Of(alert.ItemOutcomes) {
		for _, o := range e.Detail.(alert.ItemOutcomesDetail).Items {
			seen[o.Seq]++
		}
	}
	if seen[settled.seq] != 0 {
		t.Fatalf("the outcome of item %d, settled by someone else, was published by the sender", settled.seq)
	}
	if len(seen) != 7 {
		t.Fatalf("outcomes published for %d items, want the 7 the sender settled", len(seen))
	}
	for seq, n := range seen {
		if n != 1 {
			t.Errorf("outcome of item %d published %d times", seq, n)
		}
	}
}
