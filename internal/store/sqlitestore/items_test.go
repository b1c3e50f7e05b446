package sqlitestore

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/store/storetest"
)

// TestUpdateItemsAtMost1000: one call changes up to 1000 items, exactly
// 1000 included; 1001 is refused and changes nothing.
func TestUpdateItemsAtMost1000(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := openTemp(t, filepath.Join(t.TempDir(), "store.db"))
	runningTestJob(t, s, "job-1", maxUpdates+1)
	ups := make([]store.ItemUpdate, 0, maxUpdates+1)
	for seq := int64(1); seq <= maxUpdates+1; seq++ {
		ups = append(ups, store.ItemUpdate{Seq: seq, From: store.ItemPending, To: store.ItemPending, NextAttemptAt: storetest.Epoch})
	}
	if _, err := s.UpdateItems(ctx, store.UpdateItemsParams{JobID: "job-1", Updates: ups, At: storetest.Epoch}); !errors.Is(err, store.ErrInvalidArgument) {
		t.Fatalf("%d updates: %v, want ErrInvalidArgument", len(ups), err)
	}
	res, err := s.UpdateItems(ctx, store.UpdateItemsParams{JobID: "job-1", Updates: ups[:maxUpdates], At: storetest.Epoch})
	if err != nil || len(res.Rejected) != 0 {
		t.Fatalf("%d updates: %v, rejected %v", maxUpdates, err, res.Rejected)
	}
}

// TestMsgIDOnlyWhenConfirmed: the provider's message id is stored when an
// item is confirmed, never on another status.
func TestMsgIDOnlyWhenConfirmed(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := openTemp(t, filepath.Join(t.TempDir(), "store.db"))
	runningTestJob(t, s, "job-1", 2)
	c, err := s.ClaimItems(ctx, store.ClaimItemsParams{JobID: "job-1", Max: 2, Now: storetest.Epoch, ClaimID: "c"})
	if err != nil || len(c.Items) != 2 {
		t.Fatalf("claim: %v %d", err, len(c.Items))
	}
	if _, err := s.UpdateItems(ctx, store.UpdateItemsParams{JobID: "job-1", At: storetest.Epoch, Updates: []store.ItemUpdate{
		{Seq: 1, From: store.ItemSubmitted, To: store.ItemConfirmed, MsgID: "m-1"},
		{Seq: 2, From: store.ItemSubmitted, To: store.ItemFailed, MsgID: "m-2", Error: &store.ItemError{Category: store.CategoryPermanent}},
	}}); err != nil {
		t.Fatal(err)
	}
	page, err := s.ListItems(ctx, store.ListItemsParams{JobID: "job-1"})
	if err != nil || len(page.Items) != 2 {
		t.Fatalf("list: %v %d", err, len(page.Items))
	}
	if page.Items[0].MsgID != "m-1" || page.Items[1].MsgID != "" {
		t.Fatalf("msg ids %q %q, want m-1 and none", page.Items[0].MsgID, page.Items[1].MsgID)
	}
}
