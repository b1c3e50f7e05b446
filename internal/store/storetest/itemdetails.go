package storetest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/store"
)

// confirmation is what a confirmed item must show when read back.
type confirmation struct {
	msgID    string
	sub, fin time.Time
}

// checkOutcomes fails unless every item in want reads back, by listing and
// by seq, confirmed with its message id, submitted and finished times.
func checkOutcomes(t *testing.T, s store.Store, jobID string, want map[int64]confirmation) {
	t.Helper()
	got := itemBySeq(t, s, jobID)
	seqs := slices.Sorted(func(yield func(int64) bool) {
		for seq := range want {
			if !yield(seq) {
				return
			}
		}
	})
	var byGet []store.Item
	if g, ok := s.(store.ItemGetter); ok {
		var err error
		if byGet, err = g.GetItems(ctxOf(t), store.GetItemsParams{JobID: jobID, Shard: 0, Seqs: seqs}); err != nil {
			t.Fatalf("GetItems: %v", err)
		}
		if len(byGet) != len(seqs) {
			t.Fatalf("GetItems returned %d of %d items", len(byGet), len(seqs))
		}
	}
	for i, seq := range seqs {
		w := want[seq]
		for _, it := range []store.Item{got[seq], byGetOr(byGet, i)} {
			if it.Seq == 0 {
				continue
			}
			if it.Status != store.ItemConfirmed || it.MsgID != w.msgID || !it.SubmittedAt.Equal(w.sub) || !it.FinishedAt.Equal(w.fin) {
				t.Fatalf("item %d = %s, MsgID %q, SubmittedAt %v, FinishedAt %v; want confirmed, %q, %v, %v",
					seq, it.Status, it.MsgID, it.SubmittedAt, it.FinishedAt, w.msgID, w.sub, w.fin)
			}
		}
	}
}

func byGetOr(items []store.Item, i int) store.Item {
	if i < len(items) {
		return items[i]
	}
	return store.Item{}
}

// testMsgIDsOfManyConfirmations: a shard's items confirmed batch after batch
// with long provider message ids (more than a DynamoDB status page keeps
// inline) each read back with its own id and times; an item confirmed,
// re-pended and confirmed again shows only its latest id, and none while it
// is pending.
func testMsgIDsOfManyConfirmations(t *testing.T, s store.Store, _ Capabilities) {
	const batches, per = 8, 25
	p, _ := runningJob(t, s, "tenant-a", 1, batches*per)
	id := p.Job.ID
	r := rand.New(rand.NewPCG(21, 6))
	msgID := func(round int) string { return fmt.Sprintf("r%d-%016x%016x", round, r.Uint64(), r.Uint64()) }
	want := map[int64]confirmation{}
	confirmAll := func(round int, claimID string, sub, fin time.Time, maxItems int) []int64 {
		t.Helper()
		c := claim(t, s, id, 0, maxItems, sub, claimID)
		if len(c.Items) != maxItems {
			t.Fatalf("claim %s took %d items, want %d", claimID, len(c.Items), maxItems)
		}
		ups := make([]store.ItemUpdate, 0, len(c.Items))
		for _, it := range c.Items {
			m := msgID(round)
			ups = append(ups, store.ItemUpdate{Seq: it.Seq, From: store.ItemSubmitted, ClaimID: claimID, To: store.ItemConfirmed, MsgID: m})
			want[it.Seq] = confirmation{msgID: m, sub: sub, fin: fin}
		}
		if res := update(t, s, id, 0, fin, ups...); len(res.Rejected) > 0 {
			t.Fatalf("confirmations of %s rejected: %v", claimID, res.Rejected)
		}
		return seqsOf(c.Items)
	}
	var first []int64
	for b := range batches {
		sub := at(time.Duration(10*b+1) * time.Second)
		seqs := confirmAll(0, fmt.Sprintf("c%d", b), sub, sub.Add(time.Second), per)
		if b == 0 {
			first = seqs
		}
		checkOutcomes(t, s, id, want)
	}

	// The first batch is sent again (an operator's re-drive of confirmed
	// items): while pending they show no id, then only the new one.
	tr := at(time.Hour)
	var ups []store.ItemUpdate
	for _, seq := range first {
		ups = append(ups, store.ItemUpdate{Seq: seq, From: store.ItemConfirmed, To: store.ItemPending, ResetAttempts: true, NextAttemptAt: tr})
		delete(want, seq)
	}
	if res := update(t, s, id, 0, tr, ups...); len(res.Rejected) > 0 {
		t.Fatalf("re-drive rejected %v", res.Rejected)
	}
	for _, it := range itemBySeq(t, s, id) {
		if it.Status == store.ItemPending && (it.MsgID != "" || !it.FinishedAt.IsZero()) {
			t.Fatalf("re-driven item %d shows MsgID %q FinishedAt %v while pending", it.Seq, it.MsgID, it.FinishedAt)
		}
	}
	checkOutcomes(t, s, id, want)
	half := len(first) / 2
	confirmAll(1, "again-1", tr.Add(time.Second), tr.Add(2*time.Second), half)
	checkOutcomes(t, s, id, want)
	confirmAll(2, "again-2", tr.Add(3*time.Second), tr.Add(4*time.Second), len(first)-half)
	checkOutcomes(t, s, id, want)
	if len(want) != batches*per {
		t.Fatalf("%d items confirmed, want %d", len(want), batches*per)
	}
}

