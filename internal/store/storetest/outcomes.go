package storetest

import (
	"slices"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/store"
)

// testOutcomesWatermark: a shard's outcomes watermark moves forward only
// with a fold at the caller's epoch, never back; the replay mark is set
// by a turn beginning on a dirty shard and by a turn that could not
// publish; an outside change counts in OutcomesOutside from its mark to
// its fold (FoldOutsideTurn, on a clean or a dirty shard); a replay clears
// both only by a fold at the caller's epoch; ListOutcomesSince lists
// exactly the shard's final items finished after the time given.
func testOutcomesWatermark(t *testing.T, s store.Store, _ Capabilities) {
	ctx := ctxOf(t)
	p, _ := runningJob(t, s, "tenant-a", 2, 6)
	id := p.Job.ID
	outside := int64(0)
	check := func(step string, sh store.Shard, to time.Time, replay bool) {
		t.Helper()
		if !sh.OutcomesPublishedTo.Equal(to) || sh.OutcomesReplay != replay || sh.OutcomesOutside != outside {
			t.Fatalf("%s: watermark %v replay %v outside %d, want %v %v %d", step, sh.OutcomesPublishedTo, sh.OutcomesReplay, sh.OutcomesOutside, to, replay, outside)
		}
		got, err := s.GetShard(ctx, id, 0)
		if err != nil {
			t.Fatal(err)
		}
		if !got.OutcomesPublishedTo.Equal(to) || got.OutcomesReplay != replay || got.OutcomesOutside != outside {
			t.Fatalf("%s: stored watermark %v replay %v outside %d, want %v %v %d", step, got.OutcomesPublishedTo, got.OutcomesReplay, got.OutcomesOutside, to, replay, outside)
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

	// An outside change marks the shard (dirty: a turn runs) and ends:
	// counted from mark to fold.
	before, err := store.BeginOutsideTurn(ctx, s, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	outside = 1
	if before.OutcomesOutside != 0 {
		t.Fatalf("MarkShardDirty returns the shard as it was, outside %d", before.OutcomesOutside)
	}
	sh, err = store.FoldOutsideTurn(ctx, s, before, store.Counts{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	outside = 0
	check("outside change ended", sh, t2, false)
	// Another one that never ends (it died): a fold at the epoch read
	// before it moves nothing, not even with OutcomesReplayed.
	stale := sh
	if _, err := s.MarkShardDirty(ctx, id, 0); err != nil {
		t.Fatal(err)
	}
	outside = 1
	sh = advance("stale epoch", store.AdvanceShardParams{Turn: 1, Epoch: stale.Epoch, At: t3, OutcomesPublishedTo: t3, OutcomesReplayed: true})
	check("stale epoch", sh, t2, false)
	// While it is unfinished the watermark stays, even at the epoch; the
	// first turn to see it notes when.
	sh = advance("unfinished outside change", store.AdvanceShardParams{Turn: 1, Epoch: sh.Epoch, At: t3, OutcomesPublishedTo: t3, OutcomesOutsideSeenAt: t3})
	check("unfinished outside change", sh, t2, false)
	sh = advance("seen again", store.AdvanceShardParams{Turn: 1, Epoch: sh.Epoch, At: t4, OutcomesOutsideSeenAt: t4})
	if !sh.OutcomesOutsideSeenAt.Equal(t3) {
		t.Fatalf("unfinished outside changes first seen at %v, want %v", sh.OutcomesOutsideSeenAt, t3)
	}
	if store.OutcomesNeedReplay(sh, t4) || !store.OutcomesNeedReplay(sh, t3.Add(store.OutcomesOutsideGrace)) {
		t.Fatalf("an outside change unfinished since %v: replay at %v %v, at %v %v", t3,
			t4, store.OutcomesNeedReplay(sh, t4), t3.Add(store.OutcomesOutsideGrace), store.OutcomesNeedReplay(sh, t3.Add(store.OutcomesOutsideGrace)))
	}
	outside = 0
	sh = advance("replayed", store.AdvanceShardParams{Turn: 1, Epoch: sh.Epoch, At: t3, OutcomesPublishedTo: t3, OutcomesReplayed: true})
	check("replayed", sh, t3, false)
	sh = advance("unpublished", store.AdvanceShardParams{Turn: 1, Epoch: sh.Epoch, At: t4, OutcomesUnpublished: true})
	check("unpublished", sh, t3, true)
	sh = advance("replayed again", store.AdvanceShardParams{Turn: 1, Epoch: sh.Epoch, At: t4, OutcomesReplayed: true})
	check("replayed again", sh, t3, false)

	// A turn that begins after one that never ended replays.
	sh = beginTurn(t, s, id, 0, 2, "m2", t4)
	check("turn after a dead one", sh, t3, true)
	if !sh.TurnOpen || !sh.Dirty {
		t.Fatalf("a turn began: open %v dirty %v", sh.TurnOpen, sh.Dirty)
	}
	sh = advance("turn ends", store.AdvanceShardParams{Turn: 2, Epoch: sh.Epoch, At: t4, OutcomesReplayed: true, EndTurn: true})
	check("turn ends", sh, t3, false)
	if sh.TurnOpen {
		t.Fatalf("an ended turn is open")
	}
	// Two outside changes at once leave the shard dirty when both ended
	// (the first's fold recounts): no turn died, nothing to replay.
	first, err := store.BeginOutsideTurn(ctx, s, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	second, err := store.BeginOutsideTurn(ctx, s, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	outside = 2
	for _, b := range []store.Shard{first, second} {
		if _, err := store.FoldOutsideTurn(ctx, s, b, store.Counts{}, nil); err != nil {
			t.Fatal(err)
		}
	}
	outside = 0
	sh = beginTurn(t, s, id, 0, 3, "m3", t4)
	check("turn after outside changes that ended", sh, t3, false)

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
