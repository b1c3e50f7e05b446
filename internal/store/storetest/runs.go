package storetest

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/qunfa/qunfa/internal/store"
)

// An adapter may keep a shard's neighbouring items of equal state
// together (the SQLite store holds runs of them in one row; the DynamoDB
// store pages): the subtests here change some items of such a group and
// not others, and read them back every way the port allows.

// runFixture is a running job of shards × perShard items (NewJob: seqs
// dealt round-robin) and what the suite expects of each item.
type runFixture struct {
	s      store.Store
	jobID  string
	shards int
	want   map[int64]*runItem
}

// runItem is what an item must show.
type runItem struct {
	shard    int
	to       string
	ref      string
	status   store.ItemStatus
	attempts int
	claimID  string
	category string // "" = no error
	msgID    string
	next     time.Time // when pending
	subAt    time.Time
	finAt    time.Time
}

func newRunFixture(t tb, s store.Store, shards, perShard int) *runFixture {
	t.Helper()
	p, items := runningJob(t, s, "tenant-a", shards, perShard)
	f := &runFixture{s: s, jobID: p.Job.ID, shards: shards, want: map[int64]*runItem{}}
	for _, it := range items {
		f.want[it.Seq] = &runItem{shard: it.Shard, to: it.To, status: store.ItemPending}
	}
	return f
}

// newRunFixtureRefs is newRunFixture with a ref on every fifth item (one
// of three refs): items an adapter may not group with their neighbours,
// in the middle of groups.
func newRunFixtureRefs(t tb, s store.Store, shards, perShard int) *runFixture {
	t.Helper()
	p, items := NewJob("tenant-a", shards, perShard)
	for i := range items {
		if items[i].Seq%5 == 0 {
			items[i].Ref = fmt.Sprintf("ref-%d", items[i].Seq%3)
		}
	}
	createJob(t, s, p, items)
	if _, err := s.TransitionJob(ctxOf(t), store.TransitionJobParams{JobID: p.Job.ID, To: store.JobRunning, At: Epoch}); err != nil {
		t.Fatalf("TransitionJob(%s → running): %v", p.Job.ID, err)
	}
	for i := range shards {
		if _, err := s.TransitionShard(ctxOf(t), store.TransitionShardParams{JobID: p.Job.ID, Index: i, To: store.ShardRunning, At: Epoch}); err != nil {
			t.Fatalf("TransitionShard(%s/%d → running): %v", p.Job.ID, i, err)
		}
	}
	f := &runFixture{s: s, jobID: p.Job.ID, shards: shards, want: map[int64]*runItem{}}
	for _, it := range items {
		f.want[it.Seq] = &runItem{shard: it.Shard, to: it.To, ref: it.Ref, status: store.ItemPending}
	}
	return f
}

// claim claims up to max items of a shard at now and checks they are due
// items of the shard in seq order, the fresh ones (never retried) the
// shard's lowest fresh seqs (an adapter may take a due retry later).
func (f *runFixture) claim(t tb, shard, max int, now time.Time, claimID string) []store.Item {
	t.Helper()
	res := claim(t, f.s, f.jobID, shard, max, now, claimID)
	due := f.due(shard, now)
	if len(res.Items) > max || len(res.Items) > len(due) || (len(res.Items) == 0 && len(due) > 0) {
		t.Fatalf("claim of %d on shard %d took %d items, %d due", max, shard, len(res.Items), len(due))
	}
	var fresh, gotFresh []int64
	for _, seq := range due {
		if f.want[seq].next.IsZero() {
			fresh = append(fresh, seq)
		}
	}
	got := seqsOf(res.Items)
	for i, seq := range got {
		if !slices.Contains(due, seq) || (i > 0 && seq <= got[i-1]) {
			t.Fatalf("claim of %d on shard %d took seqs %v, due are %v", max, shard, got, due)
		}
		if f.want[seq].next.IsZero() {
			gotFresh = append(gotFresh, seq)
		}
	}
	if !slices.Equal(gotFresh, fresh[:len(gotFresh)]) {
		t.Fatalf("claim of %d on shard %d took fresh seqs %v, want the lowest fresh ones %v", max, shard, gotFresh, fresh[:len(gotFresh)])
	}
	if res.Delta != (store.Counts{Pending: -int64(len(res.Items)), Submitted: int64(len(res.Items))}) {
		t.Fatalf("claim of %d items: delta %+v", len(res.Items), res.Delta)
	}
	for _, it := range res.Items {
		w := f.want[it.Seq]
		w.status, w.claimID, w.subAt = store.ItemSubmitted, claimID, now
		w.attempts++
		f.check(t, it, "claimed")
	}
	return res.Items
}

