package sender_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/control"
	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/store/storefault"
	"github.com/qunfa/qunfa/internal/submit"
)

// Regression tests for the smaller findings of issue 11 in the sender
// (one per finding; each failed before its fix).

// TestHandBackDelayIsCapped: a tiny rate puts the next token days away;
// the hand-back delay is capped at MaxHandBack, so it never exceeds the
// queue's visibility limit (12 h on SQS) and the shard keeps working.
func TestHandBackDelayIsCapped(t *testing.T) {
	t.Parallel()
	p, _ := fakePipeline(t, sender.Config{ClaimBatch: 10})
	p.account("a", 0.00001, 1, 0, 1) // one token every 27.7 hours
	p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 3)}, "tiny")
	res, err := p.sender.HandleTurn(context.Background(), p.nextTurn(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if res.Disposition != sender.HandedBack {
		t.Fatalf("result %+v, want handed back", res)
	}
	if res.Delay > 15*time.Minute {
		t.Fatalf("handed back for %v, want at most the default MaxHandBack of 15 min", res.Delay)
	}
}

// impossibleCountsStore makes BeginTurn report the shard's counts as the
// issue found them after a crash: {Pending:-1 Submitted:1 Confirmed:n}.
type impossibleCountsStore struct {
	store.Store
}

func (s impossibleCountsStore) BeginTurn(ctx context.Context, p store.BeginTurnParams) (store.Shard, error) {
	sh, err := s.Store.BeginTurn(ctx, p)
	if err == nil {
		sh.Counts = store.Counts{Pending: -1, Submitted: 1, Confirmed: sh.Size}
	}
	return sh, err
}

// TestImpossibleCountsAreRecountedNotWaitedOn: a turn whose counts cannot
// be true (a negative count, a sum other than the shard's size) recounts
// from the items instead of ending "waiting for reconciliation" of an
// item that does not exist.
func TestImpossibleCountsAreRecountedNotWaitedOn(t *testing.T) {
	t.Parallel()
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 10})
	p.account("a", 1000, 1000, 0, 1)
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 3)}, "imp")
	ctx := context.Background()
	// Every item was sent and confirmed outside a turn whose fold was lost.
	claim, err := p.store.ClaimItems(ctx, store.ClaimItemsParams{JobID: job.Job.ID, Index: 0, Max: 10, Now: clk.Now(), ClaimID: "lost"})
	if err != nil || len(claim.Items) != 3 {
		t.Fatalf("claim: %v (%d items)", err, len(claim.Items))
	}
	var ups []store.ItemUpdate
	for _, it := range claim.Items {
		ups = append(ups, store.ItemUpdate{Seq: it.Seq, From: store.ItemSubmitted, ClaimID: "lost", To: store.ItemConfirmed})
	}
	if _, err := p.store.UpdateItems(ctx, store.UpdateItemsParams{JobID: job.Job.ID, Index: 0, Updates: ups, At: clk.Now()}); err != nil {
		t.Fatal(err)
	}
	s2 := *p.sender
	s2.Store = impossibleCountsStore{Store: p.store}
	res, err := s2.HandleTurn(ctx, p.nextTurn(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if res.Reason != "shard completed" {
		t.Fatalf("turn ended %q on impossible counts, want the shard recounted and completed", res.Reason)
	}
	if v, _ := p.store.GetJob(ctx, job.Job.ID); v.Job.Status != store.JobCompleted {
		t.Fatalf("job %s %+v, want completed", v.Job.Status, v.Counts())
	}
}

// slowTokenStore is a store whose token bucket answers slowly (retries
// under throttling), and which records the claim time it is given.
type slowTokenStore struct {
	store.Store
	clk *clock.Fake

	mu       sync.Mutex
	claimAt  []time.Time // the Now of each ClaimItems
	clockAts []time.Time // the clock when it was called
}

func (s *slowTokenStore) TakeTokens(ctx context.Context, p store.TakeTokensParams) (store.TakeTokensResult, error) {
	res, err := s.Store.TakeTokens(ctx, p)
	s.clk.Advance(4 * time.Second)
	return res, err
}

func (s *slowTokenStore) ClaimItems(ctx context.Context, p store.ClaimItemsParams) (store.ClaimItemsResult, error) {
	s.mu.Lock()
	s.claimAt, s.clockAts = append(s.claimAt, p.Now), append(s.clockAts, s.clk.Now())
	s.mu.Unlock()
	return s.Store.ClaimItems(ctx, p)
}

// TestClaimTimeIsTakenAtTheClaim: the claim time (an item's submitted-at,
// from which the reconciler's settle delay counts) is read right before
// ClaimItems, so slow token and budget writes do not eat the settle margin.
func TestClaimTimeIsTakenAtTheClaim(t *testing.T) {
	t.Parallel()
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 5})
	p.account("a", 1000, 1000, 0, 1)
	p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 5)}, "at")
	st := &slowTokenStore{Store: p.store, clk: clk}
	s2 := *p.sender
	s2.Store = st
	if _, err := s2.HandleTurn(context.Background(), p.nextTurn(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if len(st.claimAt) == 0 {
		t.Fatal("no claim")
	}
	for i := range st.claimAt {
		if !st.claimAt[i].Equal(st.clockAts[i]) {
			t.Fatalf("claim %d at %v while the clock showed %v: the claim time was read %v before the claim",
				i, st.claimAt[i], st.clockAts[i], st.clockAts[i].Sub(st.claimAt[i]))
		}
	}
}

var errJobRead = errors.New("injected: job record unreadable")

// failJobReadStore fails GetJobRecord once armed; when it fails it lets
// the held provider call answer.
type failJobReadStore struct {
	store.Store
	armed   atomic.Bool
	release chan struct{}
	once    sync.Once
}

func (s *failJobReadStore) GetJobRecord(ctx context.Context, jobID string) (store.Job, error) {
	if s.armed.Load() {
		s.once.Do(func() { close(s.release) })
		return store.Job{}, errJobRead
	}
	return s.Store.GetJobRecord(ctx, jobID)
}

// TestFailedTurnRecordsItsRunningCalls: a turn that stops on a store error
// while a call is still running waits for that call and records its
// answer, so the item does not stay submitted although the provider said
// what became of it.
func TestFailedTurnRecordsItsRunningCalls(t *testing.T) {
	t.Parallel()
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 5, StragglerWait: time.Second})
	p.account("a", 1000, 1000, 0, 1)
	hp := &holdingProvider{Provider: p.sender.Provider, to: "user-2", held: make(chan struct{}), release: make(chan struct{}),
		answered: make(chan struct{}, 100)}
	fs := &failJobReadStore{Store: p.store, release: hp.release}
	s2 := *p.sender
	s2.Provider, s2.Store = hp, fs
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 10)}, "strag")
	ctx := context.Background()
	msg := p.nextTurn(time.Hour)
	out := make(chan error, 1)
	go func() {
		_, err := s2.HandleTurn(ctx, msg)
		out <- err
	}()
	recv(t, hp.held, "the held call")
	within(t, hp.answered, 4, "the batch's other calls")
	fs.armed.Store(true) // the next batch's job read fails
	clk.Advance(time.Second)
	if err := recv(t, out, "the turn whose job read fails"); !errors.Is(err, errJobRead) {
		t.Fatalf("turn error %v, want the injected one", err)
	}
	for _, it := range p.items(job.Job.ID) {
		if it.To == "user-2" && it.Status != store.ItemConfirmed {
			t.Fatalf("the held call answered but its item is %s: the failed turn did not record it", it.Status)
		}
	}
}

