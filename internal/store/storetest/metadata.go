package storetest

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/store"
)

// testJobMetadata: the submitter's metadata comes back as given from
// GetJob and ListJobs, apart from submit's own Meta.
func testJobMetadata(t *testing.T, s store.Store, _ Capabilities) {
	p, items := NewJob("tenant-meta-"+uniqueID("t"), 1, 2)
	p.Job.Metadata = map[string]string{"order_id": "A-1001", "crm": "汉字 & spaces", "empty": ""}
	createJob(t, s, p, items)
	if got := getJob(t, s, p.Job.ID).Job; !maps.Equal(got.Metadata, p.Job.Metadata) || !maps.Equal(got.Meta, p.Job.Meta) {
		t.Fatalf("GetJob: Metadata %v Meta %v, want %v and %v", got.Metadata, got.Meta, p.Job.Metadata, p.Job.Meta)
	}
	page, err := s.ListJobs(ctxOf(t), store.ListJobsParams{Tenant: p.Job.Tenant})
	if err != nil || len(page.Jobs) != 1 || !maps.Equal(page.Jobs[0].Metadata, p.Job.Metadata) {
		t.Fatalf("ListJobs = %+v, %v; want the job with its metadata", page.Jobs, err)
	}
	bare, bareItems := NewJob(p.Job.Tenant, 1, 1)
	createJob(t, s, bare, bareItems)
	if got := getJob(t, s, bare.Job.ID).Job; len(got.Metadata) != 0 {
		t.Fatalf("a job without metadata reads back %v", got.Metadata)
	}
}

// testItemRefs: a recipient's reference is kept with the snapshot, shown
// by every listing and claim, and ListItems filters by it.
func testItemRefs(t *testing.T, s store.Store, _ Capabilities) {
	p, items := NewJob("tenant-a", 2, 6) // seqs 1..12, shards alternate
	for i := range items {
		switch {
		case i%3 == 0:
			items[i].Ref = "order-42" // shared by several items, both shards
		case i%3 == 1:
			items[i].Ref = "order-" + items[i].To
		}
	}
	createJob(t, s, p, items)
	byRef := map[string][]int64{}
	for _, it := range items {
		byRef[it.Ref] = append(byRef[it.Ref], it.Seq)
	}
	all := listAll(t, s, store.ListItemsParams{JobID: p.Job.ID, Limit: 5})
	for i, it := range all {
		if it.Ref != items[i].Ref {
			t.Fatalf("item %d: Ref %q, want %q", it.Seq, it.Ref, items[i].Ref)
		}
	}
	for _, limit := range []int{1, 100} {
		got := listAll(t, s, store.ListItemsParams{JobID: p.Job.ID, Ref: "order-42", Limit: limit})
		var seqs []int64
		for _, it := range got {
			seqs = append(seqs, it.Seq)
		}
		if !equalSeqs(seqs, byRef["order-42"]) {
			t.Fatalf("ListItems(ref order-42, limit %d) = seqs %v, want %v", limit, seqs, byRef["order-42"])
		}
	}
	if got := listAll(t, s, store.ListItemsParams{JobID: p.Job.ID, Ref: "no-such-ref"}); len(got) != 0 {
		t.Fatalf("ListItems(unknown ref) = %d items", len(got))
	}
	// Combined with a status filter, and seen by a claim.
	c := claim(t, s, p.Job.ID, 0, 100, at(time.Second), "c1")
	for _, it := range c.Items {
		if it.Ref != items[it.Seq-1].Ref {
			t.Fatalf("claimed item %d: Ref %q, want %q", it.Seq, it.Ref, items[it.Seq-1].Ref)
		}
	}
	sub := listAll(t, s, store.ListItemsParams{JobID: p.Job.ID, Ref: "order-42", Status: store.ItemSubmitted})
	for _, it := range sub {
		if it.Shard != 0 || it.Ref != "order-42" || it.Status != store.ItemSubmitted {
			t.Fatalf("ListItems(ref, submitted) returned %+v", it)
		}
	}
}

// testItemRefsLargeJob: over a job of 3,000 items in 3 shards, submitted
// in pages whose order is not the seqs' (as parts arrive), a reference
// shared by items far apart, one of a single item, and many others are
// each found exactly, a page at a time, also within one shard.
func testItemRefsLargeJob(t *testing.T, s store.Store, _ Capabilities) {
	p, items := NewJob("tenant-a", 3, 1000)
	want := map[string][]int64{}
	for i := range items {
		switch {
		case i%250 == 7:
			items[i].Ref = "campaign-shared"
		case i == 2222:
			items[i].Ref = "only-one"
		case i%5 != 0:
			items[i].Ref = fmt.Sprintf("r-%d", i%97)
		}
		if items[i].Ref != "" {
			want[items[i].Ref] = append(want[items[i].Ref], items[i].Seq)
		}
	}
	// Later seqs first: the look-up must not depend on submit order.
	reordered := append(slices.Clone(items[1500:]), items[:1500]...)
	createJob(t, s, p, reordered)
	for _, ref := range []string{"campaign-shared", "only-one", "r-0", "r-96"} {
		for _, limit := range []int{3, 1000} {
			var seqs []int64
			for _, it := range listAll(t, s, store.ListItemsParams{JobID: p.Job.ID, Ref: ref, Limit: limit}) {
				if it.Ref != ref {
					t.Fatalf("ListItems(ref %s) returned item %d with Ref %q", ref, it.Seq, it.Ref)
				}
				seqs = append(seqs, it.Seq)
			}
			if !equalSeqs(seqs, want[ref]) {
				t.Fatalf("ListItems(ref %s, limit %d) = %d seqs %v, want %d %v", ref, limit, len(seqs), seqs, len(want[ref]), want[ref])
			}
		}
	}
	shard := 1
	var inShard []int64
	for _, seq := range want["campaign-shared"] {
		if items[seq-1].Shard == shard {
			inShard = append(inShard, seq)
		}
	}
	var seqs []int64
	for _, it := range listAll(t, s, store.ListItemsParams{JobID: p.Job.ID, Ref: "campaign-shared", Shard: &shard, Limit: 2}) {
		seqs = append(seqs, it.Seq)
	}
	if len(inShard) == 0 || !equalSeqs(seqs, inShard) {
		t.Fatalf("ListItems(ref campaign-shared, shard 1) = %v, want %v", seqs, inShard)
	}
}