// testSubmittedFoundWhenClaimClockIsBehind: a claim made with an earlier
// Now than a claim before it on the same shard (senders' clocks differ) is
// still found by ListSubmittedItems at its own submitted time, before and
// after the later claim's items settle — the reconciler's search for items
// stuck in submitted misses none.
func testSubmittedFoundWhenClaimClockIsBehind(t *testing.T, s store.Store, _ Capabilities) {
	p, _ := runningJob(t, s, "tenant-a", 1, 10)
	id := p.Job.ID
	t1, t2 := at(time.Minute), at(5*time.Minute)
	late := claim(t, s, id, 0, 2, t2, "late")
	early := claim(t, s, id, 0, 2, t1, "early")
	if len(late.Items) != 2 || len(early.Items) != 2 {
		t.Fatalf("claimed %d and %d items, want 2 and 2", len(late.Items), len(early.Items))
	}
	listed := func(before time.Time) []int64 {
		t.Helper()
		var got []int64
		lp := store.ListSubmittedItemsParams{SubmittedBefore: before, Limit: 10}
		for page := 0; ; page++ {
			if page > 100 {
				t.Fatalf("ListSubmittedItems: cursor never ends")
			}
			res, err := s.ListSubmittedItems(ctxOf(t), lp)
			if err != nil {
				t.Fatalf("ListSubmittedItems: %v", err)
			}
			for _, it := range res.Items {
				if it.JobID == id {
					got = append(got, it.Seq)
				}
			}
			if res.NextCursor == "" {
				return sortedSeqs(got)
			}
			lp.Cursor = res.NextCursor
		}
	}
	if got, want := listed(t1.Add(time.Second)), seqsOf(early.Items); !slices.Equal(got, want) {
		t.Fatalf("submitted before +%v = %v, want the early claim's %v", t1.Add(time.Second).Sub(Epoch), got, want)
	}
	if got, want := listed(t2.Add(time.Second)), sortedSeqs(slices.Concat(seqsOf(early.Items), seqsOf(late.Items))); !slices.Equal(got, want) {
		t.Fatalf("submitted before +%v = %v, want %v", t2.Add(time.Second).Sub(Epoch), got, want)
	}
	var ups []store.ItemUpdate
	for _, it := range late.Items {
		ups = append(ups, store.ItemUpdate{Seq: it.Seq, From: store.ItemSubmitted, ClaimID: "late", To: store.ItemConfirmed})
	}
	update(t, s, id, 0, t2, ups...)
	if got, want := listed(t2.Add(time.Second)), seqsOf(early.Items); !slices.Equal(got, want) {
		t.Fatalf("after the late claim settled, submitted before +%v = %v, want %v", t2.Add(time.Second).Sub(Epoch), got, want)
	}
}

