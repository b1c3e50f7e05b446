package dynamostore_test

import (
	"context"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/store"
)

// TestRefusedFailureLeavesNoErrorDetails: a failure whose page write loses
// to another process's re-pend (which keeps the item's earlier error) is
// refused; its error record, written before the page, must not lend its
// code and message to the item, which shows the category it still has and
// no details of a failure that was never recorded.
func TestRefusedFailureLeavesNoErrorDetails(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, other, tr := racedPages(t)
	oneShardJob(t, s, "errrace", 3)
	claimOne := func(claimID string, now time.Time, attempts int) {
		t.Helper()
		c, err := s.ClaimItems(ctx, store.ClaimItemsParams{JobID: "errrace", Index: 0, Max: 1, Now: now, ClaimID: claimID})
		if err != nil || len(c.Items) != 1 || c.Items[0].Seq != 0 || c.Items[0].Attempts != attempts {
			t.Fatalf("ClaimItems(%s) = %+v, %v; want item 0 on attempt %d", claimID, c.Items, err, attempts)
		}
	}
	claimOne("c1", t0, 1)
	if res, err := s.UpdateItems(ctx, store.UpdateItemsParams{JobID: "errrace", Index: 0, At: t0, Updates: []store.ItemUpdate{
		{Seq: 0, From: store.ItemSubmitted, ClaimID: "c1", To: store.ItemPending, NextAttemptAt: t0,
			Error: &store.ItemError{Category: store.CategoryRetryable, Code: "R1", Message: "busy"}},
	}}); err != nil || len(res.Rejected) > 0 {
		t.Fatalf("retry = %+v, %v", res, err)
	}
	claimOne("c2", t0.Add(time.Second), 2)
	tr.mu.Lock()
	tr.hook = func() {
		res, err := other.UpdateItems(ctx, store.UpdateItemsParams{JobID: "errrace", Index: 0, At: t0.Add(time.Second), Updates: []store.ItemUpdate{
			{Seq: 0, From: store.ItemSubmitted, ClaimID: "c2", To: store.ItemPending, KeepError: true, AttemptsDelta: -1, NextAttemptAt: t0.Add(time.Minute)},
		}})
		if err != nil || len(res.Rejected) > 0 {
			t.Errorf("the other process's re-pend = %+v, %v", res, err)
		}
	}
	tr.mu.Unlock()
	res, err := s.UpdateItems(ctx, store.UpdateItemsParams{JobID: "errrace", Index: 0, At: t0.Add(2 * time.Second), Updates: []store.ItemUpdate{
		{Seq: 0, From: store.ItemSubmitted, ClaimID: "c2", To: store.ItemFailed,
			Error: &store.ItemError{Category: store.CategoryPermanent, Code: "P9", Message: "never recorded"}},
	}})
	if err != nil || len(res.Rejected) != 1 || !res.Delta.IsZero() {
		t.Fatalf("failure after losing the page write = %+v, %v; want item 0 rejected", res, err)
	}
	list, err := other.ListItems(ctx, store.ListItemsParams{JobID: "errrace", Limit: 3})
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range list.Items {
		if it.Seq != 0 {
			continue
		}
		if it.Status != store.ItemPending || it.Error == nil || it.Error.Category != store.CategoryRetryable {
			t.Fatalf("item 0 = %s, error %+v; want pending with its retryable error", it.Status, it.Error)
		}
		if it.Error.Code == "P9" || it.Error.Message == "never recorded" {
			t.Fatalf("item 0 shows the refused failure's details: %+v", it.Error)
		}
	}
}