// claimAll claims n items of a shard at now under claimID, in as many
// claims as the adapter needs (it may return fewer than Max).
func (f *runFixture) claimAll(t tb, shard, n int, now time.Time, claimID string) []store.Item {
	t.Helper()
	var out []store.Item
	for len(out) < n {
		got := f.claim(t, shard, n-len(out), now, claimID)
		if len(got) == 0 {
			t.Fatalf("claims of shard %d stopped at %d items, want %d", shard, len(out), n)
		}
		out = append(out, got...)
	}
	return out
}

// due lists a shard's due pending seqs in order.
func (f *runFixture) due(shard int, now time.Time) []int64 {
	var out []int64
	for _, seq := range slices.Sorted(maps.Keys(f.want)) {
		w := f.want[seq]
		if w.shard == shard && w.status == store.ItemPending && !w.next.After(now) {
			out = append(out, seq)
		}
	}
	return out
}

// outcome is one item's result in settle.
type outcome int

const (
	confirmIt outcome = iota
	failIt
	retryIt
	leaveIt
)

// settle records outcomes of items claimed under claimID at now: every
// update applies (none is rejected), and the deltas are the model's.
func (f *runFixture) settle(t tb, shard int, claimID string, now time.Time, seqs []int64, outs []outcome) {
	t.Helper()
	var ups []store.ItemUpdate
	var delta store.Counts
	for i, seq := range seqs {
		w := f.want[seq]
		u := store.ItemUpdate{Seq: seq, From: store.ItemSubmitted, ClaimID: claimID}
		switch outs[i] {
		case confirmIt:
			u.To, u.MsgID = store.ItemConfirmed, fmt.Sprintf("msg-%d", seq)
			w.status, w.msgID, w.category, w.finAt = store.ItemConfirmed, u.MsgID, "", now
		case failIt:
			u.To, u.Error = store.ItemFailed, &store.ItemError{Category: store.CategoryPermanent, Code: "40003", Message: "invalid user"}
			w.status, w.category, w.finAt = store.ItemFailed, store.CategoryPermanent, now
		case retryIt:
			u.To, u.NextAttemptAt, u.Error = store.ItemPending, now.Add(time.Minute), &store.ItemError{Category: store.CategoryRetryable, Code: "-1"}
			w.status, w.category, w.next = store.ItemPending, store.CategoryRetryable, now.Add(time.Minute)
		default:
			continue
		}
		if w.claimID != claimID {
			t.Fatalf("fixture: item %d is not under claim %s", seq, claimID)
		}
		delta.Move(store.ItemSubmitted, u.To)
		ups = append(ups, u)
	}
	if len(ups) == 0 {
		return
	}
	res := update(t, f.s, f.jobID, shard, now, ups...)
	if len(res.Rejected) != 0 {
		t.Fatalf("settling %d items of claim %s: rejected %v", len(ups), claimID, res.Rejected)
	}
	if res.Delta != delta {
		t.Fatalf("settling %d items of claim %s: delta %+v, want %+v", len(ups), claimID, res.Delta, delta)
	}
}