// testConfirmedAfterRetryRedriven: an item confirmed on its second attempt
// counts once under store.TallyConfirmedAfterRetry; re-driven (confirmed
// back to pending) it leaves the tally: the update's FailuresDelta takes it
// back, so the folded deltas match a recount.
func testConfirmedAfterRetryRedriven(t *testing.T, s store.Store, _ Capabilities) {
	p, _ := runningJob(t, s, "tenant-a", 1, 3)
	id := p.Job.ID
	seq := seqsOf(claim(t, s, id, 0, 1, at(time.Second), "c1").Items)[0]
	update(t, s, id, 0, at(2*time.Second), store.ItemUpdate{Seq: seq, From: store.ItemSubmitted, ClaimID: "c1", To: store.ItemPending,
		Error: &store.ItemError{Category: store.CategoryRetryable}, NextAttemptAt: at(3 * time.Second)})
	if c := claim(t, s, id, 0, 1, at(3*time.Second), "c2"); len(c.Items) != 1 || c.Items[0].Seq != seq || c.Items[0].Attempts != 2 {
		t.Fatalf("second claim = %+v, want item %d on its second attempt", c.Items, seq)
	}
	tally := int64(0)
	u := update(t, s, id, 0, at(4*time.Second), store.ItemUpdate{Seq: seq, From: store.ItemSubmitted, ClaimID: "c2", To: store.ItemConfirmed})
	tally += u.FailuresDelta[store.TallyConfirmedAfterRetry]
	u = update(t, s, id, 0, at(5*time.Second), store.ItemUpdate{Seq: seq, From: store.ItemConfirmed, To: store.ItemPending, ResetAttempts: true, NextAttemptAt: at(5 * time.Second)})
	if n := u.FailuresDelta[store.TallyConfirmedAfterRetry]; n != -1 {
		t.Fatalf("re-drive of an item confirmed after a retry: delta %v, want %s -1", nonZero(u.FailuresDelta), store.TallyConfirmedAfterRetry)
	}
	tally += u.FailuresDelta[store.TallyConfirmedAfterRetry]
	sh, err := s.RecountShard(ctxOf(t), id, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := sh.Failures[store.TallyConfirmedAfterRetry]; got != tally || got != 0 {
		t.Fatalf("recount: %s = %d, folded deltas %d; want 0", store.TallyConfirmedAfterRetry, got, tally)
	}
}

// testClaimItemsRefusesBadArguments: a claim without a positive Max or
// without a claim id is refused as invalid and claims nothing — an item
// claimed under no id could be settled by anyone; a claim of a job or
// shard that does not exist is ErrNotFound, not an empty claim, and so
// is an update of one.
func testClaimItemsRefusesBadArguments(t *testing.T, s store.Store, _ Capabilities) {
	p, _ := runningJob(t, s, "tenant-a", 1, 3)
	id := p.Job.ID
	for _, bad := range []store.ClaimItemsParams{
		{JobID: id, Index: 0, Max: 0, Now: at(time.Second), ClaimID: "c1"},
		{JobID: id, Index: 0, Max: -1, Now: at(time.Second), ClaimID: "c1"},
		{JobID: id, Index: 0, Max: 3, Now: at(time.Second), ClaimID: ""},
	} {
		res, err := s.ClaimItems(ctxOf(t), bad)
		if !errors.Is(err, store.ErrInvalidArgument) || len(res.Items) != 0 {
			t.Fatalf("ClaimItems(Max %d, ClaimID %q) = %d items, %v; want ErrInvalidArgument", bad.Max, bad.ClaimID, len(res.Items), err)
		}
	}
	for _, bad := range []store.ClaimItemsParams{
		{JobID: "", Index: 0, Max: 3, Now: at(time.Second), ClaimID: "c1"},
		{JobID: id, Index: -1, Max: 3, Now: at(time.Second), ClaimID: "c1"},
	} {
		if res, err := s.ClaimItems(ctxOf(t), bad); err == nil && len(res.Items) > 0 {
			t.Fatalf("ClaimItems(job %q, shard %d) claimed %v", bad.JobID, bad.Index, seqsOf(res.Items))
		}
	}
	for _, unknown := range []store.ClaimItemsParams{
		{JobID: "no-such-job", Index: 0, Max: 3, Now: at(time.Second), ClaimID: "c1"},
		{JobID: id, Index: 7, Max: 3, Now: at(time.Second), ClaimID: "c1"},
	} {
		if _, err := s.ClaimItems(ctxOf(t), unknown); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("ClaimItems(job %q, shard %d) = %v, want ErrNotFound", unknown.JobID, unknown.Index, err)
		}
	}
	for _, unknown := range []struct {
		job   string
		index int
	}{{"no-such-job", 0}, {id, 7}} {
		_, err := s.UpdateItems(ctxOf(t), store.UpdateItemsParams{JobID: unknown.job, Index: unknown.index, At: at(time.Second), Updates: []store.ItemUpdate{
			{Seq: 1, From: store.ItemPending, To: store.ItemAbandoned},
		}})
		if !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("UpdateItems(job %q, shard %d) = %v, want ErrNotFound", unknown.job, unknown.index, err)
		}
	}
	for _, it := range shardItems(t, s, id, 0) {
		if it.Status != store.ItemPending || it.Attempts != 0 || it.ClaimID != "" {
			t.Fatalf("item %d changed by a refused claim: %+v", it.Seq, it)
		}
	}
}

