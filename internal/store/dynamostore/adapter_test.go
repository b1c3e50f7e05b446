package dynamostore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/store/dynamostore"
)

var t0 = time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC)

// oneShardJob creates a running job of n items in one shard with seqs
// 0..n-1 (contiguous, so they span several status pages).
func oneShardJob(t *testing.T, s *dynamostore.Store, id string, n int) {
	t.Helper()
	ctx := context.Background()
	_, err := s.CreateJob(ctx, store.CreateJobParams{
		Job:    store.Job{ID: id, Tenant: "t", Total: int64(n), ShardCount: 1, CreatedAt: t0},
		Shards: []store.Shard{{Index: 0, Account: "a", Size: int64(n), SlowFactor: 1}},
	})
	if err != nil {
		t.Fatalf("CreateJob: %v", err)
	}
	items := make([]store.Item, n)
	for i := range items {
		items[i] = store.Item{JobID: id, Seq: int64(i), Account: "a", To: fmt.Sprint("u", i)}
	}
	for start := 0; start < n; start += store.MaxPutItems {
		if err := s.PutItems(ctx, store.PutItemsParams{JobID: id, Items: items[start:min(start+store.MaxPutItems, n)]}); err != nil {
			t.Fatalf("PutItems: %v", err)
		}
	}
	if _, err := s.TransitionJob(ctx, store.TransitionJobParams{JobID: id, To: store.JobRunning, At: t0}); err != nil {
		t.Fatalf("TransitionJob: %v", err)
	}
}

// TestClaimsAcrossPagesAndRetriesBehindTheCursor covers what the suite's
// small fixtures do not reach: a shard spanning several status pages, and a
// retry left behind the fresh items, found again through the due index.
func TestClaimsAcrossPagesAndRetriesBehindTheCursor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t, dynamostore.Options{})
	const n = 600 // pages of 256, 256 and 88 items
	oneShardJob(t, s, "pages", n)

	claim := func(now time.Time, id string) store.ClaimItemsResult {
		t.Helper()
		res, err := s.ClaimItems(ctx, store.ClaimItemsParams{JobID: "pages", Index: 0, Max: 50, Now: now, ClaimID: id})
		if err != nil {
			t.Fatalf("ClaimItems: %v", err)
		}
		return res
	}
	var claimed []int64
	for i := 0; len(claimed) < 300; i++ {
		res := claim(t0, fmt.Sprint("c", i))
		if len(res.Items) == 0 {
			t.Fatalf("no items claimed after %d", len(claimed))
		}
		for _, it := range res.Items {
			claimed = append(claimed, it.Seq)
			if it.To != fmt.Sprint("u", it.Seq) || it.Status != store.ItemSubmitted || it.Attempts != 1 {
				t.Fatalf("claimed item %+v", it)
			}
		}
	}
	if want := seqRange(0, int64(len(claimed))); !slices.Equal(claimed, want) {
		t.Fatalf("claims not in seq order across pages: %v", claimed)
	}
	// Item 3 fails retryably and waits a minute; the others are confirmed.
	var ups []store.ItemUpdate
	for _, seq := range claimed {
		u := store.ItemUpdate{Seq: seq, From: store.ItemSubmitted, To: store.ItemConfirmed}
		if seq == 3 {
			u = store.ItemUpdate{Seq: 3, From: store.ItemSubmitted, To: store.ItemPending,
				NextAttemptAt: t0.Add(time.Minute), Error: &store.ItemError{Category: store.CategoryRetryable, Code: "-1", Message: "busy"}}
		}
		ups = append(ups, u)
	}
	k := int64(len(claimed)) // claims stop at page ends: 256 + 50
	up, err := s.UpdateItems(ctx, store.UpdateItemsParams{JobID: "pages", Index: 0, Updates: ups, At: t0})
	if err != nil || len(up.Rejected) != 0 || up.Delta != (store.Counts{Submitted: -k, Confirmed: k - 1, Pending: 1}) {
		t.Fatalf("UpdateItems = %+v, %v", up, err)
	}
	var rest []int64
	var last store.ClaimItemsResult
	for i := 0; ; i++ {
		last = claim(t0, fmt.Sprint("d", i))
		if len(last.Items) == 0 {
			break
		}
		for _, it := range last.Items {
			rest = append(rest, it.Seq)
		}
	}
	if !slices.Equal(rest, seqRange(k, n)) {
		t.Fatalf("fresh claims = %v, want %d..599", rest, k)
	}
	if !last.NextDueAt.Equal(t0.Add(time.Minute)) {
		t.Fatalf("NextDueAt = %v, want the retry's %v", last.NextDueAt, t0.Add(time.Minute))
	}
	retry := claim(t0.Add(time.Minute), "r")
	if len(retry.Items) != 1 || retry.Items[0].Seq != 3 || retry.Items[0].Attempts != 2 ||
		retry.Items[0].Error == nil || retry.Items[0].Error.Code != "-1" || !retry.NextDueAt.IsZero() {
		t.Fatalf("retry claim = %+v", retry)
	}
	sh, err := s.RecountShard(ctx, "pages", 0)
	if err != nil || sh.Counts != (store.Counts{Submitted: n - k + 1, Confirmed: k - 1}) {
		t.Fatalf("RecountShard = %+v, %v", sh.Counts, err)
	}
	listed, err := s.ListItems(ctx, store.ListItemsParams{JobID: "pages", Status: store.ItemConfirmed, Limit: 1000})
	if err != nil || int64(len(listed.Items)) != k-1 || listed.NextCursor != "" {
		t.Fatalf("ListItems(confirmed) = %d items, cursor %q, %v", len(listed.Items), listed.NextCursor, err)
	}
	sub, err := s.ListSubmittedItems(ctx, store.ListSubmittedItemsParams{SubmittedBefore: t0.Add(time.Second), Limit: 120})
	if err != nil || len(sub.Items) != 120 || sub.NextCursor == "" {
		t.Fatalf("ListSubmittedItems page 1 = %d items, cursor %q, %v", len(sub.Items), sub.NextCursor, err)
	}
	sub2, err := s.ListSubmittedItems(ctx, store.ListSubmittedItemsParams{SubmittedBefore: t0.Add(time.Second), Cursor: sub.NextCursor, Limit: 1000})
	if err != nil || int64(len(sub2.Items)) != n-k-120 || sub2.NextCursor != "" {
		t.Fatalf("ListSubmittedItems page 2 = %d items, cursor %q, %v (want the other %d claimed at t0)", len(sub2.Items), sub2.NextCursor, err, n-k-120)
	}
}