// check fails unless it is as the fixture expects.
func (f *runFixture) check(t tb, it store.Item, how string) {
	t.Helper()
	w, ok := f.want[it.Seq]
	if !ok {
		t.Fatalf("%s: item %d is not in the job", how, it.Seq)
	}
	cat := ""
	if it.Error != nil {
		cat = it.Error.Category
	}
	bad := it.JobID != f.jobID || it.Shard != w.shard || it.To != w.to || it.Ref != w.ref || it.Account != fmt.Sprintf("acct-%d", w.shard) ||
		it.Status != w.status || it.Attempts != w.attempts || cat != w.category ||
		it.MsgID != w.msgID || !it.SubmittedAt.Equal(w.subAt) || !it.FinishedAt.Equal(w.finAt) ||
		it.Vars["name"] != fmt.Sprintf("Name %d", it.Seq)
	if w.status == store.ItemPending && !it.NextAttemptAt.Equal(w.next) {
		bad = true
	}
	// The claim is the item's while submitted (an adapter may drop it
	// after).
	if w.status == store.ItemSubmitted && it.ClaimID != w.claimID {
		bad = true
	}
	if bad {
		t.Fatalf("%s: item %d is %+v (error %+v), want %+v", how, it.Seq, it, it.Error, *w)
	}
}

// checkList pages through the items p selects, limit at a time, and
// compares them with the fixture's.
func (f *runFixture) checkList(t tb, p store.ListItemsParams) {
	t.Helper()
	p.JobID = f.jobID
	got := listAll(t, f.s, p)
	var want []int64
	for _, seq := range slices.Sorted(maps.Keys(f.want)) {
		w := f.want[seq]
		if (p.Status == "" || w.status == p.Status) && (p.Category == "" || w.category == p.Category) &&
			(p.Shard == nil || *p.Shard == w.shard) && (p.Ref == "" || w.ref == p.Ref) {
			want = append(want, seq)
		}
	}
	if !slices.Equal(seqsOf(got), want) {
		t.Fatalf("ListItems(status %q, category %q, shard %v, ref %q, limit %d) = seqs %v, want %v", p.Status, p.Category, p.Shard, p.Ref, p.Limit, seqsOf(got), want)
	}
	for _, it := range got {
		f.check(t, it, "listed")
	}
}

// checkSubmitted pages through ListSubmittedItems, limit at a time, and
// compares the fixture job's among them with the fixture's submitted
// items (the property test's store holds the jobs of earlier cases too):
// each once (the port leaves the order open).
func (f *runFixture) checkSubmitted(t tb, before time.Time, limit int) {
	t.Helper()
	var got []store.Item
	p := store.ListSubmittedItemsParams{SubmittedBefore: before, Limit: limit}
	for page := 0; ; page++ {
		if page > 10000 {
			t.Fatalf("ListSubmittedItems: cursor never ends")
		}
		res, err := f.s.ListSubmittedItems(ctxOf(t), p)
		if err != nil {
			t.Fatalf("ListSubmittedItems: %v", err)
		}
		if len(res.Items) > limit {
			t.Fatalf("ListSubmittedItems: %d items in a page of %d", len(res.Items), limit)
		}
		for _, it := range res.Items {
			if it.JobID == f.jobID {
				got = append(got, it)
			}
		}
		if res.NextCursor == "" {
			break
		}
		p.Cursor = res.NextCursor
	}
	var want []int64
	for _, seq := range slices.Sorted(maps.Keys(f.want)) {
		if w := f.want[seq]; w.status == store.ItemSubmitted && w.subAt.Before(before) {
			want = append(want, seq)
		}
	}
	if !slices.Equal(sortedSeqs(seqsOf(got)), want) {
		t.Fatalf("ListSubmittedItems(before %v, limit %d) = %v, want %v", before, limit, seqsOf(got), want)
	}
	for _, it := range got {
		f.check(t, it, "listed as submitted")
	}
}

// checkCounts recounts every shard and compares with the fixture.
func (f *runFixture) checkCounts(t tb) {
	t.Helper()
	for shard := range f.shards {
		sh, err := f.s.RecountShard(ctxOf(t), f.jobID, shard)
		if err != nil {
			t.Fatalf("RecountShard(%d): %v", shard, err)
		}
		var items []store.Item
		for _, w := range f.want {
			if w.shard == shard {
				it := store.Item{Status: w.status, Attempts: w.attempts}
				if w.category != "" {
					it.Error = &store.ItemError{Category: w.category}
				}
				items = append(items, it)
			}
		}
		c, fails := Recount(items)
		if sh.Counts != c || !sameFailures(sh.Failures, fails) {
			t.Fatalf("shard %d recounts to %+v %v, want %+v %v", shard, sh.Counts, nonZero(sh.Failures), c, fails)
		}
	}
}