// testMsgIDOnlyWhenConfirmed: a message id given with an update that does
// not confirm (a failure, a retry) is not stored: only a confirmed item
// shows the provider's id.
func testMsgIDOnlyWhenConfirmed(t *testing.T, s store.Store, _ Capabilities) {
	p, _ := runningJob(t, s, "tenant-a", 1, 3)
	id := p.Job.ID
	c := claim(t, s, id, 0, 3, at(time.Second), "c1")
	if len(c.Items) != 3 {
		t.Fatalf("claimed %d items, want 3", len(c.Items))
	}
	seq := seqsOf(c.Items)
	res := update(t, s, id, 0, at(2*time.Second),
		store.ItemUpdate{Seq: seq[0], From: store.ItemSubmitted, ClaimID: "c1", To: store.ItemFailed, MsgID: "m-failed",
			Error: &store.ItemError{Category: store.CategoryPermanent, Code: "40003"}},
		store.ItemUpdate{Seq: seq[1], From: store.ItemSubmitted, ClaimID: "c1", To: store.ItemPending, MsgID: "m-retry", NextAttemptAt: at(time.Hour),
			Error: &store.ItemError{Category: store.CategoryRetryable}},
		store.ItemUpdate{Seq: seq[2], From: store.ItemSubmitted, ClaimID: "c1", To: store.ItemConfirmed, MsgID: "m-sent"})
	if len(res.Rejected) > 0 {
		t.Fatalf("rejected %v", res.Rejected)
	}
	got := itemBySeq(t, s, id)
	for i, want := range []string{"", "", "m-sent"} {
		if it := got[seq[i]]; it.MsgID != want {
			t.Errorf("item %d (%s) has MsgID %q, want %q", it.Seq, it.Status, it.MsgID, want)
		}
	}
}

// testNextDueAtAcrossPages: in a shard of 300 items (two DynamoDB status
// pages), a claim that takes every due item reports as NextDueAt the
// earliest future item of the whole shard — of its own page or of
// another — so the sender neither stops with items pending nor sleeps past
// one that is due.
func testNextDueAtAcrossPages(t *testing.T, s store.Store, _ Capabilities) {
	p, _ := runningJob(t, s, "tenant-a", 1, 300)
	id := p.Job.ID
	t1 := at(time.Minute)
	var all []int64
	for len(all) < 300 {
		c := claim(t, s, id, 0, 300-len(all), t1, fmt.Sprint("all-", len(all)))
		if len(c.Items) == 0 {
			t.Fatalf("claimed %d of 300 items, then none", len(all))
		}
		for _, it := range c.Items {
			all = append(all, it.Seq)
		}
	}
	slices.Sort(all)
	repend := func(seqs []int64, next time.Time) {
		t.Helper()
		var ups []store.ItemUpdate
		for _, seq := range seqs {
			ups = append(ups, store.ItemUpdate{Seq: seq, From: store.ItemSubmitted, To: store.ItemPending, NextAttemptAt: next})
		}
		if res := update(t, s, id, 0, t1, ups...); len(res.Rejected) > 0 {
			t.Fatalf("re-pend rejected %v", res.Rejected)
		}
	}
	due, soon, later := all[:10], all[10:15], all[290:]
	repend(later, t1.Add(time.Hour))
	repend(soon, t1.Add(10*time.Minute))
	repend(due, t1)
	c := claim(t, s, id, 0, 100, t1, "due")
	if !slices.Equal(seqsOf(c.Items), due) {
		t.Fatalf("claimed %v, want the due items %v", seqsOf(c.Items), due)
	}
	if !c.NextDueAt.Equal(t1.Add(10 * time.Minute)) {
		t.Fatalf("NextDueAt %v, want %v (the earliest pending item)", c.NextDueAt, t1.Add(10*time.Minute))
	}
	c = claim(t, s, id, 0, 100, t1.Add(10*time.Minute), "soon")
	if !slices.Equal(seqsOf(c.Items), soon) {
		t.Fatalf("claimed %v, want %v", seqsOf(c.Items), soon)
	}
	if !c.NextDueAt.Equal(t1.Add(time.Hour)) {
		t.Fatalf("NextDueAt %v, want %v (the items of the other page)", c.NextDueAt, t1.Add(time.Hour))
	}
	// The page claimed from keeps items due after the other page's.
	repend(all[30:35], t1.Add(3*time.Hour))
	repend(all[20:30], t1.Add(20*time.Minute))
	c = claim(t, s, id, 0, 100, t1.Add(20*time.Minute), "third")
	if !slices.Equal(seqsOf(c.Items), all[20:30]) {
		t.Fatalf("claimed %v, want %v", seqsOf(c.Items), all[20:30])
	}
	if !c.NextDueAt.Equal(t1.Add(time.Hour)) {
		t.Fatalf("NextDueAt %v, want %v (the other page's, before this page's %v)", c.NextDueAt, t1.Add(time.Hour), t1.Add(3*time.Hour))
	}
}
