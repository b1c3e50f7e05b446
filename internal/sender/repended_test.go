package sender_test

import (
	"context"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/alert"
	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/dispatch"
	"github.com/qunfa/qunfa/internal/mockprovider"
	"github.com/qunfa/qunfa/internal/queue"
	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/submit"
)

// The tests of sender.Repended, the second half of a change made outside
// a turn that sent items back to pending (a redrive, a resend, the
// reconciler's re-pend), called with the job in each state it may have
// reached meanwhile: finished (partial or failed), cancelled, paused, or
// running with nothing left to do.

// rependRefusedOutsideTurn moves a shard's failed items back to pending
// as an outside change does (dirty mark, item writes, fold) but without
// reopening the finished shard and job first: what a re-pend that raced
// the job's finish leaves for Repended to sort out. It returns how many
// items went back to pending.
func rependRefusedOutsideTurn(t *testing.T, p *pipeline, jobID string, index int, now time.Time) int {
	t.Helper()
	ctx := context.Background()
	page, err := p.store.ListItems(ctx, store.ListItemsParams{JobID: jobID, Status: store.ItemFailed, Shard: &index, Limit: store.MaxPutItems})
	if err != nil {
		t.Fatal(err)
	}
	sh, err := store.BeginOutsideTurn(ctx, p.store, jobID, index)
	if err != nil {
		t.Fatal(err)
	}
	var ups []store.ItemUpdate
	for _, it := range page.Items {
		ups = append(ups, store.ItemUpdate{Seq: it.Seq, From: store.ItemFailed, To: store.ItemPending, ResetAttempts: true, NextAttemptAt: now,
			Error: &store.ItemError{Category: store.CategoryRetryable, Code: "redrive", Message: "re-pended by the test"}})
	}
	res, err := p.store.UpdateItems(ctx, store.UpdateItemsParams{JobID: jobID, Index: index, Updates: ups, At: now})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.FoldOutsideTurn(ctx, p.store, sh, res.Delta, res.FailuresDelta); err != nil {
		t.Fatal(err)
	}
	return len(ups) - len(res.Rejected)
}

// rependedPipeline is a pipeline on a fake clock whose turns are worked
// only by stepRependedJob (no reconciler: what runs the job again is
// Repended's own turn message).
func rependedPipeline(t *testing.T) (*pipeline, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(t0)
	p := newPipeline(t, pipelineOptions{clock: clk, sender: sender.Config{ClaimBatch: 5}, responseTimeout: 200 * time.Millisecond})
	p.account("a", 1000, 1000, 0, 1)
	p.account("b", 1000, 1000, 0, 1)
	return p, clk
}

// stepRependedJob works the queued turns, without the reconciler, until
// the job is final, and fails the test after 200 steps.
func stepRependedJob(t *testing.T, p *pipeline, clk *clock.Fake, jobID string) store.JobView {
	t.Helper()
	ctx := context.Background()
	for range 200 {
		p.step(ctx)
		v, err := p.store.GetJob(ctx, jobID)
		if err != nil {
			t.Fatal(err)
		}
		if final(v) {
			return v
		}
		clk.Advance(250 * time.Millisecond)
	}
	v, _ := p.store.GetJob(ctx, jobID)
	t.Fatalf("job not final after 200 steps without the reconciler: %s %+v, shards %+v", v.Job.Status, v.Counts(), v.Shards)
	return v
}

// rependedShardOf is the index of the job's shard of account.
func rependedShardOf(t *testing.T, v store.JobView, account string) int {
	t.Helper()
	for _, sh := range v.Shards {
		if sh.Account == account {
			return sh.Index
		}
	}
	t.Fatalf("no shard of account %s in %+v", account, v.Shards)
	return -1
}