// testRunsClaimAndSettle: a claim whose Max ends in the middle of a group
// of equal items takes exactly the lowest due seqs; the next claim
// continues where it stopped; one item of a claimed batch failing, one
// retried and the others confirmed (each with its own message id) leave
// every item with its own outcome, listed by status and category with
// cursors landing between items of equal state, read by seq across
// shards, and counted exactly.
func testRunsClaimAndSettle(t *testing.T, s store.Store, _ Capabilities) {
	f := newRunFixture(t, s, 3, 200)
	now := at(time.Second)
	a := f.claimAll(t, 0, 37, now, "c1")
	b := f.claimAll(t, 0, 100, now, "c2")
	f.claimAll(t, 1, 1, now, "c3")
	f.claimAll(t, 2, 90, now, "c5")
	f.claimAll(t, 1, 90, now, "c6")
	outs := make([]outcome, len(b))
	outs[10], outs[11], outs[50], outs[99] = failIt, retryIt, leaveIt, failIt
	f.settle(t, 0, "c2", at(2*time.Second), seqsOf(b), outs)
	f.settle(t, 0, "c1", at(3*time.Second), seqsOf(a), make([]outcome, len(a)))
	// An outcome reported again is rejected and changes nothing.
	res := update(t, s, f.jobID, 0, at(4*time.Second), store.ItemUpdate{Seq: b[0].Seq, From: store.ItemSubmitted, ClaimID: "c2", To: store.ItemFailed})
	if !slices.Equal(res.Rejected, []int64{b[0].Seq}) || res.Delta != (store.Counts{}) {
		t.Fatalf("second outcome of %d: rejected %v, delta %+v", b[0].Seq, res.Rejected, res.Delta)
	}
	shard1 := 1
	for _, limit := range []int{1, 7, 64, 1000} {
		f.checkList(t, store.ListItemsParams{Limit: limit})
		f.checkList(t, store.ListItemsParams{Status: store.ItemConfirmed, Limit: limit})
		f.checkList(t, store.ListItemsParams{Status: store.ItemSubmitted, Limit: limit})
		f.checkList(t, store.ListItemsParams{Status: store.ItemPending, Limit: limit})
		f.checkList(t, store.ListItemsParams{Status: store.ItemFailed, Limit: limit})
		f.checkList(t, store.ListItemsParams{Category: store.CategoryPermanent, Limit: limit})
		f.checkList(t, store.ListItemsParams{Shard: &shard1, Limit: limit})
	}
	// A cursor in the middle of the confirmed items of claim c2.
	first, err := s.ListItems(ctxOf(t), store.ListItemsParams{JobID: f.jobID, Status: store.ItemConfirmed, Limit: 40})
	if err != nil || len(first.Items) != 40 || first.NextCursor == "" {
		t.Fatalf("first page of confirmed: %d items, cursor %q, %v", len(first.Items), first.NextCursor, err)
	}
	next, err := s.ListItems(ctxOf(t), store.ListItemsParams{JobID: f.jobID, Status: store.ItemConfirmed, Limit: 5, Cursor: first.NextCursor})
	if err != nil || len(next.Items) != 5 || next.Items[0].Seq <= first.Items[39].Seq {
		t.Fatalf("page after a cursor inside the confirmed items: %v, %v", seqsOf(next.Items), err)
	}
	g, ok := s.(store.ItemGetter)
	if !ok {
		t.Fatal("the adapter does not implement store.ItemGetter")
	}
	for shard := range f.shards {
		// Seqs inside groups of every shard; only the shard's come back.
		seqs := []int64{b[10].Seq, b[11].Seq, b[12].Seq, a[36].Seq, b[99].Seq, 2, 3, 599, 600, 1000}
		got, err := g.GetItems(ctxOf(t), store.GetItemsParams{JobID: f.jobID, Shard: shard, Seqs: seqs})
		if err != nil {
			t.Fatal(err)
		}
		var want []int64
		for _, seq := range sortedSeqs(seqs) {
			if w, ok := f.want[seq]; ok && w.shard == shard {
				want = append(want, seq)
			}
		}
		if !slices.Equal(seqsOf(got), want) {
			t.Fatalf("GetItems(shard %d, %v) = %v, want %v", shard, seqs, seqsOf(got), want)
		}
		for _, it := range got {
			f.check(t, it, "got")
		}
	}
	// The retried item is due again a minute later, before the rest.
	later := at(2*time.Second + time.Minute)
	again := f.claimAll(t, 0, len(f.due(0, later)), later, "c4")
	if !slices.Contains(seqsOf(again), b[11].Seq) {
		t.Fatalf("claims after the retry time took %v, not the retried %d", seqsOf(again), b[11].Seq)
	}
	f.checkList(t, store.ListItemsParams{Limit: 13})
	for _, limit := range []int{1, 3, 50, 1000} {
		f.checkSubmitted(t, at(time.Hour), limit)
		f.checkSubmitted(t, later, limit)
	}
	f.checkCounts(t)
}

