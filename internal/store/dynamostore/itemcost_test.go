package dynamostore_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/store/dynamostore"
)

// TestRejectedUpdateWritesNothing: an update whose every item is refused
// (another claim's item, an item not in the state named) changes nothing
// and costs no write — a late or duplicate outcome delivery is free.
func TestRejectedUpdateWritesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var m requestMeter
	s := newStore(t, dynamostore.Options{OnCapacity: m.observe})
	oneShardJob(t, s, "rj", 10)
	c, err := s.ClaimItems(ctx, store.ClaimItemsParams{JobID: "rj", Index: 0, Max: 2, Now: t0, ClaimID: "c1"})
	if err != nil || len(c.Items) != 2 {
		t.Fatalf("ClaimItems = %d items, %v", len(c.Items), err)
	}
	before, err := s.ListItems(ctx, store.ListItemsParams{JobID: "rj", Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	m.reset()
	res, err := s.UpdateItems(ctx, store.UpdateItemsParams{JobID: "rj", Index: 0, At: t0.Add(time.Second), Updates: []store.ItemUpdate{
		{Seq: 0, From: store.ItemSubmitted, ClaimID: "someone-else", To: store.ItemConfirmed},
		{Seq: 5, From: store.ItemSubmitted, ClaimID: "c1", To: store.ItemFailed, Error: &store.ItemError{Category: store.CategoryPermanent}},
	}})
	if err != nil || !slices.Equal(res.Rejected, []int64{0, 5}) || !res.Delta.IsZero() {
		t.Fatalf("UpdateItems = %+v, %v; want both rejected, no delta", res, err)
	}
	m.mu.Lock()
	writes := m.requests["PutItem"] + m.requests["UpdateItem"] + m.requests["BatchWriteItem"] + m.requests["DeleteItem"]
	requests := fmt.Sprint(m.requests)
	m.mu.Unlock()
	if writes != 0 {
		t.Errorf("a fully rejected update made %d writes (requests %s), want none", writes, requests)
	}
	after, err := s.ListItems(ctx, store.ListItemsParams{JobID: "rj", Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(after.Items) != fmt.Sprint(before.Items) {
		t.Errorf("a rejected update changed items:\n%v\nwant\n%v", after.Items, before.Items)
	}
}

// TestReadingItemsWithoutIDsSkipsMsgidRecords: once a page's message ids
// have moved to msgid records, reading an item with no id (pending) reads
// none of them; reading a confirmed item whose id is in one does.
func TestReadingItemsWithoutIDsSkipsMsgidRecords(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var m requestMeter
	s := newStore(t, dynamostore.Options{OnCapacity: m.observe})
	const n, confirmed = 100, 80
	oneShardJob(t, s, "ids", n)
	msgID := func(seq int64) string {
		h := sha256.Sum256([]byte(fmt.Sprint(seq)))
		return hex.EncodeToString(h[:])
	}
	for round := 0; round*10 < confirmed; round++ {
		claimID := fmt.Sprint("c", round)
		now := t0.Add(time.Duration(round) * time.Second)
		c, err := s.ClaimItems(ctx, store.ClaimItemsParams{JobID: "ids", Index: 0, Max: 10, Now: now, ClaimID: claimID})
		if err != nil || len(c.Items) != 10 {
			t.Fatalf("ClaimItems = %d items, %v", len(c.Items), err)
		}
		var ups []store.ItemUpdate
		for _, it := range c.Items {
			ups = append(ups, store.ItemUpdate{Seq: it.Seq, From: store.ItemSubmitted, ClaimID: claimID, To: store.ItemConfirmed, MsgID: msgID(it.Seq)})
		}
		if res, err := s.UpdateItems(ctx, store.UpdateItemsParams{JobID: "ids", Index: 0, At: now, Updates: ups}); err != nil || len(res.Rejected) > 0 {
			t.Fatalf("UpdateItems = %+v, %v", res, err)
		}
	}
	read := func(seq int64) (store.Item, float64) {
		t.Helper()
		m.reset()
		got, err := s.GetItems(ctx, store.GetItemsParams{JobID: "ids", Shard: 0, Seqs: []int64{seq}})
		if err != nil || len(got) != 1 {
			t.Fatalf("GetItems(%d) = %v, %v", seq, got, err)
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		return got[0], m.read
	}
	first, withID := read(0) // confirmed first: its id long moved out
	if first.Status != store.ItemConfirmed || first.MsgID != msgID(0) {
		t.Fatalf("item 0 = %s %q, want confirmed %q", first.Status, first.MsgID, msgID(0))
	}
	pending, withoutID := read(n - 1)
	if pending.Status != store.ItemPending || pending.MsgID != "" {
		t.Fatalf("item %d = %s %q, want pending without id", n-1, pending.Status, pending.MsgID)
	}
	t.Logf("read units: %.1f for a confirmed item, %.1f for a pending one", withID, withoutID)
	if withoutID >= withID {
		t.Errorf("reading a pending item cost %.1f read units, a confirmed one with its id in a msgid record %.1f: the msgid records are read for items without an id", withoutID, withID)
	}
}