func seqRange(from, to int64) []int64 {
	var out []int64
	for s := from; s < to; s++ {
		out = append(out, s)
	}
	return out
}

// TestCreateJobFinishesAfterCrash: a CreateJob that died after writing the
// idempotency record is finished by the retry, under the recorded job id.
func TestCreateJobFinishesAfterCrash(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t, dynamostore.Options{})
	if err := s.PutIdempotencyRecordForTest(ctx, "t", "k", "job-first", "h"); err != nil {
		t.Fatal(err)
	}
	p := store.CreateJobParams{
		Job:    store.Job{ID: "job-retry", Tenant: "t", IdempotencyKey: "k", RequestHash: "h", Total: 1, ShardCount: 1, CreatedAt: t0},
		Shards: []store.Shard{{Index: 0, Account: "a", Size: 1, SlowFactor: 1}},
	}
	res, err := s.CreateJob(ctx, p)
	if err != nil || !res.Created || res.Job.ID != "job-first" {
		t.Fatalf("CreateJob after crash = %+v, %v; want job-first created", res, err)
	}
	v, err := s.GetJob(ctx, "job-first")
	if err != nil || len(v.Shards) != 1 || v.Shards[0].Counts.Pending != 1 {
		t.Fatalf("GetJob = %+v, %v", v, err)
	}
	again, err := s.CreateJob(ctx, p)
	if err != nil || again.Created || again.Job.ID != "job-first" {
		t.Fatalf("CreateJob again = %+v, %v", again, err)
	}
	p.Job.RequestHash = "other"
	if _, err := s.CreateJob(ctx, p); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("CreateJob with another body: %v, want ErrConflict", err)
	}
}

