package sender_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/alert"
	"github.com/qunfa/qunfa/internal/alert/alerttest"
	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/submit"
)

// errDied stands for a process that died: nothing it would have done
// after reaches the store or the bus.
var errDied = errors.New("process died")

// deadPublisher refuses every event, as a process that died before
// publishing would have published nothing.
type deadPublisher struct{}

func (deadPublisher) Publish(context.Context, ...alert.Event) error { return errDied }

// diesAtFold lets a turn record its outcomes but dies before its fold
// reaches the shard.
type diesAtFold struct{ store.Store }

func (diesAtFold) AdvanceShard(context.Context, store.AdvanceShardParams) (store.Shard, error) {
	return store.Shard{}, errDied
}

// flakyPublisher refuses its first fails events, then keeps them.
type flakyPublisher struct {
	alerttest.Recorder
	mu    sync.Mutex
	fails int
}

func (f *flakyPublisher) Publish(ctx context.Context, events ...alert.Event) error {
	f.mu.Lock()
	if f.fails > 0 {
		f.fails--
		f.mu.Unlock()
		return errors.New("bus unavailable")
	}
	f.mu.Unlock()
	return f.Recorder.Publish(ctx, events...)
}

// outcomeSeqs is the seqs of events' outcomes, in the order published.
func outcomeSeqs(events []alert.Event) []int64 {
	var seqs []int64
	for _, e := range events {
		for _, o := range e.Detail.(alert.ItemOutcomesDetail).Items {
			seqs = append(seqs, o.Seq)
		}
	}
	return seqs
}

// finalSeqs is the seqs of the job's final items.
func finalSeqs(p *pipeline, jobID string) []int64 {
	var seqs []int64
	for _, it := range p.items(jobID) {
		if it.Status == store.ItemConfirmed || it.Status == store.ItemFailed || it.Status == store.ItemAbandoned {
			seqs = append(seqs, it.Seq)
		}
	}
	slices.Sort(seqs)
	return seqs
}

