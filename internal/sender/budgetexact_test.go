package sender_test

import (
	"testing"

	"github.com/qunfa/qunfa/internal/alert"
	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/submit"
)

// TestBudgetOfExactlyTheJobCompletes: a job whose budget is exactly its
// number of recipients sends each once and completes — the budget runs out
// with nothing left to send, which is not a reason to pause.
func TestBudgetOfExactlyTheJobCompletes(t *testing.T) {
	t.Parallel()
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 4})
	p.account("a", 1000, 1000, 0, 1)
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 8), Budget: 8}, "budget-exact")
	v := p.driveUntil(clk, final, job.Job.ID)
	if v.Job.Status != store.JobCompleted || v.Counts().Confirmed != 8 {
		t.Fatalf("job %s %+v, want completed with 8 confirmed", v.Job.Status, v.Counts())
	}
	if ev := p.alerts.Of(alert.JobPaused); len(ev) != 0 {
		t.Fatalf("JobPaused %+v for a budget that covers the job", ev)
	}
	p.checkExactlyOnce(job.Job.ID)
}
