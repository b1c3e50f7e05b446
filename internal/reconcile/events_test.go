package reconcile_test

import (
	"context"
	"errors"
	"maps"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/alert"
	"github.com/qunfa/qunfa/internal/alert/alerttest"
	"github.com/qunfa/qunfa/internal/provider"
	"github.com/qunfa/qunfa/internal/reconcile"
	"github.com/qunfa/qunfa/internal/store"
)

// failingItems is an item getter that always fails.
type failingItems struct{}

func (failingItems) GetItems(context.Context, store.GetItemsParams) ([]store.Item, error) {
	return nil, errors.New("items unreadable")
}

// TestSettleMsgCallDecisions: a provider event about a call's message id
// settles every item still submitted under that call's claim, whether or
// not the items' outcomes are published: with an outcome publisher, the
// items are read first (for their recipients) and published once settled;
// without one, they are not read at all, so an item read that fails does
// not keep the event from settling them. An event that puts the items
// under review (some of the call's messages went out, some did not) leaves
// them submitted, publishes no outcome and alerts ItemsNeedReview, which
// no other event does.
func TestSettleMsgCallDecisions(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name     string
		outcomes bool
		to       store.ItemStatus
	}{
		{"confirmed, outcomes published", true, store.ItemConfirmed},
		{"failed, outcomes published", true, store.ItemFailed},
		{"confirmed, no outcomes: items not read", false, store.ItemConfirmed},
		{"failed, no outcomes: items not read", false, store.ItemFailed},
		{"under review, outcomes published", true, store.ItemSubmitted},
		{"under review, no outcomes", false, store.ItemSubmitted},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
			defer cancel()
			id := f.job(t, 1, 4, 3, 0)
			var seqs []int64
			var account string
			for _, it := range f.items(t, id) {
				if it.Status == store.ItemSubmitted {
					seqs, account = append(seqs, it.Seq), it.Account
				}
			}
			call := store.MsgCall{Account: account, MsgID: "m-1", JobID: id, Shard: 0, ClaimID: "c", Seqs: seqs, At: f.clk.Now()}
			if err := f.store.PutMsgCall(ctx, call); err != nil {
				t.Fatal(err)
			}
			f.rec.MsgCalls = f.store
			outcomes := &alerttest.Recorder{}
			if tt.outcomes {
				f.rec.Outcomes, f.rec.Items = outcomes, f.store
			} else {
				f.rec.Items = failingItems{}
			}
			s := reconcile.Settlement{To: tt.to}
			switch tt.to {
			case store.ItemFailed:
				s.Error = &store.ItemError{Category: store.CategoryPermanent, Code: "send_fail", Message: "refused"}
			case store.ItemSubmitted:
				s.Error = &store.ItemError{Message: "some sent"}
			}
			n, err := f.rec.SettleMsgCall(ctx, account, "m-1", s)
			if err != nil || n != len(seqs) {
				t.Fatalf("settle: %d, %v; want the call's %d items", n, err, len(seqs))
			}
			items := f.items(t, id)
			for _, seq := range seqs {
				if it := items[seq]; it.Status != tt.to || tt.to == store.ItemSubmitted && !store.UnderReview(it) {
					t.Errorf("item %d is %s (%+v), want %s", seq, it.Status, it.Error, tt.to)
				}
			}
			review := tt.to == store.ItemSubmitted
			if c := f.view(t, id).Counts(); c.Submitted != map[bool]int64{true: int64(len(seqs))}[review] || c.Pending != 1 {
				t.Errorf("counts %+v; want only the items under review submitted, the unclaimed item pending", c)
			}
			alerts := f.alerts.Of(alert.ItemsNeedReview)
			if review != (len(alerts) == 1) || len(alerts) > 1 {
				t.Errorf("ItemsNeedReview alerts %+v; want one exactly when the items went under review", alerts)
			} else if review {
				if d := alerts[0].Detail.(alert.ItemsNeedReviewDetail); d.JobID != id || d.Count != len(seqs) || alerts[0].Tenant != "t1" {
					t.Errorf("ItemsNeedReview %+v", alerts[0])
				}
			}
			published := 0
			for _, e := range outcomes.Of(alert.ItemOutcomes) {
				for _, o := range e.Detail.(alert.ItemOutcomesDetail).Items {
					published++
					if o.Status != string(tt.to) || o.MsgID != "m-1" || o.To != items[o.Seq].To {
						t.Errorf("outcome %+v of item %+v", o, items[o.Seq])
					}
				}
			}
			if want := map[bool]int{true: len(seqs)}[tt.outcomes && !review]; published != want {
				t.Errorf("%d outcomes published, want %d", published, want)
			}
		})
	}
}

