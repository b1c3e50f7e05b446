package dynamostore_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/store/dynamostore"
)

// maxPutMeter keeps the largest write one PutItem cost.
type maxPutMeter struct {
	mu     sync.Mutex
	on     bool
	maxPut float64
	write  float64
}

func (m *maxPutMeter) observe(op string, c types.ConsumedCapacity) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.on || c.CapacityUnits == nil {
		return
	}
	switch op {
	case "PutItem":
		m.maxPut = max(m.maxPut, *c.CapacityUnits)
		m.write += *c.CapacityUnits
	case "UpdateItem", "DeleteItem", "BatchWriteItem":
		m.write += *c.CapacityUnits
	}
}

// TestItemOutcomesOfAFullPage: a status page of 256 items confirmed ten at
// a time, each with a random provider message id of 32 characters (8 KB
// of ids),
// lists every item with its own id and times, while no write of the page
// ever costs more than one write unit (the ids move to msgid records as
// the page fills). An item sent again shows its new id, not the one kept
// in a msgid record from its first send.
func TestItemOutcomesOfAFullPage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var m maxPutMeter
	s := newStore(t, dynamostore.Options{OnCapacity: m.observe})
	const n = 256
	jobID := putPendingJob(t, s, n, 1)
	// Ids that do not compress (deflated, random ids shrink by a quarter
	// at most): 32 characters of a hash.
	msgID := func(seq int64, round int) string {
		h := sha256.Sum256([]byte(fmt.Sprint(round, "/", seq)))
		return base64.RawURLEncoding.EncodeToString(h[:])[:32]
	}
	t0 := time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)
	m.mu.Lock()
	m.on = true
	m.mu.Unlock()
	for round := 0; ; round++ {
		now := t0.Add(time.Duration(round) * time.Second)
		claimID := fmt.Sprintf("c%d", round)
		cl, err := s.ClaimItems(ctx, store.ClaimItemsParams{JobID: jobID, Index: 0, Max: 10, Now: now, ClaimID: claimID})
		if err != nil {
			t.Fatalf("ClaimItems: %v", err)
		}
		if len(cl.Items) == 0 {
			break
		}
		var ups []store.ItemUpdate
		for _, it := range cl.Items {
			ups = append(ups, store.ItemUpdate{Seq: it.Seq, From: store.ItemSubmitted, ClaimID: claimID, To: store.ItemConfirmed, MsgID: msgID(it.Seq, 0)})
		}
		if res, err := s.UpdateItems(ctx, store.UpdateItemsParams{JobID: jobID, Index: 0, Updates: ups, At: now.Add(time.Second)}); err != nil || len(res.Rejected) > 0 {
			t.Fatalf("UpdateItems = %+v, %v", res, err)
		}
	}
	m.mu.Lock()
	m.on = false
	maxPut, write := m.maxPut, m.write
	m.mu.Unlock()
	t.Logf("%d items confirmed with ids: %.0f write units, the largest page write %.0f", n, write, maxPut)
	if maxPut > 1 {
		t.Errorf("a page write cost %.0f write units, want 1", maxPut)
	}
	check := func(seq int64, it store.Item, round int) {
		t.Helper()
		sub := t0.Add(time.Duration(seq/10) * time.Second)
		if round > 0 {
			sub = t0.Add(time.Hour)
		}
		if it.Status != store.ItemConfirmed || it.MsgID != msgID(seq, round) || !it.SubmittedAt.Equal(sub) || !it.FinishedAt.Equal(sub.Add(time.Second)) {
			t.Errorf("item %d: %s, MsgID %q, SubmittedAt %v, FinishedAt %v; want confirmed %q %v %v",
				seq, it.Status, it.MsgID, it.SubmittedAt, it.FinishedAt, msgID(seq, round), sub, sub.Add(time.Second))
		}
	}
	items := listAllItems(t, s, jobID)
	if len(items) != n {
		t.Fatalf("listed %d items, want %d", len(items), n)
	}
	for _, it := range items {
		check(it.Seq, it, 0)
	}

	// Items 3 (its id long moved to a msgid record) and 250 (its id still
	// in the page) sent again.
	again := []int64{3, 250}
	var redrive []store.ItemUpdate
	for _, seq := range again {
		redrive = append(redrive, store.ItemUpdate{Seq: seq, From: store.ItemConfirmed, To: store.ItemPending, ResetAttempts: true})
	}
	t1 := t0.Add(time.Hour)
	if res, err := s.UpdateItems(ctx, store.UpdateItemsParams{JobID: jobID, Index: 0, Updates: redrive, At: t1}); err != nil || len(res.Rejected) > 0 {
		t.Fatalf("redrive = %+v, %v", res, err)
	}
	for _, it := range listAllItems(t, s, jobID) {
		if it.Status == store.ItemPending && (it.MsgID != "" || !it.FinishedAt.IsZero()) {
			t.Errorf("redriven item %d keeps MsgID %q, FinishedAt %v", it.Seq, it.MsgID, it.FinishedAt)
		}
	}
	cl, err := s.ClaimItems(ctx, store.ClaimItemsParams{JobID: jobID, Index: 0, Max: 10, Now: t1, ClaimID: "again"})
	if err != nil || len(cl.Items) != len(again) {
		t.Fatalf("ClaimItems again = %+v, %v", cl, err)
	}
	var ups []store.ItemUpdate
	for _, seq := range again {
		ups = append(ups, store.ItemUpdate{Seq: seq, From: store.ItemSubmitted, ClaimID: "again", To: store.ItemConfirmed, MsgID: msgID(seq, 1)})
	}
	if res, err := s.UpdateItems(ctx, store.UpdateItemsParams{JobID: jobID, Index: 0, Updates: ups, At: t1.Add(time.Second)}); err != nil || len(res.Rejected) > 0 {
		t.Fatalf("UpdateItems again = %+v, %v", res, err)
	}
	for _, it := range listAllItems(t, s, jobID) {
		round := 0
		if it.Seq == 3 || it.Seq == 250 {
			round = 1
		}
		check(it.Seq, it, round)
	}
}

// listAllItems lists a job's items through every page of results.
func listAllItems(t *testing.T, s *dynamostore.Store, jobID string) []store.Item {
	t.Helper()
	var out []store.Item
	cursor := ""
	for {
		res, err := s.ListItems(context.Background(), store.ListItemsParams{JobID: jobID, Cursor: cursor, Limit: 100})
		if err != nil {
			t.Fatalf("ListItems: %v", err)
		}
		out = append(out, res.Items...)
		if cursor = res.NextCursor; cursor == "" {
			return out
		}
	}
}
