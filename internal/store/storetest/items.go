package storetest

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/store"
)

// checkClaimed fails unless items are the claimed versions of the snapshot
// items with the given seqs.
func checkClaimed(t tb, got []store.Item, snapshot map[int64]store.Item, seqs []int64, now time.Time, claimID string, attempts int) {
	t.Helper()
	if !slices.Equal(seqsOf(got), seqs) {
		t.Fatalf("claimed seqs %v, want %v", seqsOf(got), seqs)
	}
	for _, it := range got {
		w := snapshot[it.Seq]
		if it.Status != store.ItemSubmitted || it.ClaimID != claimID || !sameTime(it.SubmittedAt, now) || it.Attempts != attempts {
			t.Fatalf("claimed item %d = status %s claim %q submitted %v attempts %d; want submitted, %q, %v, %d",
				it.Seq, it.Status, it.ClaimID, it.SubmittedAt, it.Attempts, claimID, now, attempts)
		}
		if it.JobID != w.JobID || it.Shard != w.Shard || it.Account != w.Account || it.To != w.To || !maps.Equal(it.Vars, w.Vars) {
			t.Fatalf("claimed item %d lost its snapshot: %+v, want %+v", it.Seq, it, w)
		}
	}
}

func testClaimItems(t *testing.T, s store.Store, _ Capabilities) {
	p, items := runningJob(t, s, "tenant-a", 2, 10)
	id := p.Job.ID
	snap := map[int64]store.Item{}
	for _, it := range items {
		snap[it.Seq] = it
	}
	t1 := at(time.Minute)

	// Shard 0 holds the odd seqs.
	c := claim(t, s, id, 0, 3, t1, "c1")
	checkClaimed(t, c.Items, snap, []int64{1, 3, 5}, t1, "c1", 1)
	if c.Delta != (store.Counts{Pending: -3, Submitted: 3}) {
		t.Fatalf("claim delta %+v, want 3 pending → submitted", c.Delta)
	}
	stored := itemBySeq(t, s, id)
	checkClaimed(t, []store.Item{stored[1], stored[3], stored[5]}, snap, []int64{1, 3, 5}, t1, "c1", 1)

	// Two of them come back to pending, due later.
	update(t, s, id, 0, t1,
		store.ItemUpdate{Seq: 1, From: store.ItemSubmitted, ClaimID: "c1", To: store.ItemPending, NextAttemptAt: t1.Add(10 * time.Second), Error: &store.ItemError{Category: store.CategoryRetryable}},
		store.ItemUpdate{Seq: 3, From: store.ItemSubmitted, ClaimID: "c1", To: store.ItemPending, NextAttemptAt: t1.Add(5 * time.Second), Error: &store.ItemError{Category: store.CategoryRateLimited}, AttemptsDelta: -1},
	)
	// A claim cut short by Max leaves due items pending: NextDueAt must
	// not send the sender to sleep past the earliest future item.
	c = claim(t, s, id, 0, 2, t1, "c2")
	checkClaimed(t, c.Items, snap, []int64{7, 9}, t1, "c2", 1)
	if c.NextDueAt.After(t1.Add(5 * time.Second)) {
		t.Fatalf("NextDueAt %v after a short claim, later than the earliest pending item (%v)", c.NextDueAt, t1.Add(5*time.Second))
	}
	// Every due item claimed: NextDueAt is the earliest future one.
	c = claim(t, s, id, 0, 5, t1, "c3") // exactly the due items: NextDueAt is exact
	checkClaimed(t, c.Items, snap, []int64{11, 13, 15, 17, 19}, t1, "c3", 1)
	if c.Delta != (store.Counts{Pending: -5, Submitted: 5}) {
		t.Fatalf("claim delta %+v, want 5 pending → submitted", c.Delta)
	}
	if !sameTime(c.NextDueAt, t1.Add(5*time.Second)) {
		t.Fatalf("NextDueAt %v, want %v", c.NextDueAt, t1.Add(5*time.Second))
	}
	// Nothing due: nothing claimed.
	c = claim(t, s, id, 0, 100, t1.Add(5*time.Second-time.Millisecond), "c4")
	if len(c.Items) != 0 || !c.Delta.IsZero() || !sameTime(c.NextDueAt, t1.Add(5*time.Second)) {
		t.Fatalf("claim before due = %v delta %+v next %v; want none, zero, %v", seqsOf(c.Items), c.Delta, c.NextDueAt, t1.Add(5*time.Second))
	}
	// Due exactly now; the rate-limited attempt was given back.
	c = claim(t, s, id, 0, 100, t1.Add(5*time.Second), "c5")
	checkClaimed(t, c.Items, snap, []int64{3}, t1.Add(5*time.Second), "c5", 1)
	if !sameTime(c.NextDueAt, t1.Add(10*time.Second)) {
		t.Fatalf("NextDueAt %v, want %v", c.NextDueAt, t1.Add(10*time.Second))
	}
	if c.Items[0].Error == nil || c.Items[0].Error.Category != store.CategoryRateLimited {
		t.Fatalf("claim dropped the item's last error: %+v", c.Items[0].Error)
	}
	c = claim(t, s, id, 0, 100, t1.Add(time.Hour), "c6")
	checkClaimed(t, c.Items, snap, []int64{1}, t1.Add(time.Hour), "c6", 2)
	if !c.NextDueAt.IsZero() {
		t.Fatalf("NextDueAt %v with nothing pending, want zero", c.NextDueAt)
	}
	c = claim(t, s, id, 0, 100, t1.Add(2*time.Hour), "c7")
	if len(c.Items) != 0 || !c.Delta.IsZero() || !c.NextDueAt.IsZero() {
		t.Fatalf("claim of an empty shard = %v delta %+v next %v", seqsOf(c.Items), c.Delta, c.NextDueAt)
	}

	// Shard 1 was never touched.
	for _, it := range shardItems(t, s, id, 1) {
		if it.Status != store.ItemPending || it.Attempts != 0 || it.ClaimID != "" {
			t.Fatalf("item %d of the other shard changed: %+v", it.Seq, it)
		}
	}
	for _, it := range shardItems(t, s, id, 0) {
		if it.Status != store.ItemSubmitted {
			t.Fatalf("item %d of shard 0 is %s, want submitted", it.Seq, it.Status)
		}
	}
}