// TestSettleMsgCallReportsAFailedKick: the items an event settled may be
// the last its shard waits for; when the shard's next turn cannot be
// enqueued, the event's handler gets the error (to be delivered again),
// with the items settled.
func TestSettleMsgCallReportsAFailedKick(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	id := f.job(t, 1, 2, 2, 0)
	call := store.MsgCall{Account: "acct-0", MsgID: "m-1", JobID: id, Shard: 0, ClaimID: "c", Seqs: []int64{1, 2}, At: f.clk.Now()}
	if err := f.store.PutMsgCall(ctx, call); err != nil {
		t.Fatal(err)
	}
	f.rec.MsgCalls, f.rec.Queue = f.store, failFirstShard{f.rec.Queue}
	n, err := f.rec.SettleMsgCall(ctx, "acct-0", "m-1", reconcile.Settlement{To: store.ItemConfirmed})
	if err == nil || n != 2 {
		t.Fatalf("settle with the queue down: %d, %v; want both items settled and the kick's error", n, err)
	}
	if c := f.view(t, id).Counts(); c.Confirmed != 2 {
		t.Fatalf("counts %+v; want both items confirmed", c)
	}
}

// TestSettleMsgCallFindsItsItemsPastAPage: without an item getter, the
// items of an event's call are found by listing the shard's submitted
// items page by page; other items under the same claim (the claim's other
// calls) fill whole pages first, yet every item of this call gets its
// outcome — also when the call's items straddle two pages of that
// listing, those on the second page too.
func TestSettleMsgCallFindsItsItemsPastAPage(t *testing.T) {
	t.Parallel()
	const n = 2 * store.MaxPutItems
	for _, tc := range []struct {
		name        string
		first, last int64
	}{
		{"on the second page", store.MaxPutItems + 1, n},
		{"across a page boundary", store.MaxPutItems - 9, store.MaxPutItems + 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
			defer cancel()
			id := f.job(t, 1, n, n, 0)
			var seqs []int64
			for seq := tc.first; seq <= tc.last; seq++ {
				seqs = append(seqs, seq)
			}
			call := store.MsgCall{Account: "acct-0", MsgID: "m-2", JobID: id, Shard: 0, ClaimID: "c", Seqs: seqs, At: f.clk.Now()}
			if err := f.store.PutMsgCall(ctx, call); err != nil {
				t.Fatal(err)
			}
			outcomes := &alerttest.Recorder{}
			f.rec.MsgCalls, f.rec.Outcomes = f.store, outcomes
			if got, err := f.rec.SettleMsgCall(ctx, "acct-0", "m-2", reconcile.Settlement{To: store.ItemConfirmed}); err != nil || got != len(seqs) {
				t.Fatalf("settle: %d, %v; want %d", got, err, len(seqs))
			}
			items := f.items(t, id)
			published := map[int64]bool{}
			for _, e := range outcomes.Of(alert.ItemOutcomes) {
				for _, o := range e.Detail.(alert.ItemOutcomesDetail).Items {
					if o.Seq < tc.first || o.Seq > tc.last || published[o.Seq] || o.To != items[o.Seq].To {
						t.Fatalf("outcome %+v: not of the call's items, twice, or of another recipient", o)
					}
					published[o.Seq] = true
				}
			}
			if len(published) != len(seqs) {
				t.Fatalf("%d outcomes published, want one for each of the call's %d items (pages of %d)", len(published), len(seqs), store.MaxPutItems)
			}
		})
	}
}

// TestOnlyFinalItemsHaveOutcomes: of a page of look-ups, only the items a
// look-up made final (delivered → confirmed; no record in a cancelled job
// → abandoned) get an outcome; an item re-pended to be sent again or put
// under review has none yet.
func TestOnlyFinalItemsHaveOutcomes(t *testing.T) {
	t.Parallel()
	for _, cancelled := range []bool{false, true} {
		t.Run(map[bool]string{false: "running", true: "cancelled"}[cancelled], func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			// No deadline: a pass stops settling SafetyMargin before its
			// context's deadline (nothing here waits).
			ctx := context.Background()
			id := f.job(t, 1, 4, 3, 0)
			if cancelled {
				if _, err := f.store.TransitionJob(ctx, store.TransitionJobParams{JobID: id, To: store.JobCancelled, At: f.clk.Now()}); err != nil {
					t.Fatal(err)
				}
			}
			f.answering(id, func(seq int64) (provider.Status, error) {
				switch seq {
				case 1:
					return provider.StatusDelivered, nil
				case 2:
					return provider.StatusUnknown, nil
				}
				return "", provider.ErrStatusUnsupported
			})
			outcomes := &alerttest.Recorder{}
			f.rec.Outcomes = outcomes
			f.clk.Advance(2 * time.Minute)
			if _, err := f.rec.Run(ctx); err != nil {
				t.Fatal(err)
			}
			want := map[int64]store.ItemStatus{1: store.ItemConfirmed}
			if cancelled {
				want[2] = store.ItemAbandoned
			}
			got := map[int64]store.ItemStatus{}
			for _, e := range outcomes.Of(alert.ItemOutcomes) {
				for _, o := range e.Detail.(alert.ItemOutcomesDetail).Items {
					got[o.Seq] = store.ItemStatus(o.Status)
				}
			}
			if !maps.Equal(got, want) {
				t.Fatalf("outcomes %v, want %v (items: %+v)", got, want, f.items(t, id))
			}
		})
	}
}