// testRunsReplan: planning written again after a crash, with other page
// boundaries and changed recipients over part of the snapshot, leaves
// exactly one item per seq, the last written.
func testRunsReplan(t *testing.T, s store.Store, _ Capabilities) {
	p, items := NewJob("tenant-a", 3, 150)
	res, err := s.CreateJob(ctxOf(t), p)
	if err != nil || !res.Created {
		t.Fatalf("CreateJob: %v", err)
	}
	put := func(page []store.Item) {
		t.Helper()
		if err := s.PutItems(ctxOf(t), store.PutItemsParams{JobID: p.Job.ID, Items: page}); err != nil {
			t.Fatalf("PutItems(from seq %d): %v", page[0].Seq, err)
		}
	}
	for start := 0; start < len(items); start += 70 {
		put(items[start:min(start+70, len(items))])
	}
	// Again from item 35 in pages of 130, half the recipients changed.
	for i := 35; i < 300; i++ {
		if i%2 == 0 {
			items[i].To += "-again"
		}
	}
	for start := 35; start < 300; start += 130 {
		put(items[start:min(start+130, 300)])
	}
	// One shard's items again, alone, in one page.
	var shard2 []store.Item
	for _, it := range items {
		if it.Shard == 2 {
			shard2 = append(shard2, it)
		}
	}
	put(shard2[:store.MaxPutItems/4])
	if _, err := s.TransitionJob(ctxOf(t), store.TransitionJobParams{JobID: p.Job.ID, To: store.JobRunning, At: Epoch}); err != nil {
		t.Fatal(err)
	}
	f := &runFixture{s: s, jobID: p.Job.ID, shards: 3, want: map[int64]*runItem{}}
	for _, it := range items {
		f.want[it.Seq] = &runItem{shard: it.Shard, to: it.To, status: store.ItemPending}
	}
	f.checkList(t, store.ListItemsParams{Limit: 1000})
	f.checkList(t, store.ListItemsParams{Limit: 33})
	for shard := range 3 {
		sh := shard
		f.checkList(t, store.ListItemsParams{Shard: &sh, Limit: 1000})
		f.claimAll(t, shard, 150, at(time.Second), fmt.Sprintf("c%d", shard))
		if due := f.due(shard, at(time.Hour)); len(due) != 0 {
			t.Fatalf("shard %d: %d items left after its 150 were claimed", shard, len(due))
		}
	}
	f.checkCounts(t)
}