func equalSeqs(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// testItemOutcomes: a confirmed item keeps the provider's message id, the
// time it finished and the time of its claim; a failed one its finish
// time; an item sent again loses them until it finishes again.
func testItemOutcomes(t *testing.T, s store.Store, _ Capabilities) {
	p, _ := runningJob(t, s, "tenant-a", 1, 4)
	t1, t2, t3 := at(time.Second), at(2*time.Second), at(3*time.Second)
	c := claim(t, s, p.Job.ID, 0, 4, t1, "c1")
	if len(c.Items) != 4 {
		t.Fatalf("claimed %d items, want 4", len(c.Items))
	}
	seq := func(i int) int64 { return c.Items[i].Seq }
	res := update(t, s, p.Job.ID, 0, t2,
		store.ItemUpdate{Seq: seq(0), From: store.ItemSubmitted, ClaimID: "c1", To: store.ItemConfirmed, MsgID: "msg-0001"},
		store.ItemUpdate{Seq: seq(1), From: store.ItemSubmitted, ClaimID: "c1", To: store.ItemFailed,
			Error: &store.ItemError{Category: store.CategoryPermanent, Code: "40003"}},
		store.ItemUpdate{Seq: seq(2), From: store.ItemSubmitted, ClaimID: "c1", To: store.ItemPending, NextAttemptAt: t2,
			Error: &store.ItemError{Category: store.CategoryRetryable}},
		store.ItemUpdate{Seq: seq(3), From: store.ItemSubmitted, ClaimID: "c1", To: store.ItemConfirmed})
	if len(res.Rejected) > 0 {
		t.Fatalf("rejected %v", res.Rejected)
	}
	got := map[int64]store.Item{}
	for _, it := range listAll(t, s, store.ListItemsParams{JobID: p.Job.ID}) {
		got[it.Seq] = it
	}
	want := []struct {
		sub, fin time.Time
		msgID    string
	}{{t1, t2, "msg-0001"}, {t1, t2, ""}, {t1, time.Time{}, ""}, {t1, t2, ""}}
	for i, w := range want {
		it := got[seq(i)]
		if !it.SubmittedAt.Equal(w.sub) || !it.FinishedAt.Equal(w.fin) || it.MsgID != w.msgID {
			t.Errorf("item %d (%s): SubmittedAt %v FinishedAt %v MsgID %q; want %v %v %q",
				it.Seq, it.Status, it.SubmittedAt, it.FinishedAt, it.MsgID, w.sub, w.fin, w.msgID)
		}
	}
	// A failed item redriven, claimed and confirmed again: new claim time,
	// new finish time, its own message id; nothing of the first run while
	// it is pending.
	update(t, s, p.Job.ID, 0, t3, store.ItemUpdate{Seq: seq(1), From: store.ItemFailed, To: store.ItemPending, ResetAttempts: true, NextAttemptAt: t3})
	redriven := listAll(t, s, store.ListItemsParams{JobID: p.Job.ID, Status: store.ItemPending})
	for _, it := range redriven {
		if it.Seq == seq(1) && (!it.FinishedAt.IsZero() || it.MsgID != "") {
			t.Errorf("a redriven item keeps FinishedAt %v MsgID %q", it.FinishedAt, it.MsgID)
		}
	}
	t4, t5 := at(4*time.Second), at(5*time.Second)
	c2 := claim(t, s, p.Job.ID, 0, 4, t4, "c2")
	var ups []store.ItemUpdate
	for _, it := range c2.Items {
		ups = append(ups, store.ItemUpdate{Seq: it.Seq, From: store.ItemSubmitted, ClaimID: "c2", To: store.ItemConfirmed, MsgID: "again"})
	}
	update(t, s, p.Job.ID, 0, t5, ups...)
	for _, it := range listAll(t, s, store.ListItemsParams{JobID: p.Job.ID}) {
		if it.Seq == seq(1) || it.Seq == seq(2) {
			if !it.SubmittedAt.Equal(t4) || !it.FinishedAt.Equal(t5) || it.MsgID != "again" {
				t.Errorf("item %d sent again: SubmittedAt %v FinishedAt %v MsgID %q; want %v %v again", it.Seq, it.SubmittedAt, it.FinishedAt, it.MsgID, t4, t5)
			}
		}
	}
}