func sortedSeqs(s []int64) []int64 {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// TestOutcomesOfADeadTurnArePublishedAgain: a turn records a batch's
// outcomes and dies before it publishes them or folds; the next turn of
// the shard publishes those outcomes again before it sends anything (with
// those published less than the replay margin before the watermark, never
// older ones), then sends on, and the turn after replays nothing; every
// outcome reaches the bus.
func TestOutcomesOfADeadTurnArePublishedAgain(t *testing.T) {
	t.Parallel()
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 4, MaxWait: 300 * time.Millisecond})
	outcomes := &alerttest.Recorder{}
	p.sender.Outcomes = outcomes
	p.account("a", 1, 4, 0, 1) // a token a second: a turn sends a few and hands back
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 16)}, "replay")
	ctx := context.Background()
	newFinal := func(before []int64) []int64 {
		var seqs []int64
		for _, seq := range finalSeqs(p, job.Job.ID) {
			if !slices.Contains(before, seq) {
				seqs = append(seqs, seq)
			}
		}
		return seqs
	}

	// Turns 1 and 2, two minutes apart, send their tokens' worth and
	// publish the outcomes as they end.
	var published []int64
	for range 2 {
		if _, err := p.sender.HandleTurn(ctx, p.nextTurn(time.Minute)); err != nil {
			t.Fatal(err)
		}
		published = finalSeqs(p, job.Job.ID)
		if got := sortedSeqs(outcomeSeqs(outcomes.Of(alert.ItemOutcomes))); !slices.Equal(got, published) {
			t.Fatalf("final %v, published %v", published, got)
		}
		clk.Advance(2 * time.Minute)
	}
	turn1 := finalSeqs(p, job.Job.ID)[:len(outcomeSeqs(outcomes.Of(alert.ItemOutcomes)[:1]))]

	// Turn 3, two minutes later, records more and dies.
	dying := *p.sender
	dying.Store, dying.Outcomes = diesAtFold{p.store}, deadPublisher{}
	if _, err := dying.HandleTurn(ctx, p.nextTurn(time.Minute)); !errors.Is(err, errDied) {
		t.Fatalf("dying turn: %v", err)
	}
	dead := newFinal(published)
	if len(dead) == 0 {
		t.Fatalf("the dying turn recorded no outcome")
	}
	events := len(outcomes.Of(alert.ItemOutcomes))

	// Its message comes back; the next turn publishes the dead turn's
	// outcomes first, then sends on.
	clk.Advance(time.Minute)
	res, err := p.sender.HandleTurn(ctx, p.nextTurn(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	after := outcomes.Of(alert.ItemOutcomes)[events:]
	if len(after) == 0 {
		t.Fatalf("no event from the turn after the dead one")
	}
	replayed := outcomeSeqs(after[:1])
	for _, seq := range dead {
		if !slices.Contains(replayed, seq) {
			t.Errorf("the dead turn's outcome of seq %d not published again first (replayed %v)", seq, replayed)
		}
	}
	for _, seq := range replayed {
		if slices.Contains(finalSeqs(p, job.Job.ID), seq) && !slices.Contains(dead, seq) && !slices.Contains(published, seq) {
			t.Errorf("seq %d, sent by this turn, in the replay's event %v: the replay goes out before the turn sends", seq, replayed)
		}
	}
	for _, seq := range turn1 {
		if slices.Contains(replayed, seq) {
			t.Errorf("seq %d, published by turn 1 long before the watermark, published again", seq)
		}
	}
	sentOn := newFinal(append(published, dead...))
	if res.Sent == 0 || len(sentOn) == 0 {
		t.Fatalf("the turn after the dead one did not send on: %+v, new outcomes %v", res, sentOn)
	}
	for _, it := range p.items(job.Job.ID) {
		if it.Status == store.ItemSubmitted {
			t.Errorf("item %d left submitted (%+v): the turn after the replay must send as any other", it.Seq, it.Error)
		}
	}
	// The replay is done: the next turn publishes no outcome again.
	events = len(outcomes.Of(alert.ItemOutcomes))
	before := outcomeSeqs(outcomes.Of(alert.ItemOutcomes))
	clk.Advance(2 * time.Minute)
	if _, err := p.sender.HandleTurn(ctx, p.nextTurn(time.Minute)); err != nil {
		t.Fatal(err)
	}
	for _, seq := range outcomeSeqs(outcomes.Of(alert.ItemOutcomes)[events:]) {
		if slices.Contains(before, seq) {
			t.Errorf("outcome of seq %d published again by the turn after the replay: its replay mark was not cleared", seq)
		}
	}
	// Every final outcome so far reached the bus.
	got := map[int64]int{}
	for _, seq := range outcomeSeqs(outcomes.Of(alert.ItemOutcomes)) {
		got[seq]++
	}
	for _, seq := range finalSeqs(p, job.Job.ID) {
		if got[seq] == 0 {
			t.Errorf("outcome of seq %d never published", seq)
		}
	}
}

// TestRefusedOutcomesArePublishedAgain: a bus that refuses the first
// events does not lose their outcomes: the turn keeps them and publishes
// them again, and every item's outcome is published.
func TestRefusedOutcomesArePublishedAgain(t *testing.T) {
	t.Parallel()
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 4})
	outcomes := &flakyPublisher{fails: 2}
	p.sender.Outcomes = outcomes
	p.account("a", 1000, 1000, 0, 1)
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 10)}, "refused")
	p.driveUntil(clk, final, job.Job.ID)
	got := map[int64]bool{}
	for _, seq := range outcomeSeqs(outcomes.Of(alert.ItemOutcomes)) {
		got[seq] = true
	}
	for _, seq := range finalSeqs(p, job.Job.ID) {
		if !got[seq] {
			t.Errorf("outcome of seq %d lost after the bus refused it", seq)
		}
	}
	if len(got) != 10 {
		t.Errorf("%d outcomes published, want 10", len(got))
	}
}