// TestRependedRunsAFinishedJobAgain: items re-pended after their job
// finished partial (some recipients refused) or failed (every recipient
// refused) run again: the job and the shard whose items came back go back
// to running and that shard gets a turn, the other shard stays finished,
// and the re-pended recipients are sent once — without the reconciler.
func TestRependedRunsAFinishedJobAgain(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		refused []string // recipients of account a refused the first time
		status  store.JobStatus
	}{
		{"partial", []string{"user-1", "user-3"}, store.JobPartial},
		{"failed", []string{"user-0", "user-1", "user-2", "user-3"}, store.JobFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			p, clk := rependedPipeline(t)
			if err := p.mock.SetBehaviour("a", mockprovider.Behaviour{InvalidToIDs: tc.refused}); err != nil {
				t.Fatal(err)
			}
			accounts := []string{"a"}
			if tc.status == store.JobPartial {
				accounts = []string{"a", "b"}
			}
			job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients(accounts, 4)}, "repended-"+tc.name)
			v := stepRependedJob(t, p, clk, job.Job.ID)
			if v.Job.Status != tc.status || v.Counts().Failed != int64(len(tc.refused)) {
				t.Fatalf("first run: %s %+v, want %s with %d failed", v.Job.Status, v.Counts(), tc.status, len(tc.refused))
			}
			if err := p.mock.SetBehaviour("a", mockprovider.Behaviour{}); err != nil {
				t.Fatal(err)
			}
			a := rependedShardOf(t, v, "a")
			turnBefore := v.Shards[a].Turn
			clk.Advance(time.Second)
			if n := rependRefusedOutsideTurn(t, p, job.Job.ID, a, clk.Now()); n != len(tc.refused) {
				t.Fatalf("re-pended %d items, want %d", n, len(tc.refused))
			}
			// With an index past the job's shards too, as a caller holding
			// another job's view could name: it is ignored.
			if err := sender.Repended(ctx, p.store, p.queue, p.alerts, nil, job.Job.ID, []int{a, len(v.Shards)}, clk.Now()); err != nil {
				t.Fatalf("Repended: %v", err)
			}
			v, err := p.store.GetJob(ctx, job.Job.ID)
			if err != nil {
				t.Fatal(err)
			}
			if v.Job.Status != store.JobRunning || v.Shards[a].Status != store.ShardRunning || v.Counts().Pending != int64(len(tc.refused)) {
				t.Fatalf("after Repended: job %s, shard %s, counts %+v: want both running with %d pending",
					v.Job.Status, v.Shards[a].Status, v.Counts(), len(tc.refused))
			}
			for _, sh := range v.Shards {
				if sh.Index != a && sh.Status != store.ShardCompleted {
					t.Errorf("shard %d (no items re-pended) is %s, want it left completed", sh.Index, sh.Status)
				}
			}
			msgs, err := p.queue.Receive(ctx, queue.ReceiveParams{Max: 10, VisibilityTimeout: time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			if len(msgs) != 1 {
				t.Fatalf("%d turn messages after Repended, want one for shard %d", len(msgs), a)
			}
			m, err := dispatch.Decode(msgs[0].Body)
			if err != nil {
				t.Fatal(err)
			}
			if m.JobID != job.Job.ID || m.Shard != a || m.Turn != turnBefore+1 {
				t.Fatalf("turn message %+v, want job %s shard %d turn %d", m, job.Job.ID, a, turnBefore+1)
			}
			clk.Advance(time.Second) // the message is visible again
			v = stepRependedJob(t, p, clk, job.Job.ID)
			want := int64(4 * len(accounts))
			if v.Job.Status != store.JobCompleted || v.Counts().Confirmed != want {
				t.Fatalf("after the re-pended items ran: %s %+v, want completed with %d confirmed", v.Job.Status, v.Counts(), want)
			}
			p.checkExactlyOnce(job.Job.ID)
		})
	}
}

// TestRependedOnACancelledJobAbandons: items re-pended after their job was
// cancelled are abandoned (category cancelled), in every shard named and
// past a page of store.MaxPutItems, and never sent.
func TestRependedOnACancelledJobAbandons(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, clk := rependedPipeline(t)
	rs := recipients([]string{"a"}, store.MaxPutItems+1)
	rs = append(rs, recipients([]string{"b"}, 3)...)
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: rs}, "repended-cancelled")
	drainTurns(t, p.queue)
	if _, err := p.store.TransitionJob(ctx, store.TransitionJobParams{JobID: job.Job.ID, From: []store.JobStatus{store.JobRunning},
		To: store.JobCancelled, At: clk.Now()}); err != nil {
		t.Fatal(err)
	}
	v, err := p.store.GetJob(ctx, job.Job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := sender.Repended(ctx, p.store, p.queue, p.alerts, nil, job.Job.ID, []int{rependedShardOf(t, v, "a"), rependedShardOf(t, v, "b")}, clk.Now()); err != nil {
		t.Fatalf("Repended: %v", err)
	}
	v, err = p.store.GetJob(ctx, job.Job.ID)
	if err != nil {
		t.Fatal(err)
	}
	all := int64(len(rs))
	if c := v.Counts(); v.Job.Status != store.JobCancelled || c.Abandoned != all || c.Pending != 0 || v.Failures()[store.CategoryCancelled] != all {
		t.Fatalf("%s %+v %v: want all %d abandoned as cancelled", v.Job.Status, c, v.Failures(), all)
	}
	p.checkExactlyOnce(job.Job.ID)
	if len(p.deliveries()) != 0 {
		t.Fatal("a cancelled job's items were sent")
	}
}

