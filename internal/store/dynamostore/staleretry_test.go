package dynamostore_test

import (
	"context"
	"testing"

	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/store/dynamostore"
)

// TestStaleCacheSpendsNoRetry: a sender allowed a single try per write
// (MaxRetries 1) records its outcomes although its cached status page is
// stale — another process abandoned items of the page meanwhile — and
// although a failure's error record is never written on a cached page:
// deciding again on the page read fresh is not a lost race, so the outcome
// is neither lost to a conflict nor written over the other process's.
func TestStaleCacheSpendsNoRetry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	plain := client(t)
	table := newTable(t, plain)
	s := dynamostore.New(plain, table, dynamostore.Options{MaxRetries: 1})
	other := dynamostore.New(plain, table, dynamostore.Options{})
	oneShardJob(t, s, "st", 10)
	if _, err := s.BeginTurn(ctx, store.BeginTurnParams{JobID: "st", Index: 0, Turn: 1, MessageID: "m1", At: t0}); err != nil {
		t.Fatal(err)
	}
	c, err := s.ClaimItems(ctx, store.ClaimItemsParams{JobID: "st", Index: 0, Max: 2, Now: t0, ClaimID: "c1"})
	if err != nil || len(c.Items) != 2 {
		t.Fatalf("ClaimItems = %d items, %v", len(c.Items), err)
	}
	abandon := func(seq int64) {
		t.Helper()
		res, err := other.UpdateItems(ctx, store.UpdateItemsParams{JobID: "st", Index: 0, At: t0, Updates: []store.ItemUpdate{
			{Seq: seq, From: store.ItemPending, To: store.ItemAbandoned, Error: &store.ItemError{Category: store.CategoryCancelled}},
		}})
		if err != nil || len(res.Rejected) > 0 {
			t.Fatalf("other.UpdateItems(abandon %d) = %+v, %v", seq, res, err)
		}
	}
	abandon(2)
	// The confirmation is accepted on the cached page; its write loses to
	// the abandon and is decided again on the page as it is.
	res, err := s.UpdateItems(ctx, store.UpdateItemsParams{JobID: "st", Index: 0, At: t0, Updates: []store.ItemUpdate{
		{Seq: 0, From: store.ItemSubmitted, ClaimID: "c1", To: store.ItemConfirmed, MsgID: "m-0"},
	}})
	if err != nil || len(res.Rejected) > 0 || res.Delta != (store.Counts{Submitted: -1, Confirmed: 1}) {
		t.Fatalf("confirm on a stale cached page = %+v, %v; want accepted", res, err)
	}
	abandon(3)
	// A failure with an error record: decided on the page read fresh.
	res, err = s.UpdateItems(ctx, store.UpdateItemsParams{JobID: "st", Index: 0, At: t0, Updates: []store.ItemUpdate{
		{Seq: 1, From: store.ItemSubmitted, ClaimID: "c1", To: store.ItemFailed, Error: &store.ItemError{Category: store.CategoryPermanent, Code: "40003", Message: "no such user"}},
	}})
	if err != nil || len(res.Rejected) > 0 || res.Delta != (store.Counts{Submitted: -1, Failed: 1}) {
		t.Fatalf("failure on a cached page = %+v, %v; want accepted", res, err)
	}
	list, err := other.ListItems(ctx, store.ListItemsParams{JobID: "st", Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	want := map[int64]store.ItemStatus{0: store.ItemConfirmed, 1: store.ItemFailed, 2: store.ItemAbandoned, 3: store.ItemAbandoned}
	for _, it := range list.Items {
		w, ok := want[it.Seq]
		if !ok {
			w = store.ItemPending
		}
		if it.Status != w {
			t.Errorf("item %d is %s, want %s", it.Seq, it.Status, w)
		}
		if it.Seq == 0 && it.MsgID != "m-0" {
			t.Errorf("item 0 has MsgID %q, want m-0", it.MsgID)
		}
		if it.Seq == 1 && (it.Error == nil || it.Error.Code != "40003" || it.Error.Message != "no such user") {
			t.Errorf("item 1 has error %+v, want permanent 40003 no such user", it.Error)
		}
	}
}
