package sender_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/alert"
	"github.com/qunfa/qunfa/internal/alert/alerttest"
	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/submit"
)

// TestOutcomesEventsStayBoundedWithLongIDs: the outcomes of recipients with
// long ids, of an account with a long id, still go out in events within one
// 64 KB EventBridge chunk, every item once: the size an event is filled to
// counts each outcome's recipient and account.
func TestOutcomesEventsStayBoundedWithLongIDs(t *testing.T) {
	t.Parallel()
	// A response timeout that a loaded machine does not reach with these
	// larger requests; the items of a call that still times out are
	// settled by the reconciler, which publishes their outcomes too.
	clk := clock.NewFake(t0)
	p := newPipeline(t, pipelineOptions{clock: clk, sender: sender.Config{ClaimBatch: 10}, responseTimeout: 2 * time.Second})
	outcomes := &alerttest.Recorder{}
	p.sender.Outcomes, p.reconciler.Outcomes = outcomes, outcomes
	account := "acct-" + strings.Repeat("x", 250)
	p.account(account, 10000, 10000, 0, 1)
	rs := recipients([]string{account}, 250)
	for i := range rs {
		rs[i].To = fmt.Sprintf("%0300d", i)
	}
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: rs}, "long-ids")
	p.driveUntil(clk, final, job.Job.ID)
	events := outcomes.Of(alert.ItemOutcomes)
	seen := outcomesOnce(t, events, job.Job.ID, 64<<10)
	if len(seen) != 250 || len(events) < 2 {
		t.Errorf("%d items' outcomes in %d events, want 250 in at least 2", len(seen), len(events))
	}
}
