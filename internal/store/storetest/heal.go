package storetest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/store"
)

// The subtests below check that shard counts heal themselves: a change
// made outside a turn marks the shard dirty before writing items (a crash
// before its fold leaves the shard to be recounted), and no fold ever
// stores impossible counts.

// testMarkShardDirty: MarkShardDirty returns the shard as it was, leaves
// it Dirty and starts its next epoch; a fold at that epoch with ClearDirty
// clears the mark. A fold whose epoch moved since — another change marked
// the shard (its items may not be written yet), or a turn's recount —
// recounts and leaves the mark.
func testMarkShardDirty(t *testing.T, s store.Store, _ Capabilities) {
	ctx := ctxOf(t)
	p, _ := runningJob(t, s, "tenant-a", 1, 6)
	id := p.Job.ID
	abandon := func(seq int64, d time.Duration) store.UpdateItemsResult {
		t.Helper()
		return update(t, s, id, 0, at(d),
			store.ItemUpdate{Seq: seq, From: store.ItemPending, To: store.ItemAbandoned, Error: &store.ItemError{Category: store.CategoryCancelled}})
	}
	before, err := s.MarkShardDirty(ctx, id, 0)
	if err != nil {
		t.Fatalf("MarkShardDirty: %v", err)
	}
	if before.Dirty {
		t.Fatalf("MarkShardDirty returned Dirty = true for a clean shard; want the shard as it was")
	}
	if sh := getShard(t, s, id, 0); !sh.Dirty || sh.Epoch != before.Epoch+1 {
		t.Fatalf("after MarkShardDirty the stored shard is Dirty %v at epoch %d; want Dirty at epoch %d", sh.Dirty, sh.Epoch, before.Epoch+1)
	}
	u := abandon(1, time.Second)
	sh, err := s.AddShardCounts(ctx, store.AddShardCountsParams{JobID: id, Index: 0, Epoch: before.Epoch + 1, Delta: u.Delta,
		FailuresDelta: u.FailuresDelta, ClearDirty: true})
	if err != nil {
		t.Fatalf("AddShardCounts: %v", err)
	}
	if sh.Dirty || getShard(t, s, id, 0).Dirty {
		t.Fatal("AddShardCounts(ClearDirty) at the epoch the mark started left the shard Dirty")
	}
	checkShardMatchesItems(t, s, sh)

	// Two outside changes at once (store.BeginOutsideTurn and
	// FoldOutsideTurn): a marks the clean shard, b marks it dirty; a
	// writes and folds before b has written, then b writes and dies before
	// its fold. a's fold must not clear the mark b relies on.
	a, err := store.BeginOutsideTurn(ctx, s, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := store.BeginOutsideTurn(ctx, s, id, 0)
	if err != nil || !b.Dirty || b.Epoch != a.Epoch+1 {
		t.Fatalf("second MarkShardDirty = Dirty %v epoch %d, %v; want Dirty at epoch %d", b.Dirty, b.Epoch, err, a.Epoch+1)
	}
	ua := abandon(2, 2*time.Second)
	sh, err = store.FoldOutsideTurn(ctx, s, a, ua.Delta, ua.FailuresDelta)
	if err != nil {
		t.Fatal(err)
	}
	checkShardMatchesItems(t, s, sh) // recounted
	abandon(3, 3*time.Second)        // b's write; b dies before its fold
	if !sh.Dirty || !getShard(t, s, id, 0).Dirty {
		t.Fatal("a change's fold cleared the mark of a change marked after it: b's write is not counted and nothing will recount it")
	}
	if _, err := s.RecountShard(ctx, id, 0); err != nil {
		t.Fatal(err)
	}

	// A turn begins between the mark and the fold: its recount moves the
	// epoch, and the fold must neither double count nor clear the turn's
	// Dirty flag.
	before, err = s.MarkShardDirty(ctx, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	u = abandon(4, 4*time.Second)
	if _, err := s.BeginTurn(ctx, store.BeginTurnParams{JobID: id, Index: 0, Turn: 1, MessageID: "m1", At: at(4 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	sh, err = s.AddShardCounts(ctx, store.AddShardCountsParams{JobID: id, Index: 0, Epoch: before.Epoch + 1, Delta: u.Delta,
		FailuresDelta: u.FailuresDelta, ClearDirty: true})
	if err != nil {
		t.Fatalf("AddShardCounts(stale epoch): %v", err)
	}
	if !sh.Dirty || !getShard(t, s, id, 0).Dirty {
		t.Fatal("AddShardCounts(ClearDirty) with an epoch a turn moved cleared the turn's Dirty flag")
	}
	checkShardMatchesItems(t, s, sh)
	if _, err := s.MarkShardDirty(ctx, "no-such-job", 0); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("MarkShardDirty(unknown job) error = %v, want ErrNotFound", err)
	}
}

// testImpossibleCountsRecounted: a fold that would leave a count negative
// (a delta computed against counts that were already wrong) recounts from
// the items instead of storing it.
func testImpossibleCountsRecounted(t *testing.T, s store.Store, _ Capabilities) {
	ctx := ctxOf(t)
	p, _ := runningJob(t, s, "tenant-a", 1, 3)
	id := p.Job.ID
	sh := getShard(t, s, id, 0)
	// Items say 3 pending; a wrong delta claims 5 moved to confirmed.
	out, err := s.AddShardCounts(ctx, store.AddShardCountsParams{JobID: id, Index: 0, Epoch: sh.Epoch,
		Delta: store.Counts{Pending: -5, Confirmed: 5}})
	if err != nil {
		t.Fatalf("AddShardCounts: %v", err)
	}
	if out.Counts.Impossible(out.Size) {
		t.Fatalf("AddShardCounts stored impossible counts %+v (size %d)", out.Counts, out.Size)
	}
	checkRecounted(t, s, "AddShardCounts(impossible result)", out, sh.Epoch)

	// The same through a turn's AdvanceShard.
	bt, err := s.BeginTurn(ctx, store.BeginTurnParams{JobID: id, Index: 0, Turn: 1, MessageID: "m1", At: at(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	adv, err := s.AdvanceShard(ctx, store.AdvanceShardParams{JobID: id, Index: 0, Turn: 1, Epoch: bt.Epoch,
		Delta: store.Counts{Submitted: -2, Failed: 2}, At: at(2 * time.Second), EndTurn: true})
	if err != nil {
		t.Fatalf("AdvanceShard: %v", err)
	}
	if adv.Counts.Impossible(adv.Size) {
		t.Fatalf("AdvanceShard stored impossible counts %+v (size %d)", adv.Counts, adv.Size)
	}
	checkRecounted(t, s, "AdvanceShard(impossible result)", adv, bt.Epoch)
}

// testListDirtyShards: ListDirtyShards finds the final shards left dirty
// (marked by an outside change on a final shard, or made final while
// dirty), and not the shards that are dirty while running; clearing the
// mark (a fold with ClearDirty, a turn's end) takes a shard off the list.
func testListDirtyShards(t *testing.T, s store.Store, _ Capabilities) {
	ctx := ctxOf(t)
	p, _ := runningJob(t, s, "tenant-a", 4, 2)
	id := p.Job.ID
	listed := func() map[int]bool { t.Helper(); return listedForSweep(t, s, id) }
	transition := func(index int, to store.ShardStatus) {
		t.Helper()
		if _, err := s.TransitionShard(ctx, store.TransitionShardParams{JobID: id, Index: index, To: to, At: at(time.Second)}); err != nil {
			t.Fatalf("TransitionShard(%d → %s): %v", index, to, err)
		}
	}
	mark := func(index int) store.Shard {
		t.Helper()
		sh, err := s.MarkShardDirty(ctx, id, index)
		if err != nil {
			t.Fatalf("MarkShardDirty(%d): %v", index, err)
		}
		return sh
	}
	if got := listed(); len(got) != 0 {
		t.Fatalf("clean running shards listed as dirty: %v", got)
	}
	before0 := mark(0) // dirty, then final
	transition(0, store.ShardCompleted)
	transition(1, store.ShardCancelled) // final, then dirty
	before1 := mark(1)
	mark(2)                             // dirty but running
	transition(3, store.ShardCompleted) // final and clean
	if got := listed(); !got[0] || !got[1] || got[2] || got[3] || len(got) != 2 {
		t.Fatalf("listed %v, want shards 0 (made final while dirty) and 1 (marked while final) only", got)
	}
	if _, err := s.RecountShard(ctx, id, 1); err != nil {
		t.Fatal(err)
	}
	if got := listed(); !got[1] {
		t.Fatal("a recount took shard 1 off the list; only clearing the mark does")
	}
	// Shard 0's outside change ends (FoldOutsideTurn: its fold at its
	// mark's epoch clears the mark and ends the change).
	if _, err := s.AddShardCounts(ctx, store.AddShardCountsParams{JobID: id, Index: 0, Epoch: before0.Epoch + 1, ClearDirty: true, OutcomesPublished: true}); err != nil {
		t.Fatal(err)
	}
	sh1 := getShard(t, s, id, 1)
	if _, err := s.BeginTurn(ctx, store.BeginTurnParams{JobID: id, Index: 1, Turn: sh1.Turn + 1, MessageID: "m", At: at(2 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	if got := listed(); got[0] || !got[1] {
		t.Fatalf("listed %v after shard 0's mark was cleared and a turn began on shard 1; want shard 1 only", got)
	}
	endTurn := func(index int, unpublished bool) {
		t.Helper()
		sh := getShard(t, s, id, index)
		if _, err := s.AdvanceShard(ctx, store.AdvanceShardParams{JobID: id, Index: index, Turn: sh.Turn, Epoch: sh.Epoch,
			At: at(3 * time.Second), EndTurn: true, OutcomesUnpublished: unpublished}); err != nil {
			t.Fatal(err)
		}
	}
	// The turn ends while shard 1's outside change is unfinished: the
	// shard is clean, but the change may yet die having recorded outcomes
	// it did not publish, and no turn comes to a final shard: listed.
	endTurn(1, false)
	if got := listed(); got[0] || !got[1] {
		t.Fatalf("listed %v after a turn of shard 1 ended while its outside change is unfinished; want shard 1 only", got)
	}
	// The change ends (its fold recounts: the epoch moved since its mark).
	if _, err := store.FoldOutsideTurn(ctx, s, before1, store.Counts{}, nil); err != nil {
		t.Fatal(err)
	}
	if got := listed(); len(got) != 0 {
		t.Fatalf("listed %v after every final shard's mark was cleared and every change ended, want none", got)
	}
	// A final shard's turn that could not publish its outcomes (a
	// redelivered turn of shard 3, which is completed) leaves it listed
	// until the sweep publishes them again and clears the mark.
	sh3 := getShard(t, s, id, 3)
	if _, err := s.BeginTurn(ctx, store.BeginTurnParams{JobID: id, Index: 3, Turn: sh3.Turn + 1, MessageID: "m3", At: at(2 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	endTurn(3, true)
	if got := listed(); !got[3] || len(got) != 1 {
		t.Fatalf("listed %v after the last turn of final shard 3 could not publish its outcomes; want shard 3", got)
	}
	sh3 = getShard(t, s, id, 3)
	if _, err := s.AddShardCounts(ctx, store.AddShardCountsParams{JobID: id, Index: 3, Epoch: sh3.Epoch, ClearDirty: true, OutcomesReplayed: true}); err != nil {
		t.Fatal(err)
	}
	if got := listed(); len(got) != 0 {
		t.Fatalf("listed %v after the sweep cleared shard 3's marks, want none", got)
	}
	stale, err := s.ListStaleShards(ctx, store.ListStaleShardsParams{Before: at(time.Hour), Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range stale {
		if r.JobID == id && r.Index != 2 {
			t.Fatalf("ListStaleShards lists final shard %d (a turn of a final shard ended)", r.Index)
		}
	}
}

// listedForSweep is the shards of job id that ListDirtyShards lists.
func listedForSweep(t *testing.T, s store.Store, id string) map[int]bool {
	t.Helper()
	refs, err := s.ListDirtyShards(ctxOf(t), store.ListDirtyShardsParams{Limit: 1000})
	if err != nil {
		t.Fatalf("ListDirtyShards: %v", err)
	}
	out := map[int]bool{}
	for _, r := range refs {
		if r.JobID == id {
			out[r.Index] = true
		}
	}
	return out
}

// testListDirtyShardsAfterLastTurn: in the order a shard's last turn
// finishes it (the turn ends, then the shard is made completed), a shard
// whose last turn could not publish its outcomes, or ended while an
// outside change was unfinished, is listed for the sweep; one whose last
// turn ended clean is not.
func testListDirtyShardsAfterLastTurn(t *testing.T, s store.Store, _ Capabilities) {
	ctx := ctxOf(t)
	p, _ := runningJob(t, s, "tenant-a", 3, 2)
	id := p.Job.ID
	lastTurn := func(index int, unpublished bool) {
		t.Helper()
		sh := getShard(t, s, id, index)
		b, err := s.BeginTurn(ctx, store.BeginTurnParams{JobID: id, Index: index, Turn: sh.Turn + 1, MessageID: fmt.Sprintf("m%d", index), At: at(time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.AdvanceShard(ctx, store.AdvanceShardParams{JobID: id, Index: index, Turn: b.Turn, Epoch: b.Epoch,
			At: at(2 * time.Second), EndTurn: true, OutcomesUnpublished: unpublished}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.TransitionShard(ctx, store.TransitionShardParams{JobID: id, Index: index,
			From: []store.ShardStatus{store.ShardRunning, store.ShardPending}, To: store.ShardCompleted, At: at(3 * time.Second)}); err != nil {
			t.Fatalf("complete shard %d: %v", index, err)
		}
	}
	lastTurn(0, true)
	if _, err := s.MarkShardDirty(ctx, id, 1); err != nil {
		t.Fatal(err)
	}
	lastTurn(1, false)
	lastTurn(2, false)
	if got := listedForSweep(t, s, id); !got[0] || !got[1] || got[2] || len(got) != 2 {
		t.Fatalf("listed %v, want shards 0 (its last turn could not publish) and 1 (an outside change unfinished) only", got)
	}
}