// TestOutcomesOfADeadOutsideChangeArePublishedAgain: an outside change
// (the reconciler, a provider event) marks a running shard, records
// outcomes and dies before publishing them or folding. The first turn to
// see it does not take it for dead yet (it may be in flight) but keeps
// the watermark from passing it; a turn a minute later publishes its
// outcomes again.
func TestOutcomesOfADeadOutsideChangeArePublishedAgain(t *testing.T) {
	t.Parallel()
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 4, MaxWait: 300 * time.Millisecond})
	outcomes := &alerttest.Recorder{}
	p.sender.Outcomes = outcomes
	p.account("a", 1, 4, 0, 1)
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 16)}, "outside")
	ctx := context.Background()
	if _, err := p.sender.HandleTurn(ctx, p.nextTurn(time.Minute)); err != nil {
		t.Fatal(err)
	}

	// The outside change: mark, settle two items, die.
	clk.Advance(2 * time.Minute)
	if _, err := store.BeginOutsideTurn(ctx, p.store, job.Job.ID, 0); err != nil {
		t.Fatal(err)
	}
	c, err := p.store.ClaimItems(ctx, store.ClaimItemsParams{JobID: job.Job.ID, Index: 0, Max: 2, Now: clk.Now(), ClaimID: "outside"})
	if err != nil || len(c.Items) != 2 {
		t.Fatalf("claim: %v (%d items)", err, len(c.Items))
	}
	var ups []store.ItemUpdate
	var dead []int64
	for _, it := range c.Items {
		ups = append(ups, store.ItemUpdate{Seq: it.Seq, From: store.ItemSubmitted, ClaimID: "outside", To: store.ItemConfirmed})
		dead = append(dead, it.Seq)
	}
	if _, err := p.store.UpdateItems(ctx, store.UpdateItemsParams{JobID: job.Job.ID, Index: 0, Updates: ups, At: clk.Now()}); err != nil {
		t.Fatal(err)
	}

	published := func() map[int64]int {
		n := map[int64]int{}
		for _, seq := range outcomeSeqs(outcomes.Of(alert.ItemOutcomes)) {
			n[seq]++
		}
		return n
	}
	// The next turn, over a minute later but the first to see the change:
	// it may still be in flight. The turn's folds must not move the
	// watermark past it (else the replay below, from the watermark less a
	// minute, would miss its outcomes).
	clk.Advance(70 * time.Second)
	if _, err := p.sender.HandleTurn(ctx, p.nextTurn(time.Minute)); err != nil {
		t.Fatal(err)
	}
	for _, seq := range dead {
		if published()[seq] != 0 {
			t.Fatalf("seq %d published by the first turn to see the outside change: it was taken for dead at once", seq)
		}
	}
	// A minute later it is dead: the next turn publishes its outcomes.
	clk.Advance(2 * time.Minute)
	if _, err := p.sender.HandleTurn(ctx, p.nextTurn(time.Minute)); err != nil {
		t.Fatal(err)
	}
	got := published()
	for _, seq := range dead {
		if got[seq] == 0 {
			t.Errorf("outcome of seq %d, settled by the outside change that died, never published", seq)
		}
	}
	for _, seq := range finalSeqs(p, job.Job.ID) {
		if got[seq] == 0 {
			t.Errorf("outcome of seq %d never published", seq)
		}
	}
}

// deadTurnThenReplay lets a turn of the pipeline's one shard die after
// recording outcomes (its fold and its publish lost), then runs the next
// turn, which publishes them again first, on st (the pipeline's store,
// wrapped).
func deadTurnThenReplay(t *testing.T, p *pipeline, clk *clock.Fake, st store.Store) {
	t.Helper()
	ctx := context.Background()
	dying := *p.sender
	dying.Store, dying.Outcomes = diesAtFold{p.store}, deadPublisher{}
	if _, err := dying.HandleTurn(ctx, p.nextTurn(time.Minute)); !errors.Is(err, errDied) {
		t.Fatalf("dying turn: %v", err)
	}
	clk.Advance(time.Minute)
	replaying := *p.sender
	replaying.Store = st
	if _, err := replaying.HandleTurn(ctx, p.nextTurn(time.Minute)); err != nil {
		t.Fatal(err)
	}
}

// outsideChangeDies starts an outside change of the shard (it marks the
// shard, as the reconciler or the API does before settling items) right
// before the turn's first fold, and the change never finishes: its
// process died before publishing its outcomes and folding.
type outsideChangeDies struct {
	store.Store
	t      *testing.T
	marked bool
}

func (s *outsideChangeDies) AdvanceShard(ctx context.Context, p store.AdvanceShardParams) (store.Shard, error) {
	if !s.marked {
		s.marked = true
		if _, err := s.Store.MarkShardDirty(ctx, p.JobID, p.Index); err != nil {
			s.t.Errorf("mark shard: %v", err)
		}
	}
	return s.Store.AdvanceShard(ctx, p)
}

// TestAReplayDoesNotCoverALaterOutsideChange: a turn publishes a dead
// turn's outcomes again, then an outside change marks the shard and dies
// unfinished while the turn goes on folding. The replay went out before
// that change and cannot have published its outcomes, so the turn must
// leave the shard marked for them to be published again: on a running
// shard, by a turn once the change has stayed unfinished for the grace
// period.
func TestAReplayDoesNotCoverALaterOutsideChange(t *testing.T) {
	t.Parallel()
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 4, FoldEvery: 1, MaxWait: 300 * time.Millisecond})
	p.sender.Outcomes = &alerttest.Recorder{}
	p.account("a", 1, 4, 0, 1) // a token a second: the turn sends a few and hands back
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 16)}, "replay-outside")
	ctx := context.Background()

	racing := &outsideChangeDies{Store: p.store, t: t}
	deadTurnThenReplay(t, p, clk, racing)
	if !racing.marked {
		t.Fatal("the turn never folded")
	}
	sh, err := p.store.GetShard(ctx, job.Job.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if sh.Status != store.ShardRunning {
		t.Fatalf("shard %s after the turn, want running (the next turn publishes again)", sh.Status)
	}
	if later := clk.Now().Add(store.OutcomesOutsideGrace + time.Second); !store.OutcomesNeedReplay(sh, later) {
		t.Fatalf("after the replaying turn the shard is %+v: no later turn publishes the unfinished outside change's outcomes", sh)
	}
}
