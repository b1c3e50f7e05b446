package sender_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/alert"
	"github.com/qunfa/qunfa/internal/control"
	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/submit"
)

func TestCanaryQuotasSpreadOverShards(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		sizes []int64
		n     int64
		want  []int64
	}{
		{[]int64{20, 20}, 5, []int64{3, 2}},
		{[]int64{1, 20, 0}, 5, []int64{1, 4, 0}},
		{[]int64{2, 2}, 10, []int64{2, 2}},
		{[]int64{5, 5, 5}, 2, []int64{1, 1, 0}},
	} {
		got := store.CanaryQuotas(tc.sizes, tc.n)
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("CanaryQuotas(%v, %d) = %v, want %v", tc.sizes, tc.n, got, tc.want)
				break
			}
		}
	}
}

func TestCanarySendsItsItemsThenPausesUntilApproved(t *testing.T) {
	t.Parallel()
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 4})
	p.account("a", 1000, 1000, 0, 1)
	p.account("b", 1000, 1000, 0, 1)
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a", "b"}, 20),
		Canary: &submit.Canary{Count: 5}}, "canary")
	if job.Job.Canary != 5 {
		t.Fatalf("job canary %d, want 5", job.Job.Canary)
	}
	ctx := context.Background()
	v := p.driveUntil(clk, func(v store.JobView) bool { return v.Job.Status == store.JobPaused }, job.Job.ID)
	if v.Job.PauseReason != store.PauseCanary {
		t.Fatalf("paused for %q, want canary", v.Job.PauseReason)
	}
	sent := func() (n int, per map[string]int) {
		per = map[string]int{}
		for _, ds := range p.deliveries() {
			n += len(ds)
			for _, d := range ds {
				per[d.GUID]++
			}
		}
		return n, per
	}
	if n, per := sent(); n != 5 || per["a"] != 3 || per["b"] != 2 {
		t.Fatalf("the canary delivered %d (%v), want 5 spread as a:3 b:2", n, per)
	}
	if ev := p.alerts.Of(alert.CanaryReady); len(ev) != 1 || ev[0].Detail.(alert.CanaryReadyDetail).Canary != 5 {
		t.Fatalf("CanaryReady alerts %+v", ev)
	}
	for range 5 { // more turns do nothing while it waits
		p.step(ctx)
		clk.Advance(time.Second)
	}
	if n, _ := sent(); n != 5 {
		t.Fatalf("delivered %d while waiting for approval", n)
	}
	if c, f := store.CanaryResults(v); c != 5 || f != 0 {
		t.Fatalf("canary results %d confirmed %d failed", c, f)
	}
	ctl := &control.Controller{Store: p.store, Queue: p.queue, Clock: clk}
	if _, err := ctl.Pause(ctx, job.Job.ID); !errors.Is(err, control.ErrNotAllowed) {
		t.Fatalf("pausing a canary-paused job: %v", err)
	}
	after, err := ctl.Resume(ctx, job.Job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !after.Job.CanaryApproved || after.Job.CanaryConfirmed != 5 {
		t.Fatalf("after approval: %+v", after.Job)
	}
	v = p.driveUntil(clk, final, job.Job.ID)
	if v.Job.Status != store.JobCompleted || v.Counts().Confirmed != 40 {
		t.Fatalf("job %s counts %+v", v.Job.Status, v.Counts())
	}
	p.checkExactlyOnce(job.Job.ID)
}