// testRunsProperty drives a job of several shards through random claims
// (Max often ending inside a group of equal items), outcomes that differ
// item by item, retries, and listings with every filter and page size,
// and compares everything with a per-item model.
func testRunsProperty(t *testing.T, s store.Store, caps Capabilities) {
	sz := caps.sizes()
	checks, perShard, steps := sz.propertyChecks/4, 150, sz.propertySteps
	if caps.SlowWrites {
		perShard = 60
	}
	checkProperty(t, max(checks, 3), func(rt *rapid.T) {
		shards := rapid.IntRange(1, 3).Draw(rt, "shards")
		fixture := newRunFixture
		if rapid.Bool().Draw(rt, "refs") {
			fixture = newRunFixtureRefs
		}
		f := fixture(rt, s, shards, perShard)
		now := at(time.Second)
		type batch struct {
			shard   int
			claimID string
			seqs    []int64
		}
		var open []batch
		for step := range rapid.IntRange(1, steps).Draw(rt, "steps") {
			switch rapid.IntRange(0, 6).Draw(rt, "action") {
			case 0, 1:
				shard := rapid.IntRange(0, shards-1).Draw(rt, "shard")
				max := rapid.IntRange(1, 150).Draw(rt, "max")
				id := fmt.Sprintf("c%d", step)
				if got := f.claim(rt, shard, max, now, id); len(got) > 0 {
					open = append(open, batch{shard, id, seqsOf(got)})
				}
			case 2:
				if len(open) == 0 {
					continue
				}
				i := rapid.IntRange(0, len(open)-1).Draw(rt, "batch")
				b := open[i]
				open = slices.Delete(open, i, i+1)
				// Operators may have moved some of the batch meanwhile.
				b.seqs = slices.DeleteFunc(slices.Clone(b.seqs), func(seq int64) bool {
					w := f.want[seq]
					return w.status != store.ItemSubmitted || w.claimID != b.claimID
				})
				outs := make([]outcome, len(b.seqs))
				mode := rapid.IntRange(0, 2).Draw(rt, "mode")
				for j := range outs {
					switch mode {
					case 1: // one outcome for all
						outs[j] = outs[0]
						if j == 0 {
							outs[0] = outcome(rapid.IntRange(0, 3).Draw(rt, "all"))
						}
					case 2: // mostly confirmed
						if rapid.IntRange(0, 9).Draw(rt, "odd") == 0 {
							outs[j] = outcome(rapid.IntRange(1, 3).Draw(rt, "outcome"))
						}
					default:
						outs[j] = outcome(rapid.IntRange(0, 3).Draw(rt, "outcome"))
					}
				}
				now = now.Add(time.Second) // (an adapter may keep finish times to the second)
				f.settle(rt, b.shard, b.claimID, now, b.seqs, outs)
			case 3:
				now = now.Add(time.Duration(rapid.IntRange(1, 90).Draw(rt, "seconds")) * time.Second)
			case 4:
				p := store.ListItemsParams{Limit: rapid.IntRange(1, 120).Draw(rt, "limit")}
				switch rapid.IntRange(0, 4).Draw(rt, "filter") {
				case 1:
					p.Status = rapid.SampledFrom([]store.ItemStatus{store.ItemPending, store.ItemSubmitted, store.ItemConfirmed, store.ItemFailed}).Draw(rt, "status")
				case 2:
					p.Category = rapid.SampledFrom([]string{store.CategoryPermanent, store.CategoryRetryable}).Draw(rt, "category")
				case 3:
					sh := rapid.IntRange(0, shards-1).Draw(rt, "list shard")
					p.Shard = &sh
				case 4:
					p.Ref = fmt.Sprintf("ref-%d", rapid.IntRange(0, 2).Draw(rt, "ref"))
				}
				f.checkList(rt, p)
			case 5:
				f.checkSubmitted(rt, now.Add(time.Second), rapid.IntRange(1, 120).Draw(rt, "submitted limit"))
			case 6:
				now = now.Add(time.Second)
				shard := rapid.IntRange(0, shards-1).Draw(rt, "operator shard")
				var seqs []int64
				for _, seq := range slices.Sorted(maps.Keys(f.want)) {
					if f.want[seq].shard == shard && rapid.IntRange(0, 15).Draw(rt, "pick") == 0 {
						seqs = append(seqs, seq)
					}
				}
				f.operate(rt, shard, now, seqs, func(seq int64) bool { return rapid.Bool().Draw(rt, "stale") })
			}
		}
		f.checkList(rt, store.ListItemsParams{Limit: 1000})
		f.checkCounts(rt)
	})
}