// TestRependedLeavesAPausedJobPaused: items re-pended while the operator
// has the job paused wait for the resume: the job stays paused and no turn
// is enqueued (resume enqueues the unfinished shards).
func TestRependedLeavesAPausedJobPaused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, clk := rependedPipeline(t)
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 3)}, "repended-paused")
	drainTurns(t, p.queue)
	if _, err := p.store.TransitionJob(ctx, store.TransitionJobParams{JobID: job.Job.ID, From: []store.JobStatus{store.JobRunning},
		To: store.JobPaused, PauseReason: store.PauseManual, At: clk.Now()}); err != nil {
		t.Fatal(err)
	}
	// Paused for a while: a turn enqueued now would not be taken for a
	// duplicate of the submission's.
	clk.Advance(queue.DedupWindow + time.Minute)
	if err := sender.Repended(ctx, p.store, p.queue, p.alerts, nil, job.Job.ID, []int{0}, clk.Now()); err != nil {
		t.Fatalf("Repended: %v", err)
	}
	v, err := p.store.GetJob(ctx, job.Job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if v.Job.Status != store.JobPaused || v.Counts().Pending != 3 {
		t.Fatalf("%s %+v: want paused with 3 pending", v.Job.Status, v.Counts())
	}
	msgs, err := p.queue.Receive(ctx, queue.ReceiveParams{Max: 10, VisibilityTimeout: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 0 {
		t.Fatalf("%d turn messages for a paused job, want none", len(msgs))
	}
}

// TestRependedWithNothingPendingFinishesTheJob: when the items re-pended
// were all settled again by the time Repended looks (a turn sent them), and
// every shard is final, Repended finishes the job itself, with its
// JobFinished alert: nothing else would.
func TestRependedWithNothingPendingFinishesTheJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, clk := rependedPipeline(t)
	if err := p.mock.SetBehaviour("a", mockprovider.Behaviour{InvalidToIDs: []string{"user-1"}}); err != nil {
		t.Fatal(err)
	}
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 3)}, "repended-nothing")
	v := stepRependedJob(t, p, clk, job.Job.ID)
	if v.Job.Status != store.JobPartial {
		t.Fatalf("first run: %s %+v", v.Job.Status, v.Counts())
	}
	// An operator's redrive found nothing to move back after reopening
	// the job (the item it listed was settled meanwhile).
	if _, err := p.store.TransitionJob(ctx, store.TransitionJobParams{JobID: job.Job.ID, From: []store.JobStatus{store.JobPartial},
		To: store.JobRunning, At: clk.Now()}); err != nil {
		t.Fatal(err)
	}
	finishedBefore := len(p.alerts.Of(alert.JobFinished))
	if err := sender.Repended(ctx, p.store, p.queue, p.alerts, nil, job.Job.ID, []int{0}, clk.Now()); err != nil {
		t.Fatalf("Repended: %v", err)
	}
	v, err := p.store.GetJob(ctx, job.Job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if v.Job.Status != store.JobPartial {
		t.Fatalf("job %s %+v: want it finished partial again", v.Job.Status, v.Counts())
	}
	events := p.alerts.Of(alert.JobFinished)
	if len(events) != finishedBefore+1 {
		t.Fatalf("%d JobFinished alerts after Repended, want one more than %d", len(events), finishedBefore)
	}
	if d := events[len(events)-1].Detail.(alert.JobFinishedDetail); d.Status != string(store.JobPartial) || d.Counts.Failed != 1 {
		t.Errorf("JobFinished %+v", d)
	}
}

// cancelOnSecondJobRead cancels the job when Repended reads it the second
// time: an operator's cancel lands between the reopening and the enqueuing.
type cancelOnSecondJobRead struct {
	store.Store
	clk   *clock.Fake
	reads int
}

func (c *cancelOnSecondJobRead) GetJob(ctx context.Context, jobID string) (store.JobView, error) {
	if c.reads++; c.reads == 2 {
		if _, err := c.Store.TransitionJob(ctx, store.TransitionJobParams{JobID: jobID, From: []store.JobStatus{store.JobRunning},
			To: store.JobCancelled, At: c.clk.Now()}); err != nil {
			return store.JobView{}, err
		}
	}
	return c.Store.GetJob(ctx, jobID)
}