func TestCanaryCancelled(t *testing.T) {
	t.Parallel()
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 4})
	p.account("a", 1000, 1000, 0, 1)
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 40),
		Canary: &submit.Canary{Percent: 10}}, "canary-cancel")
	v := p.driveUntil(clk, func(v store.JobView) bool { return v.Job.Status == store.JobPaused }, job.Job.ID)
	if v.Job.PauseReason != store.PauseCanary || v.Job.Canary != 4 {
		t.Fatalf("paused for %q with canary %d, want canary of 4", v.Job.PauseReason, v.Job.Canary)
	}
	ctl := &control.Controller{Store: p.store, Queue: p.queue, Clock: clk}
	if _, err := ctl.Cancel(context.Background(), job.Job.ID); err != nil {
		t.Fatal(err)
	}
	v = p.driveUntil(clk, func(v store.JobView) bool { return v.Counts().Pending == 0 }, job.Job.ID)
	if n := len(p.deliveries()); n != 4 {
		t.Fatalf("delivered %d, want only the canary's 4", n)
	}
	if c, f := store.CanaryResults(v); c != 4 || f != 0 {
		t.Fatalf("canary results after cancel: %d confirmed %d failed", c, f)
	}
}

// TestCanaryWithCappedItems: a canary is the job's first N items. Items
// among them capped at send time (another job charged their recipients
// after this one was planned) are abandoned frequency_capped and count as
// done — the canary's failures — and no item past the canary is claimed in
// their place, whichever of the canary's items was capped. After approval
// the job sends the rest, each recipient once.
func TestCanaryWithCappedItems(t *testing.T) {
	t.Parallel()
	for _, capped := range [][]int64{{1, 4}, {4}, {0, 1, 2, 3, 4}} {
		p, clk := fakePipeline(t, sender.Config{ClaimBatch: 5})
		p.putAccount(store.Account{ID: "a", RatePerSec: 1000, Burst: 1000, MaxRecipientsPerCall: 1,
			FrequencyCap: store.FrequencyCap{Max: 1, WindowSec: 86400}})
		job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 20),
			Canary: &submit.Canary{Count: 5}}, "canary-capped")
		ctx := context.Background()
		charge := store.ChargeFrequencyParams{Tenant: tenant, Account: "a", JobID: "other-job",
			Cap: store.FrequencyCap{Max: 1, WindowSec: 86400}, Now: clk.Now()}
		cappedTo := map[string]bool{}
		for _, seq := range capped {
			to := fmt.Sprintf("user-%d", seq)
			charge.Charges = append(charge.Charges, store.FrequencyCharge{Seq: seq, To: to})
			cappedTo[to] = true
		}
		if _, err := p.store.ChargeFrequency(ctx, charge); err != nil {
			t.Fatal(err)
		}
		v := p.driveUntil(clk, func(v store.JobView) bool { return v.Job.Status == store.JobPaused }, job.Job.ID)
		want := 5 - len(capped)
		delivered := map[string]int{}
		for _, ds := range p.deliveries() {
			for _, d := range ds {
				delivered[d.ToID]++
			}
		}
		if len(delivered) != want {
			t.Errorf("capped %v: the canary delivered to %v, want the %d uncapped of its first 5", capped, delivered, want)
		}
		for to := range delivered {
			var seq int
			if _, err := fmt.Sscanf(to, "user-%d", &seq); err != nil || seq >= 5 || cappedTo[to] {
				t.Errorf("capped %v: the canary delivered to %s", capped, to)
			}
		}
		if c, f := store.CanaryResults(v); c != int64(want) || f != int64(len(capped)) {
			t.Errorf("capped %v: canary results %d confirmed %d failed, want %d and %d", capped, c, f, want, len(capped))
		}
		ctl := &control.Controller{Store: p.store, Queue: p.queue, Clock: clk}
		if _, err := ctl.Resume(ctx, job.Job.ID); err != nil {
			t.Fatal(err)
		}
		v = p.driveUntil(clk, final, job.Job.ID)
		if c := v.Counts(); c.Confirmed != int64(20-len(capped)) || v.Failures()[store.CategoryFrequencyCapped] != int64(len(capped)) {
			t.Errorf("capped %v: job counts %+v failures %v", capped, c, v.Failures())
		}
		p.checkExactlyOnce(job.Job.ID)
	}
}