// operate changes single items of a shard at now as operators and the
// sender's side paths do, whatever group they are in: a submitted item
// given back (the attempt returned, its error kept) or resolved
// confirmed, a failed one redriven (attempts reset), a pending one
// abandoned. An update for which stale says so names a status the item
// is not in and must be rejected, changing nothing. The count and
// failure deltas must be those of the items' moves.
func (f *runFixture) operate(t tb, shard int, now time.Time, seqs []int64, stale func(seq int64) bool) {
	t.Helper()
	if len(seqs) == 0 {
		return
	}
	var (
		ups           []store.ItemUpdate
		before, after []store.Item
		wantRejected  []int64
		next          = map[int64]runItem{}
	)
	model := func(w runItem) store.Item {
		it := store.Item{Status: w.status, Attempts: w.attempts}
		if w.category != "" {
			it.Error = &store.ItemError{Category: w.category}
		}
		return it
	}
	for _, seq := range seqs {
		w := *f.want[seq]
		n := w
		u := store.ItemUpdate{Seq: seq, From: w.status}
		switch w.status {
		case store.ItemSubmitted:
			if seq%2 == 0 {
				u.To, u.ClaimID, u.AttemptsDelta, u.KeepError, u.NextAttemptAt = store.ItemPending, w.claimID, -1, true, now
				n.status, n.attempts, n.next = store.ItemPending, max(0, w.attempts-1), now
			} else {
				u.To, u.MsgID = store.ItemConfirmed, fmt.Sprintf("resolved-%d", seq)
				n.status, n.msgID, n.category, n.finAt = store.ItemConfirmed, u.MsgID, "", now
			}
		case store.ItemFailed:
			u.To, u.ResetAttempts, u.NextAttemptAt = store.ItemPending, true, now
			n.status, n.attempts, n.category, n.next, n.finAt, n.msgID = store.ItemPending, 0, "", now, time.Time{}, ""
		case store.ItemPending:
			u.To, u.Error = store.ItemAbandoned, &store.ItemError{Category: store.CategoryPermanent, Code: "cancelled"}
			n.status, n.category, n.finAt = store.ItemAbandoned, store.CategoryPermanent, now
		default:
			continue
		}
		if stale(seq) {
			u.From = store.ItemAbandoned // not the item's status (abandoned ones are left out)
			wantRejected = append(wantRejected, seq)
			ups = append(ups, u)
			continue
		}
		ups = append(ups, u)
		before, after = append(before, model(w)), append(after, model(n))
		next[seq] = n
	}
	if len(ups) == 0 {
		return
	}
	res := update(t, f.s, f.jobID, shard, now, ups...)
	if !slices.Equal(sortedSeqs(res.Rejected), wantRejected) {
		t.Fatalf("operator updates of %v: rejected %v, want %v", seqs, res.Rejected, wantRejected)
	}
	c0, f0 := Recount(before)
	c1, f1 := Recount(after)
	if want := c1.Add(negate(c0)); res.Delta != want {
		t.Fatalf("operator updates of %v: delta %+v, want %+v", seqs, res.Delta, want)
	}
	for k, v := range f0 {
		f1[k] -= v
	}
	if !sameFailures(res.FailuresDelta, f1) {
		t.Fatalf("operator updates of %v: failures delta %v, want %v", seqs, nonZero(res.FailuresDelta), nonZero(f1))
	}
	for seq, n := range next {
		*f.want[seq] = n
	}
	got, err := f.s.(store.ItemGetter).GetItems(ctxOf(t), store.GetItemsParams{JobID: f.jobID, Shard: shard, Seqs: seqs})
	if err != nil {
		t.Fatalf("GetItems(%v): %v", seqs, err)
	}
	if !slices.Equal(seqsOf(got), seqs) {
		t.Fatalf("GetItems(%v) = seqs %v", seqs, seqsOf(got))
	}
	for _, it := range got {
		f.check(t, it, "after an operator's update")
	}
}