func testClaimItemsConcurrent(t *testing.T, s store.Store, caps Capabilities) {
	sz := caps.sizes()
	p, _ := runningJob(t, s, "tenant-a", 1, sz.claimItems)
	// A second shard whose items must not be taken.
	q, _ := runningJob(t, s, "tenant-a", 2, 5)
	_ = q
	id := p.Job.ID
	var (
		mu      sync.Mutex
		owner   = map[int64]string{}
		dups    []string
		total   atomic.Int64
		delta   store.Counts
		errs    = make([]error, sz.workers)
		wg      sync.WaitGroup
		idleCap = 2000 // empty claims a worker tolerates before giving up
	)
	for g := range sz.workers {
		r := rand.New(rand.NewPCG(uint64(g), 11))
		wg.Go(func() {
			idle := 0
			for n := 0; total.Load() < int64(sz.claimItems); n++ {
				claimID := fmt.Sprintf("w%d-%d", g, n)
				res, err := s.ClaimItems(ctxOf(t), store.ClaimItemsParams{JobID: id, Index: 0, Max: 1 + r.IntN(10), Now: at(time.Second), ClaimID: claimID})
				if err != nil {
					errs[g] = err
					return
				}
				if len(res.Items) == 0 {
					if idle++; idle > idleCap {
						errs[g] = fmt.Errorf("%d empty claims in a row while items remain", idle)
						return
					}
					continue
				}
				idle = 0
				mu.Lock()
				for _, it := range res.Items {
					if prev, ok := owner[it.Seq]; ok {
						dups = append(dups, fmt.Sprintf("seq %d by %s and %s", it.Seq, prev, claimID))
					}
					owner[it.Seq] = claimID
					if it.ClaimID != claimID || it.JobID != id {
						dups = append(dups, fmt.Sprintf("seq %d returned with claim %q job %q to %s", it.Seq, it.ClaimID, it.JobID, claimID))
					}
				}
				delta = delta.Add(res.Delta)
				mu.Unlock()
				total.Add(int64(len(res.Items)))
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("ClaimItems: %v", err)
	}
	if len(dups) > 0 {
		t.Fatalf("items claimed twice: %v", dups[:min(len(dups), 10)])
	}
	if len(owner) != sz.claimItems || total.Load() != int64(sz.claimItems) {
		t.Fatalf("claimed %d distinct items (%d returned), want %d", len(owner), total.Load(), sz.claimItems)
	}
	if delta != (store.Counts{Pending: -int64(sz.claimItems), Submitted: int64(sz.claimItems)}) {
		t.Fatalf("claim deltas sum to %+v", delta)
	}
	for _, it := range shardItems(t, s, id, 0) {
		if it.Status != store.ItemSubmitted || it.Attempts != 1 || it.ClaimID != owner[it.Seq] {
			t.Fatalf("item %d = status %s attempts %d claim %q; want submitted, 1, %q", it.Seq, it.Status, it.Attempts, it.ClaimID, owner[it.Seq])
		}
	}
	for _, it := range listAll(t, s, store.ListItemsParams{JobID: q.Job.ID, Limit: 100}) {
		if it.Status != store.ItemPending {
			t.Fatalf("item %d of another job changed: %+v", it.Seq, it)
		}
	}
}

// itemState is the part of an item UpdateItems changes.
type itemState struct {
	status   store.ItemStatus
	attempts int
	category string // "" when Error is nil
	code     string
	next     time.Time
}

func stateOf(it store.Item) itemState {
	st := itemState{status: it.Status, attempts: it.Attempts}
	if it.Error != nil {
		st.category, st.code = it.Error.Category, it.Error.Code
	}
	if it.Status == store.ItemPending {
		st.next = it.NextAttemptAt.UTC().Round(0)
	}
	return st
}

func checkStates(t tb, s store.Store, jobID string, want map[int64]itemState) {
	t.Helper()
	got := itemBySeq(t, s, jobID)
	for seq, w := range want {
		it, ok := got[seq]
		if !ok {
			t.Fatalf("item %d missing", seq)
		}
		if st := stateOf(it); st != w {
			t.Fatalf("item %d = %+v, want %+v", seq, st, w)
		}
	}
}

func testUpdateItems(t *testing.T, s store.Store, _ Capabilities) {
	p, _ := runningJob(t, s, "tenant-a", 1, 12)
	id := p.Job.ID
	t1, t2 := at(time.Second), at(2*time.Second)
	c := claim(t, s, id, 0, 12, t1, "c1")
	if len(c.Items) != 12 {
		t.Fatalf("claimed %d, want 12", len(c.Items))
	}
	shardDelta := c.Delta
	var shardFailures []map[string]int64

	submitted := itemState{status: store.ItemSubmitted, attempts: 1}
	res := update(t, s, id, 0, t2,
		store.ItemUpdate{Seq: 1, From: store.ItemSubmitted, ClaimID: "c1", To: store.ItemConfirmed},
		store.ItemUpdate{Seq: 2, From: store.ItemSubmitted, ClaimID: "c1", To: store.ItemFailed, Error: &store.ItemError{Category: store.CategoryPermanent, Code: "40003", Message: "invalid user"}},
		store.ItemUpdate{Seq: 3, From: store.ItemSubmitted, ClaimID: "c1", To: store.ItemPending, Error: &store.ItemError{Category: store.CategoryRateLimited, Code: "45009"}, AttemptsDelta: -1, NextAttemptAt: t2.Add(3 * time.Second)},
		store.ItemUpdate{Seq: 4, From: store.ItemSubmitted, To: store.ItemSubmitted, Error: &store.ItemError{Category: store.CategoryUncertain}},
		store.ItemUpdate{Seq: 5, From: store.ItemSubmitted, ClaimID: "someone-else", To: store.ItemConfirmed},
		store.ItemUpdate{Seq: 6, From: store.ItemPending, To: store.ItemConfirmed},
		store.ItemUpdate{Seq: 7, From: store.ItemSubmitted, ClaimID: "c1", To: store.ItemAbandoned, Error: &store.ItemError{Category: store.CategoryCancelled}},
		store.ItemUpdate{Seq: 8, From: store.ItemSubmitted, ClaimID: "c1", To: store.ItemFailed, Error: &store.ItemError{Category: store.CategoryExhausted}},
		store.ItemUpdate{Seq: 9, From: store.ItemSubmitted, ClaimID: "c1", To: store.ItemPending, ResetAttempts: true, AttemptsDelta: 2, NextAttemptAt: t2},
		store.ItemUpdate{Seq: 10, From: store.ItemSubmitted, ClaimID: "c1", To: store.ItemPending, Error: &store.ItemError{Category: store.CategoryRetryable, Code: "-1"}, NextAttemptAt: t2.Add(time.Second)},
	)
	if got := sortedSeqs(res.Rejected); !slices.Equal(got, []int64{5, 6}) {
		t.Fatalf("Rejected = %v, want [5 6]", got)
	}
	wantDelta := store.Counts{Submitted: -7, Confirmed: 1, Failed: 2, Pending: 3, Abandoned: 1}
	if res.Delta != wantDelta {
		t.Fatalf("Delta = %+v, want %+v", res.Delta, wantDelta)
	}
	wantF := map[string]int64{store.CategoryPermanent: 1, store.CategoryUncertain: 1, store.CategoryCancelled: 1, store.CategoryExhausted: 1}
	if !sameFailures(res.FailuresDelta, wantF) {
		t.Fatalf("FailuresDelta = %v, want %v", nonZero(res.FailuresDelta), wantF)
	}
	shardDelta = shardDelta.Add(res.Delta)
	shardFailures = append(shardFailures, res.FailuresDelta)
	checkStates(t, s, id, map[int64]itemState{
		1:  {status: store.ItemConfirmed, attempts: 1},
		2:  {status: store.ItemFailed, attempts: 1, category: store.CategoryPermanent, code: "40003"},
		3:  {status: store.ItemPending, attempts: 0, category: store.CategoryRateLimited, code: "45009", next: t2.Add(3 * time.Second)},
		4:  {status: store.ItemSubmitted, attempts: 1, category: store.CategoryUncertain},
		5:  submitted,
		6:  submitted,
		7:  {status: store.ItemAbandoned, attempts: 1, category: store.CategoryCancelled},
		8:  {status: store.ItemFailed, attempts: 1, category: store.CategoryExhausted},
		9:  {status: store.ItemPending, attempts: 2, next: t2},
		10: {status: store.ItemPending, attempts: 1, category: store.CategoryRetryable, code: "-1", next: t2.Add(time.Second)},
	})
	if m := itemBySeq(t, s, id); m[2].Error.Message != "invalid user" || m[5].ClaimID != "c1" {
		t.Fatalf("item 2 error message %q, item 5 claim %q", m[2].Error.Message, m[5].ClaimID)
	}

	t3 := at(3 * time.Second)
	res = update(t, s, id, 0, t3,
		// An operator resolves the item under review: delivered.
		store.ItemUpdate{Seq: 4, From: store.ItemSubmitted, To: store.ItemConfirmed},
		// Redrive: back to pending with fresh attempts, error cleared.
		store.ItemUpdate{Seq: 8, From: store.ItemFailed, To: store.ItemPending, ResetAttempts: true, NextAttemptAt: t3},
		// Cancel an exhausted item keeping its error: leaves failed,
		// enters abandoned, the same category.
		store.ItemUpdate{Seq: 2, From: store.ItemFailed, To: store.ItemAbandoned, KeepError: true},
		// A pending item keeps its error when told to, with a new due time.
		store.ItemUpdate{Seq: 10, From: store.ItemPending, To: store.ItemPending, KeepError: true, NextAttemptAt: t3.Add(time.Minute)},
		// Stale: the item is no longer submitted.
		store.ItemUpdate{Seq: 1, From: store.ItemSubmitted, ClaimID: "c1", To: store.ItemFailed, Error: &store.ItemError{Category: store.CategoryPermanent}},
		// Marked for review, then failed by the claimer.
		store.ItemUpdate{Seq: 11, From: store.ItemSubmitted, To: store.ItemSubmitted, Error: &store.ItemError{Category: store.CategoryUncertain}},
		store.ItemUpdate{Seq: 12, From: store.ItemSubmitted, ClaimID: "c1", To: store.ItemFailed, Error: &store.ItemError{Category: store.CategoryRetryable}},
	)
	if got := sortedSeqs(res.Rejected); !slices.Equal(got, []int64{1}) {
		t.Fatalf("Rejected = %v, want [1]", got)
	}
	wantDelta = store.Counts{Submitted: -2, Confirmed: 1, Failed: -1, Pending: 1, Abandoned: 1}
	if res.Delta != wantDelta {
		t.Fatalf("Delta = %+v, want %+v", res.Delta, wantDelta)
	}
	wantF = map[string]int64{store.CategoryExhausted: -1, store.CategoryRetryable: 1}
	// uncertain: −1 (item 4 confirmed), +1 (item 11 under review) = 0;
	// permanent: −1 (failed) +1 (abandoned) = 0.
	if !sameFailures(res.FailuresDelta, wantF) {
		t.Fatalf("FailuresDelta = %v, want %v", nonZero(res.FailuresDelta), wantF)
	}
	shardDelta = shardDelta.Add(res.Delta)
	shardFailures = append(shardFailures, res.FailuresDelta)
	checkStates(t, s, id, map[int64]itemState{
		1:  {status: store.ItemConfirmed, attempts: 1},
		2:  {status: store.ItemAbandoned, attempts: 1, category: store.CategoryPermanent, code: "40003"},
		4:  {status: store.ItemConfirmed, attempts: 1},
		8:  {status: store.ItemPending, attempts: 0, next: t3},
		10: {status: store.ItemPending, attempts: 1, category: store.CategoryRetryable, code: "-1", next: t3.Add(time.Minute)},
		11: {status: store.ItemSubmitted, attempts: 1, category: store.CategoryUncertain},
		12: {status: store.ItemFailed, attempts: 1, category: store.CategoryRetryable},
	})

	// Folding every delta keeps the shard equal to a recount.
	folded := map[string]int64{}
	for _, f := range shardFailures {
		for k, v := range f {
			folded[k] += v
		}
	}
	sh, err := s.AddShardCounts(ctxOf(t), store.AddShardCountsParams{JobID: id, Index: 0, Delta: shardDelta, FailuresDelta: folded})
	if err != nil {
		t.Fatalf("AddShardCounts: %v", err)
	}
	checkShardMatchesItems(t, s, sh)

	// Empty updates change nothing.
	res = update(t, s, id, 0, t3)
	if !res.Delta.IsZero() || len(nonZero(res.FailuresDelta)) != 0 || len(res.Rejected) != 0 {
		t.Fatalf("UpdateItems(no updates) = %+v", res)
	}
}

// testUpdateItemsManyAtOnce records 250 outcomes in one call, as a sender
// does for the recipients of packed calls: every item gets its own
// outcome, whatever the size of the batch.
func testUpdateItemsManyAtOnce(t *testing.T, s store.Store, c Capabilities) {
	const n = 250
	p, _ := runningJob(t, s, "tenant-a", 1, n)
	id := p.Job.ID
	t1, t2 := at(time.Second), at(2*time.Second)
	var claimed []store.Item
	for len(claimed) < n {
		got := claim(t, s, id, 0, n-len(claimed), t1, "c1")
		if len(got.Items) == 0 {
			t.Fatalf("claimed %d of %d items, then none", len(claimed), n)
		}
		claimed = append(claimed, got.Items...)
	}
	ups := make([]store.ItemUpdate, 0, n)
	want := map[int64]itemState{}
	var wantRejected []int64
	for _, it := range claimed {
		u := store.ItemUpdate{Seq: it.Seq, From: store.ItemSubmitted, ClaimID: "c1"}
		switch it.Seq % 4 {
		case 0:
			u.To, u.MsgID = store.ItemConfirmed, fmt.Sprintf("msg-%d", it.Seq)
			want[it.Seq] = itemState{status: store.ItemConfirmed, attempts: 1}
		case 1:
			u.To = store.ItemFailed
			u.Error = &store.ItemError{Category: store.CategoryPermanent, Code: fmt.Sprint(40000 + it.Seq), Message: fmt.Sprintf("bad user %d", it.Seq)}
			want[it.Seq] = itemState{status: store.ItemFailed, attempts: 1, category: store.CategoryPermanent, code: fmt.Sprint(40000 + it.Seq)}
		case 2:
			next := t2.Add(time.Duration(it.Seq) * time.Second)
			u.To, u.AttemptsDelta, u.NextAttemptAt = store.ItemPending, -1, next
			u.Error = &store.ItemError{Category: store.CategoryRateLimited, Code: "45009"}
			want[it.Seq] = itemState{status: store.ItemPending, category: store.CategoryRateLimited, code: "45009", next: next}
		default:
			u.ClaimID, u.To = "someone-else", store.ItemConfirmed
			want[it.Seq] = itemState{status: store.ItemSubmitted, attempts: 1}
			wantRejected = append(wantRejected, it.Seq)
		}
		ups = append(ups, u)
	}
	res := update(t, s, id, 0, t2, ups...)
	if got := sortedSeqs(res.Rejected); !slices.Equal(got, wantRejected) {
		t.Fatalf("Rejected = %v, want %v", got, wantRejected)
	}
	var wantDelta store.Counts
	for _, st := range want {
		wantDelta.Move(store.ItemSubmitted, st.status)
	}
	if res.Delta != wantDelta {
		t.Fatalf("Delta = %+v, want %+v", res.Delta, wantDelta)
	}
	if wantF := map[string]int64{store.CategoryPermanent: wantDelta.Failed}; !sameFailures(res.FailuresDelta, wantF) {
		t.Fatalf("FailuresDelta = %v, want %v", nonZero(res.FailuresDelta), wantF)
	}
	checkStates(t, s, id, want)
	for seq, it := range itemBySeq(t, s, id) {
		switch seq % 4 {
		case 0:
			if it.MsgID != fmt.Sprintf("msg-%d", seq) || !it.FinishedAt.Equal(t2) {
				t.Fatalf("confirmed item %d: msgid %q, finished at %v; want msg-%d, %v", seq, it.MsgID, it.FinishedAt, seq, t2)
			}
		case 1:
			if it.Error.Message != fmt.Sprintf("bad user %d", seq) {
				t.Fatalf("failed item %d: message %q", seq, it.Error.Message)
			}
		}
	}

	// Neighbours with others between them (3, 5, 7), and two far apart
	// (11, 247): only the items named change.
	t3 := at(3 * time.Second)
	res = update(t, s, id, 0, t3,
		store.ItemUpdate{Seq: 3, From: store.ItemSubmitted, ClaimID: "c1", To: store.ItemConfirmed},
		store.ItemUpdate{Seq: 5, From: store.ItemFailed, To: store.ItemAbandoned, KeepError: true},
		store.ItemUpdate{Seq: 7, From: store.ItemSubmitted, ClaimID: "c1", To: store.ItemConfirmed},
		store.ItemUpdate{Seq: 6, From: store.ItemSubmitted, To: store.ItemConfirmed}, // pending: refused
	)
	if got := sortedSeqs(res.Rejected); !slices.Equal(got, []int64{6}) {
		t.Fatalf("Rejected = %v, want [6]", got)
	}
	res = update(t, s, id, 0, t3,
		store.ItemUpdate{Seq: 11, From: store.ItemSubmitted, ClaimID: "c1", To: store.ItemConfirmed},
		store.ItemUpdate{Seq: 247, From: store.ItemSubmitted, ClaimID: "c1", To: store.ItemConfirmed},
	)
	if len(res.Rejected) != 0 || res.Delta != (store.Counts{Submitted: -2, Confirmed: 2}) {
		t.Fatalf("UpdateItems(11, 247) = %+v", res)
	}
	for _, seq := range []int64{3, 7, 11, 247} {
		want[seq] = itemState{status: store.ItemConfirmed, attempts: 1}
	}
	want[5] = itemState{status: store.ItemAbandoned, attempts: 1, category: store.CategoryPermanent, code: "40005"}
	checkStates(t, s, id, want)
}

func testUpdateItemsOtherShard(t *testing.T, s store.Store, _ Capabilities) {
	p, _ := runningJob(t, s, "tenant-a", 2, 3)
	id := p.Job.ID
	c := claim(t, s, id, 1, 3, at(time.Second), "c1") // shard 1: seqs 2, 4, 6
	if !slices.Equal(seqsOf(c.Items), []int64{2, 4, 6}) {
		t.Fatalf("claimed %v, want [2 4 6]", seqsOf(c.Items))
	}
	before := itemBySeq(t, s, id)
	res, err := s.UpdateItems(ctxOf(t), store.UpdateItemsParams{JobID: id, Index: 0, At: at(2 * time.Second), Updates: []store.ItemUpdate{
		{Seq: 2, From: store.ItemSubmitted, ClaimID: "c1", To: store.ItemConfirmed},
		{Seq: 3, From: store.ItemPending, To: store.ItemAbandoned, Error: &store.ItemError{Category: store.CategoryCancelled}},
	}})
	if err == nil {
		if !slices.Contains(res.Rejected, 2) {
			t.Fatalf("UpdateItems(shard 0) applied an update to item 2 of shard 1 (Rejected %v)", res.Rejected)
		}
		if res.Delta != (store.Counts{Pending: -1, Abandoned: 1}) {
			t.Fatalf("UpdateItems delta %+v counts the other shard's item", res.Delta)
		}
	}
	after := itemBySeq(t, s, id)
	if stateOf(after[2]) != stateOf(before[2]) {
		t.Fatalf("item 2 of shard 1 changed through shard 0: %+v", after[2])
	}
	// An unknown seq is either an error or a rejection; never a count.
	res, err = s.UpdateItems(ctxOf(t), store.UpdateItemsParams{JobID: id, Index: 0, At: at(3 * time.Second), Updates: []store.ItemUpdate{
		{Seq: 999, From: store.ItemPending, To: store.ItemAbandoned},
	}})
	if err == nil && (!res.Delta.IsZero() || !slices.Contains(res.Rejected, 999)) {
		t.Fatalf("UpdateItems(unknown seq) = %+v, want it rejected", res)
	}
	if got := listAll(t, s, store.ListItemsParams{JobID: id, Limit: 100}); len(got) != 6 {
		t.Fatalf("job has %d items after an update of an unknown seq, want 6", len(got))
	}
}

func testListItems(t *testing.T, s store.Store, _ Capabilities) {
	p, _ := runningJob(t, s, "tenant-a", 3, 10)
	id := p.Job.ID
	q, _ := runningJob(t, s, "tenant-a", 1, 5) // another job, never listed
	claim(t, s, q.Job.ID, 0, 5, at(time.Second), "q")

	// Shard i holds seqs i+1, i+4, …, i+28.
	for i := range 3 {
		c := claim(t, s, id, i, 6, at(time.Second), fmt.Sprintf("c%d", i))
		seq := seqsOf(c.Items)
		update(t, s, id, i, at(2*time.Second),
			store.ItemUpdate{Seq: seq[0], From: store.ItemSubmitted, To: store.ItemConfirmed},
			store.ItemUpdate{Seq: seq[1], From: store.ItemSubmitted, To: store.ItemFailed, Error: &store.ItemError{Category: store.CategoryPermanent}},
			store.ItemUpdate{Seq: seq[2], From: store.ItemSubmitted, To: store.ItemFailed, Error: &store.ItemError{Category: store.CategoryExhausted}},
			store.ItemUpdate{Seq: seq[3], From: store.ItemSubmitted, To: store.ItemPending, Error: &store.ItemError{Category: store.CategoryRetryable}, NextAttemptAt: at(3 * time.Second)},
			store.ItemUpdate{Seq: seq[4], From: store.ItemSubmitted, To: store.ItemSubmitted, Error: &store.ItemError{Category: store.CategoryUncertain}},
		)
	}
	truth := listAll(t, s, store.ListItemsParams{JobID: id, Limit: 1000})
	if len(truth) != 30 {
		t.Fatalf("ListItems: %d items, want 30", len(truth))
	}
	for i, it := range truth {
		if it.Seq != int64(i+1) || it.JobID != id {
			t.Fatalf("ListItems item %d = seq %d job %s", i, it.Seq, it.JobID)
		}
	}
	expect := func(f func(store.Item) bool) []int64 {
		var out []int64
		for _, it := range truth {
			if f(it) {
				out = append(out, it.Seq)
			}
		}
		return out
	}
	category := func(it store.Item) string {
		if it.Error == nil {
			return ""
		}
		return it.Error.Category
	}
	one := 1
	cases := []struct {
		name string
		p    store.ListItemsParams
		want []int64
	}{
		{"all", store.ListItemsParams{}, expect(func(store.Item) bool { return true })},
		{"pending", store.ListItemsParams{Status: store.ItemPending}, expect(func(it store.Item) bool { return it.Status == store.ItemPending })},
		{"failed", store.ListItemsParams{Status: store.ItemFailed}, expect(func(it store.Item) bool { return it.Status == store.ItemFailed })},
		{"exhausted", store.ListItemsParams{Category: store.CategoryExhausted}, expect(func(it store.Item) bool { return category(it) == store.CategoryExhausted })},
		{"retryable", store.ListItemsParams{Category: store.CategoryRetryable}, expect(func(it store.Item) bool { return category(it) == store.CategoryRetryable })},
		{"under review", store.ListItemsParams{Status: store.ItemSubmitted, Category: store.CategoryUncertain}, expect(func(it store.Item) bool {
			return it.Status == store.ItemSubmitted && category(it) == store.CategoryUncertain
		})},
		{"shard 1", store.ListItemsParams{Shard: &one}, expect(func(it store.Item) bool { return it.Shard == 1 })},
		{"shard 1 failed", store.ListItemsParams{Shard: &one, Status: store.ItemFailed}, expect(func(it store.Item) bool { return it.Shard == 1 && it.Status == store.ItemFailed })},
		{"none", store.ListItemsParams{Status: store.ItemAbandoned}, nil},
	}
	// Sanity of the fixture: the filters select what the suite expects.
	if len(cases[1].want) != 15 || len(cases[2].want) != 6 || len(cases[3].want) != 3 || len(cases[5].want) != 3 || len(cases[6].want) != 10 {
		t.Fatalf("fixture: pending %d failed %d exhausted %d review %d shard1 %d", len(cases[1].want), len(cases[2].want), len(cases[3].want), len(cases[5].want), len(cases[6].want))
	}
	for _, tc := range cases {
		for _, limit := range []int{0, 1, 4} {
			lp := tc.p
			lp.JobID, lp.Limit = id, limit
			got := seqsOf(listAll(t, s, lp))
			if !slices.Equal(got, tc.want) {
				t.Fatalf("ListItems(%s, limit %d) = %v, want %v", tc.name, limit, got, tc.want)
			}
		}
	}
	res, err := s.ListItems(ctxOf(t), store.ListItemsParams{JobID: id, Limit: 30})
	if err != nil || len(res.Items) != 30 {
		t.Fatalf("ListItems(limit 30) = %d items, %v", len(res.Items), err)
	}
	if res.NextCursor != "" {
		// A cursor at the end is allowed, but must lead to an empty page.
		last, err := s.ListItems(ctxOf(t), store.ListItemsParams{JobID: id, Limit: 30, Cursor: res.NextCursor})
		if err != nil || len(last.Items) != 0 || last.NextCursor != "" {
			t.Fatalf("page after the last = %d items, cursor %q, %v", len(last.Items), last.NextCursor, err)
		}
	}
}

func testListSubmittedItems(t *testing.T, s store.Store, _ Capabilities) {
	a, _ := runningJob(t, s, "tenant-a", 1, 10)
	b, _ := runningJob(t, s, "tenant-b", 2, 4)
	t1, t2, t3 := at(time.Minute), at(2*time.Minute), at(3*time.Minute)
	key := func(jobID string, seq int64) string { return fmt.Sprintf("%s#%d", jobID, seq) }

	c1 := claim(t, s, a.Job.ID, 0, 3, t1, "a1")
	update(t, s, a.Job.ID, 0, t1, store.ItemUpdate{Seq: c1.Items[0].Seq, From: store.ItemSubmitted, ClaimID: "a1", To: store.ItemConfirmed})
	c2 := claim(t, s, b.Job.ID, 1, 4, t2, "b1")
	c3 := claim(t, s, a.Job.ID, 0, 2, t3, "a2")

	var early, mid, late []string
	for _, it := range c1.Items[1:] {
		early = append(early, key(a.Job.ID, it.Seq))
	}
	for _, it := range c2.Items {
		mid = append(mid, key(b.Job.ID, it.Seq))
	}
	for _, it := range c3.Items {
		late = append(late, key(a.Job.ID, it.Seq))
	}
	for _, tc := range []struct {
		before time.Time
		want   []string
	}{
		{t1.Add(-time.Second), nil},
		{t1.Add(time.Second), early},
		{t2.Add(time.Second), slices.Concat(early, mid)},
		{t3.Add(time.Second), slices.Concat(early, mid, late)},
	} {
		for _, limit := range []int{0, 2} {
			var got []string
			p := store.ListSubmittedItemsParams{SubmittedBefore: tc.before, Limit: limit}
			for page := 0; ; page++ {
				if page > 100 {
					t.Fatalf("ListSubmittedItems: cursor never ends")
				}
				res, err := s.ListSubmittedItems(ctxOf(t), p)
				if err != nil {
					t.Fatalf("ListSubmittedItems: %v", err)
				}
				if limit > 0 && len(res.Items) > limit {
					t.Fatalf("ListSubmittedItems: %d items in a page of %d", len(res.Items), limit)
				}
				for _, it := range res.Items {
					if it.Status != store.ItemSubmitted || !it.SubmittedAt.Before(tc.before) {
						t.Fatalf("ListSubmittedItems(before %v) returned %s item %d submitted at %v", tc.before, it.Status, it.Seq, it.SubmittedAt)
					}
					got = append(got, key(it.JobID, it.Seq))
				}
				if res.NextCursor == "" {
					break
				}
				p.Cursor = res.NextCursor
			}
			slices.Sort(got)
			want := slices.Sorted(slices.Values(tc.want))
			if !slices.Equal(got, want) {
				t.Fatalf("ListSubmittedItems(before +%v, limit %d) = %v, want %v", tc.before.Sub(Epoch), limit, got, want)
			}
		}
	}
}