// TestRependedAbandonsWhenCancelledMeanwhile: a job cancelled while
// Repended runs it again (after it reopened the job and shards) has the
// re-pended items of every shard named abandoned by Repended itself,
// category cancelled, none left pending and none sent.
func TestRependedAbandonsWhenCancelledMeanwhile(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, clk := rependedPipeline(t)
	for _, a := range []string{"a", "b"} {
		if err := p.mock.SetBehaviour(a, mockprovider.Behaviour{InvalidToIDs: []string{"user-1", "user-2"}}); err != nil {
			t.Fatal(err)
		}
	}
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a", "b"}, 3)}, "repended-cancel-meanwhile")
	v := stepRependedJob(t, p, clk, job.Job.ID)
	if v.Job.Status != store.JobPartial || v.Counts().Failed != 4 {
		t.Fatalf("first run: %s %+v, want partial with 4 failed", v.Job.Status, v.Counts())
	}
	delivered := len(p.deliveries())
	shards := []int{rependedShardOf(t, v, "a"), rependedShardOf(t, v, "b")}
	for _, idx := range shards {
		if n := rependRefusedOutsideTurn(t, p, job.Job.ID, idx, clk.Now()); n != 2 {
			t.Fatalf("re-pended %d items of shard %d, want 2", n, idx)
		}
	}
	st := &cancelOnSecondJobRead{Store: p.store, clk: clk}
	if err := sender.Repended(ctx, st, p.queue, p.alerts, nil, job.Job.ID, shards, clk.Now()); err != nil {
		t.Fatalf("Repended: %v", err)
	}
	if st.reads < 2 {
		t.Fatalf("Repended read the job %d times; the cancel never happened", st.reads)
	}
	v, err := p.store.GetJob(ctx, job.Job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if c := v.Counts(); v.Job.Status != store.JobCancelled || c.Pending != 0 || c.Abandoned != 4 || v.Failures()[store.CategoryCancelled] != 4 {
		t.Fatalf("%s %+v %v: want the 4 re-pended items of both shards abandoned as cancelled", v.Job.Status, c, v.Failures())
	}
	if n := len(p.deliveries()); n != delivered {
		t.Fatalf("%d deliveries after the cancel, want none", n-delivered)
	}
}

// TestTurnRunsAFinishedShardWithPendingItemsAgain: a turn that finds its
// shard finished but with items back to pending (a re-pend that raced the
// finish, before anything reopened the shard) runs the shard again and
// sends them in that same turn, each once.
func TestTurnRunsAFinishedShardWithPendingItemsAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, clk := rependedPipeline(t)
	if err := p.mock.SetBehaviour("a", mockprovider.Behaviour{InvalidToIDs: []string{"user-1", "user-3"}}); err != nil {
		t.Fatal(err)
	}
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 4)}, "finished-with-pending")
	v := stepRependedJob(t, p, clk, job.Job.ID)
	if err := p.mock.SetBehaviour("a", mockprovider.Behaviour{}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	if n := rependRefusedOutsideTurn(t, p, job.Job.ID, 0, clk.Now()); n != 2 {
		t.Fatalf("re-pended %d items, want 2", n)
	}
	// The job runs again (as FinishJob's re-check does); the shard is left
	// completed with 2 pending, and a turn comes.
	if _, err := p.store.TransitionJob(ctx, store.TransitionJobParams{JobID: job.Job.ID, From: []store.JobStatus{v.Job.Status}, To: store.JobRunning, At: clk.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := dispatch.Send(ctx, p.queue, dispatch.Turn{JobID: job.Job.ID, Shard: 0, Turn: v.Shards[0].Turn + 1}); err != nil {
		t.Fatal(err)
	}
	p.step(ctx)
	for _, it := range p.items(job.Job.ID) {
		if it.Status != store.ItemConfirmed {
			t.Fatalf("item %s is %s after the turn, want confirmed: the turn must run its finished shard's pending items", it.To, it.Status)
		}
	}
	p.checkExactlyOnce(job.Job.ID)
}

// TestTurnOnAFinishedShardFinishesItsJob: a turn redelivered after a
// crash between finishing its shard and finishing the job (the shard
// completed, the job still running) ends and finishes the job.
func TestTurnOnAFinishedShardFinishesItsJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, clk := rependedPipeline(t)
	if err := p.mock.SetBehaviour("a", mockprovider.Behaviour{InvalidToIDs: []string{"user-1"}}); err != nil {
		t.Fatal(err)
	}
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 4)}, "crash-before-job-finish")
	v := stepRependedJob(t, p, clk, job.Job.ID)
	if v.Job.Status != store.JobPartial {
		t.Fatalf("first run: %s, want partial", v.Job.Status)
	}
	if _, err := p.store.TransitionJob(ctx, store.TransitionJobParams{JobID: job.Job.ID, From: []store.JobStatus{store.JobPartial}, To: store.JobRunning, At: clk.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := dispatch.Send(ctx, p.queue, dispatch.Turn{JobID: job.Job.ID, Shard: 0, Turn: v.Shards[0].Turn + 1}); err != nil {
		t.Fatal(err)
	}
	p.step(ctx)
	if v, err := p.store.GetJob(ctx, job.Job.ID); err != nil || v.Job.Status != store.JobPartial {
		t.Fatalf("job after the redelivered turn: %s %v, want partial again", v.Job.Status, err)
	}
	p.checkExactlyOnce(job.Job.ID)
}