// TestOutcomesLeaveOutARacedItem: an item re-claimed by a sender while its
// look-up ran is not settled by the old answer (the claim guard), so it
// gets no outcome; the other items of the page get theirs.
func TestOutcomesLeaveOutARacedItem(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background() // a pass stops before its context's deadline
	id := f.job(t, 1, 3, 3, 0)
	p, _ := f.answering(id, func(int64) (provider.Status, error) { return provider.StatusDelivered, nil })
	p.before = func(seq int64) {
		if seq != 1 {
			return
		}
		sh, err := store.BeginOutsideTurn(ctx, f.store, id, 0)
		if err != nil {
			t.Error(err)
			return
		}
		up, err := f.store.UpdateItems(ctx, store.UpdateItemsParams{JobID: id, Index: 0, At: f.clk.Now(),
			Updates: []store.ItemUpdate{{Seq: 1, From: store.ItemSubmitted, To: store.ItemPending, NextAttemptAt: f.clk.Now()}}})
		if err != nil || len(up.Rejected) > 0 {
			t.Errorf("re-pend: %v %v", err, up.Rejected)
			return
		}
		cl, err := f.store.ClaimItems(ctx, store.ClaimItemsParams{JobID: id, Index: 0, Max: 1, Now: f.clk.Now(), ClaimID: "c2"})
		if err != nil || len(cl.Items) != 1 {
			t.Errorf("re-claim: %v %+v", err, cl.Items)
			return
		}
		if _, err := store.FoldOutsideTurn(ctx, f.store, sh, up.Delta.Add(cl.Delta), nil); err != nil {
			t.Error(err)
		}
	}
	outcomes := &alerttest.Recorder{}
	f.rec.Outcomes = outcomes
	f.clk.Advance(2 * time.Minute)
	if _, err := f.rec.Run(ctx); err != nil {
		t.Fatal(err)
	}
	got := map[int64]store.ItemStatus{}
	for _, e := range outcomes.Of(alert.ItemOutcomes) {
		for _, o := range e.Detail.(alert.ItemOutcomesDetail).Items {
			got[o.Seq] = store.ItemStatus(o.Status)
		}
	}
	if want := map[int64]store.ItemStatus{2: store.ItemConfirmed, 3: store.ItemConfirmed}; !maps.Equal(got, want) {
		t.Fatalf("outcomes %v, want %v", got, want)
	}
	if it := f.items(t, id)[1]; it.Status != store.ItemSubmitted || it.ClaimID != "c2" {
		t.Fatalf("the re-claimed item was settled by the old answer: %+v", it)
	}
}

// unreadableMsgCalls is a message-id store that cannot be read.
type unreadableMsgCalls struct{ store.MsgCallStore }

func (unreadableMsgCalls) ListMsgCalls(context.Context, string) ([]store.MsgCall, error) {
	return nil, errors.New("message ids unreadable")
}

// TestMsgIDsAreReadOnlyWhenTheKeyLookUpIsUnsupported: the provider's
// message ids are read only for a provider that cannot look an item up by
// its message key; an answer by key settles the item whatever the message
// id store says (here: that it cannot be read).
func TestMsgIDsAreReadOnlyWhenTheKeyLookUpIsUnsupported(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background() // a pass stops before its context's deadline
	id := f.job(t, 1, 2, 2, 0)
	f.answering(id, func(seq int64) (provider.Status, error) {
		return map[int64]provider.Status{1: provider.StatusDelivered, 2: provider.StatusUnknown}[seq], nil
	})
	f.rec.MsgCalls = unreadableMsgCalls{f.store}
	f.clk.Advance(2 * time.Minute)
	rep, err := f.rec.Run(ctx)
	if err != nil || rep.Confirmed != 1 || rep.Repended != 1 || rep.LookupFailed != 0 {
		t.Fatalf("pass %+v, %v; want one confirmed, one re-pended, no failed look-up", rep, err)
	}
	if items := f.items(t, id); items[1].Status != store.ItemConfirmed || items[2].Status != store.ItemPending {
		t.Fatalf("items %s, %s; want confirmed, pending", items[1].Status, items[2].Status)
	}
}