// TestCreateJobAfterCrashWithAnotherPlan: a CreateJob that died after
// writing its idempotency record and a shard is retried with the same
// request but another plan (the suppression list changed in between). The
// retry must not report the job as created by it: the caller's same-plan
// check then sees the stale shard and fails the job, as it does on a
// store that creates a job atomically (sqlitestore).
func TestCreateJobAfterCrashWithAnotherPlan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t, dynamostore.Options{})
	if err := s.PutIdempotencyRecordForTest(ctx, "t", "k", "job-first", "h"); err != nil {
		t.Fatal(err)
	}
	if err := s.PutShardForTest(ctx, store.Shard{JobID: "job-first", Index: 0, Account: "a", Size: 10, Status: store.ShardPending,
		Counts: store.Counts{Pending: 10}, SlowFactor: 1}); err != nil {
		t.Fatal(err)
	}
	p := store.CreateJobParams{
		Job:    store.Job{ID: "job-retry", Tenant: "t", IdempotencyKey: "k", RequestHash: "h", Total: 9, ShardCount: 1, CreatedAt: t0},
		Shards: []store.Shard{{Index: 0, Account: "a", Size: 9, SlowFactor: 1}},
	}
	res, err := s.CreateJob(ctx, p)
	if err != nil || res.Created || res.Job.ID != "job-first" || res.Job.Status != store.JobCreating {
		t.Fatalf("CreateJob after a crash, other plan = {Created %v, ID %q, Status %q}, %v; want {false, job-first, creating}",
			res.Created, res.Job.ID, res.Job.Status, err)
	}
	v, err := s.GetJob(ctx, "job-first")
	if err != nil || len(v.Shards) != 1 || v.Shards[0].Size != 10 {
		t.Fatalf("GetJob = %+v, %v; want the interrupted attempt's shard for the same-plan check", v.Shards, err)
	}
}

// TestAdvanceShardEpochWrites checks what the cost rests on: an advance in
// the current count epoch is a single write whose condition checks the
// epoch, and a shard record from before epochs (no epoch attribute) is in
// epoch 0.
func TestAdvanceShardEpochWrites(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var m capacityMeter
	s := newStore(t, dynamostore.Options{OnCapacity: m.observe})
	oneShardJob(t, s, "epochs", 20)
	if err := s.RemoveShardEpochForTest(ctx, "epochs", 0); err != nil {
		t.Fatalf("remove epoch: %v", err)
	}
	sh, err := s.BeginTurn(ctx, store.BeginTurnParams{JobID: "epochs", Turn: 1, MessageID: "m1", At: t0})
	if err != nil || sh.Epoch != 0 {
		t.Fatalf("BeginTurn on a record without epoch = epoch %d, %v; want 0", sh.Epoch, err)
	}
	c, err := s.ClaimItems(ctx, store.ClaimItemsParams{JobID: "epochs", Max: 5, Now: t0, ClaimID: "c1"})
	if err != nil || len(c.Items) != 5 {
		t.Fatalf("ClaimItems = %d items, %v", len(c.Items), err)
	}
	m.mu.Lock()
	m.writeRequests = 0
	m.mu.Unlock()
	sh, err = s.AdvanceShard(ctx, store.AdvanceShardParams{JobID: "epochs", Turn: 1, Epoch: 0, Delta: c.Delta, Cursor: 5, At: t0})
	if err != nil || sh.Epoch != 0 || sh.Counts != (store.Counts{Pending: 15, Submitted: 5}) {
		t.Fatalf("AdvanceShard(epoch 0) = %+v, %v", sh, err)
	}
	if m.writeRequests != 1 {
		t.Fatalf("AdvanceShard in the current epoch made %d write requests, want 1", m.writeRequests)
	}

	// A recount moves the epoch; the same delta again is not folded.
	if sh, err = s.RecountShard(ctx, "epochs", 0); err != nil || sh.Epoch != 1 {
		t.Fatalf("RecountShard = epoch %d, %v; want 1", sh.Epoch, err)
	}
	sh, err = s.AdvanceShard(ctx, store.AdvanceShardParams{JobID: "epochs", Turn: 1, Epoch: 0, Delta: c.Delta, Cursor: 5, At: t0.Add(time.Second)})
	if err != nil || sh.Epoch != 2 || sh.Counts != (store.Counts{Pending: 15, Submitted: 5}) || sh.Cursor != 5 {
		t.Fatalf("AdvanceShard(stale epoch) = %+v, %v; want epoch 2, counts unchanged", sh, err)
	}
}
