package sender_test

import (
	"context"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/submit"
)

// TestARunningSenderCanBeCopied: tests and the chaos harness copy a Sender
// to swap one of its ports (a crashing store) while its turns run; the
// copy's turns go on beside the original's, sharing the accounts' sizers,
// and the job completes with every recipient once. Under the race detector
// (CI runs it) this also shows a copy reads no field a turn writes: the
// sizers the first turn made lazily were one.
func TestARunningSenderCanBeCopied(t *testing.T) {
	t.Parallel()
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 5})
	p.account("a", 1000, 1000, 0, 1)
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 12)}, "copied")
	m := p.nextTurn(time.Minute)
	done := make(chan error, 1)
	go func() {
		_, err := p.sender.HandleTurn(context.Background(), m)
		done <- err
	}()
	copied := *p.sender
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	p.sender = &copied
	if v := p.driveUntil(clk, final, job.Job.ID); v.Job.Status != store.JobCompleted {
		t.Fatalf("status %s", v.Job.Status)
	}
	p.checkExactlyOnce(job.Job.ID)
}
