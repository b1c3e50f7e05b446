package storetest

import (
	"slices"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/store"
)

// testOutcomesWatermark: a shard's outcomes watermark moves forward only
// with a fold at the caller's epoch, never back; the replay mark is set
// by a turn beginning on a dirty shard, by an outside change's mark and
// by a turn that could not publish, and cleared only by a fold at the
// caller's epoch; ListOutcomesSince lists exactly the shard's final items
// finished after the time given.
func testOutcomesWatermark(t *testing.T, s store.Store, _ Capabilities) {
	ctx := ctxOf(t)
	p, _ := runningJob(t, s, "tenant-a", 2, 6)
	id := p.Job.ID
	check := func(step string, sh store.Shard, to time.Time, replay bool) {
		t.Helper()
		if !sh.OutcomesPublishedTo.Equal(to) || sh.OutcomesReplay != replay {
			t.Fatalf("%s: watermark %v replay %v, want %v %v", step, sh.OutcomesPublishedTo, sh.OutcomesReplay, to, replay)
		}
		got, err := s.GetShard(ctx, id, 0)
		if err != nil {
			t.Fatal(err)
		}
		if !got.OutcomesPublishedTo.Equal(to) || got.OutcomesReplay != replay {
			t.Fatalf("%s: stored watermark %v replay %v, want %v %v", step, got.OutcomesPublishedTo, got.OutcomesReplay, to, replay)
		}
	}
	advance := func(step string, p store.AdvanceShardParams) store.Shard {
		t.Helper()
		p.JobID, p.Index = id, 0
		sh, err := s.AdvanceShard(ctx, p)
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		return sh
	}
	sh := beginTurn(t, s, id, 0, 1, "m1", at(time.Second))
	check("first turn", sh, time.Time{}, false)

	t2, t3, t4 := at(2*time.Second), at(3*time.Second), at(4*time.Second)
	c := claim(t, s, id, 0, 6, t2, "c1")
	var ups []store.ItemUpdate
	for i, it := range c.Items[:4] {
		to := []store.ItemStatus{store.ItemConfirmed, store.ItemFailed, store.ItemAbandoned, store.ItemPending}[i]
		u := store.ItemUpdate{Seq: it.Seq, From: store.ItemSubmitted, ClaimID: "c1", To: to}
		if to != store.ItemConfirmed {
			u.Error = &store.ItemError{Category: store.CategoryPermanent, Code: "40003"}
		}
		ups = append(ups, u)
	}
	res := update(t, s, id, 0, t2, ups...)
	delta := c.Delta.Add(res.Delta)
	sh = advance("publish to t2", store.AdvanceShardParams{Turn: 1, Epoch: sh.Epoch, Delta: delta, FailuresDelta: res.FailuresDelta,
		At: t2, OutcomesPublishedTo: t2})
	check("publish to t2", sh, t2, false)
	sh = advance("older watermark", store.AdvanceShardParams{Turn: 1, Epoch: sh.Epoch, At: t2, OutcomesPublishedTo: at(time.Second)})
	check("older watermark", sh, t2, false)

	// An outside change marks the shard: a fold at the epoch read before
	// it moves nothing, not even with OutcomesReplayed.
	before := sh
	marked, err := s.MarkShardDirty(ctx, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	if marked.OutcomesReplay {
		t.Fatalf("MarkShardDirty returns the shard as it was, replay %v", marked.OutcomesReplay)
	}
	sh = advance("stale epoch", store.AdvanceShardParams{Turn: 1, Epoch: before.Epoch, At: t3, OutcomesPublishedTo: t3, OutcomesReplayed: true})
	check("stale epoch", sh, t2, true)
	sh = advance("replayed", store.AdvanceShardParams{Turn: 1, Epoch: sh.Epoch, At: t3, OutcomesPublishedTo: t3, OutcomesReplayed: true})
	check("replayed", sh, t3, false)
	sh = advance("unpublished", store.AdvanceShardParams{Turn: 1, Epoch: sh.Epoch, At: t4, OutcomesUnpublished: true})
	check("unpublished", sh, t3, true)
	sh = advance("replayed again", store.AdvanceShardParams{Turn: 1, Epoch: sh.Epoch, At: t4, OutcomesReplayed: true})
	check("replayed again", sh, t3, false)

	// A turn that begins on a dirty shard (this one never ended) replays.
	sh = beginTurn(t, s, id, 0, 2, "m2", t4)
	check("turn after a dirty one", sh, t3, true)

	// ListOutcomesSince: the final items finished after the time given,
	// of this shard only.
	ups = nil
	for _, it := range c.Items[4:] {
		ups = append(ups, store.ItemUpdate{Seq: it.Seq, From: store.ItemSubmitted, ClaimID: "c1", To: store.ItemConfirmed, MsgID: "late"})
	}
	update(t, s, id, 0, t4, ups...)
	c1 := claim(t, s, id, 1, 6, t2, "other")
	var other []store.ItemUpdate
	for _, it := range c1.Items {
		other = append(other, store.ItemUpdate{Seq: it.Seq, From: store.ItemSubmitted, ClaimID: "other", To: store.ItemConfirmed})
	}
	update(t, s, id, 1, t4, other...)
	list := func(after time.Time) []int64 {
		t.Helper()
		var seqs []int64
		err := store.ListOutcomesSince(ctx, s, id, 0, after, func(items []store.Item) error {
			for _, it := range items {
				if it.Shard != 0 || !it.FinishedAt.After(after) || !slices.Contains([]store.ItemStatus{store.ItemConfirmed, store.ItemFailed, store.ItemAbandoned}, it.Status) {
					t.Errorf("listed item %d of shard %d, %s, finished %v (after %v)", it.Seq, it.Shard, it.Status, it.FinishedAt, after)
				}
				seqs = append(seqs, it.Seq)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(seqs)
		return seqs
	}
	seqsOf := func(items []store.Item) []int64 {
		var seqs []int64
		for _, it := range items {
			seqs = append(seqs, it.Seq)
		}
		slices.Sort(seqs)
		return seqs
	}
	if got, want := list(t3), seqsOf(c.Items[4:]); !slices.Equal(got, want) {
		t.Errorf("outcomes after %v: %v, want %v", t3, got, want)
	}
	if got, want := list(time.Time{}), seqsOf(append(slices.Clone(c.Items[:3]), c.Items[4:]...)); !slices.Equal(got, want) {
		t.Errorf("every outcome: %v, want %v", got, want)
	}
	if got := list(t4); len(got) != 0 {
		t.Errorf("outcomes after the last: %v", got)
	}
}
