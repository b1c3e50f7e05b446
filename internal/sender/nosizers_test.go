package sender_test

import (
	"testing"

	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/submit"
)

// TestSenderWithoutSizersSends: a Sender without Sizers (no measurement of
// the account's calls: calls carry 80% of max_recipients_per_call and only
// Concurrency bounds them) sends every recipient once, in single- and
// multi-recipient calls alike.
func TestSenderWithoutSizersSends(t *testing.T) {
	t.Parallel()
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 5})
	p.sender.Sizers = nil
	p.account("one", 1000, 1000, 0, 1)
	p.account("many", 1000, 1000, 0, 5)
	job := p.submit(submit.Request{Template: "hello", Recipients: recipients([]string{"one", "many"}, 12)}, "no-sizers")
	v := p.driveUntil(clk, final, job.Job.ID)
	if v.Job.Status != store.JobCompleted || v.Counts().Confirmed != 24 {
		t.Fatalf("%s %+v, want 24 confirmed", v.Job.Status, v.Counts())
	}
	p.checkExactlyOnce(job.Job.ID)
}