// lostClaim runs one turn whose ClaimItems is applied but reports its
// answer lost; with releaseFails the sender's release of the claimed items
// fails too. It returns the healable fault wrappers.
func lostClaim(t *testing.T, p *pipeline, releaseFails bool) []*storefault.Store {
	t.Helper()
	var st store.Store = p.store
	var faults []*storefault.Store
	if releaseFails {
		f := storefault.New(st, storefault.Config{Seed: 1, ErrorRatio: 1, Ops: []string{"UpdateItems"}})
		st, faults = f, append(faults, f)
	}
	f := storefault.New(st, storefault.Config{Seed: 1, LostAnswerRatio: 1, Ops: []string{"ClaimItems"}})
	faults = append(faults, f)
	s2 := *p.sender
	s2.Store = f
	if _, err := s2.HandleTurn(context.Background(), p.nextTurn(time.Second)); !errors.Is(err, storefault.ErrAnswerLost) {
		t.Fatalf("turn error %v, want the lost claim answer", err)
	}
	return faults
}

// TestClaimAnswerLost: a ClaimItems whose write went through but whose
// answer was lost (a page of items claimed, the sender never told) must
// not leave items claimed and never sent, nor give the job's budget back
// twice. Either the sender finds the items by their claim id and releases
// them at once, or (the store still failing) they stay submitted and the
// reconciler finds them unknown at the provider after the settle delay and
// re-pends them. Either way every item is sent once, and the job sends
// exactly its budget.
func TestClaimAnswerLost(t *testing.T) {
	for _, tc := range []struct {
		name         string
		releaseFails bool
		leftClaimed  int
	}{
		{"released by the sender", false, 0},
		{"settled by the reconciler", true, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, clk := fakePipeline(t, sender.Config{ClaimBatch: 4})
			p.account("a", 1000, 1000, 0, 1)
			job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 10), Budget: 6}, "lostclaim")
			faults := lostClaim(t, p, tc.releaseFails)
			claimed := 0
			for _, it := range p.items(job.Job.ID) {
				if it.Status == store.ItemSubmitted {
					claimed++
				}
			}
			if claimed != tc.leftClaimed || len(p.deliveries()) != 0 {
				t.Fatalf("%d items left claimed, %d delivered; want %d and none", claimed, len(p.deliveries()), tc.leftClaimed)
			}
			for _, f := range faults {
				f.Heal()
			}
			v := p.driveUntil(clk, func(v store.JobView) bool {
				return v.Job.Status == store.JobPaused && v.Counts().Submitted == 0
			}, job.Job.ID)
			if v.Job.PauseReason != store.PauseBudget {
				t.Fatalf("paused for %q, want budget", v.Job.PauseReason)
			}
			if n := len(p.deliveries()); n != 6 || v.Job.BudgetUsed != 6 {
				t.Fatalf("delivered %d with budget used %d; want exactly the budget of 6", n, v.Job.BudgetUsed)
			}
			p.checkExactlyOnce(job.Job.ID)
			// More budget: the rest goes out, once.
			ctl := &control.Controller{Store: p.store, Queue: p.queue, Clock: clk}
			more := int64(10)
			if _, err := ctl.UpdateLimits(context.Background(), job.Job.ID, nil, &more); err != nil {
				t.Fatal(err)
			}
			if _, err := ctl.Resume(context.Background(), job.Job.ID); err != nil {
				t.Fatal(err)
			}
			if v := p.driveUntil(clk, final, job.Job.ID); v.Job.Status != store.JobCompleted || v.Counts().Confirmed != 10 {
				t.Fatalf("%s %+v", v.Job.Status, v.Counts())
			}
			p.checkExactlyOnce(job.Job.ID)
		})
	}
}
