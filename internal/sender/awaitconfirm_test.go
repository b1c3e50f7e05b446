package sender_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/alert"
	"github.com/qunfa/qunfa/internal/alert/alerttest"
	"github.com/qunfa/qunfa/internal/provider"
	"github.com/qunfa/qunfa/internal/reconcile"
	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/submit"
)

// massProvider stands for a provider that accepts a call whole under one
// message id and confirms it later (WeChat's mass send): it delivers
// through the inner provider, answers every accepted recipient with the
// call's id and AwaitConfirm, and looks up only by that id.
type massProvider struct {
	provider.Provider
	mu    sync.Mutex
	calls int
	sent  map[string]bool // msg ids it accepted
}

func (m *massProvider) Send(ctx context.Context, req provider.SendRequest) (provider.SendResult, error) {
	res, err := m.Provider.Send(ctx, req)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls++
	id := fmt.Sprintf("mass-%d", m.calls)
	for i := range res.Recipients {
		if res.Recipients[i].Accepted {
			res.Recipients[i].MsgID, res.Recipients[i].AwaitConfirm = id, true
			m.sent[id] = true
		}
	}
	return res, err
}

func (m *massProvider) Status(_ context.Context, req provider.StatusRequest) (provider.Status, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if req.MsgID == "" {
		return "", provider.ErrStatusUnsupported
	}
	if m.sent[req.MsgID] {
		return provider.StatusDelivered, nil
	}
	return provider.StatusUnknown, nil
}

// Items of a call accepted under a message id stay submitted until the
// provider confirms them; the reconciler finds their id in the recorded
// MsgCall and confirms them by the provider's look-up by id, and the job
// completes. Without the record they go to review, never resent.
func TestAcceptedAwaitingConfirmationStaysSubmittedUntilLookedUpByMsgID(t *testing.T) {
	for _, recorded := range []bool{true, false} {
		t.Run(fmt.Sprintf("recorded=%v", recorded), func(t *testing.T) {
			p, clk := fakePipeline(t, sender.Config{ClaimBatch: 20})
			p.account("wx-a", 1000, 1000, 0, 10)
			mp := &massProvider{Provider: p.sender.Provider, sent: map[string]bool{}}
			p.sender.Provider, p.reconciler.Provider = mp, mp
			if recorded {
				p.sender.MsgCalls, p.reconciler.MsgCalls = p.store, p.store
			}
			job := p.submit(submit.Request{Template: "hi", Recipients: recipients([]string{"wx-a"}, 30)}, "mass")
			ctx := context.Background()
			for range 10 {
				p.step(ctx)
				clk.Advance(100 * time.Millisecond)
			}
			for _, it := range p.items(job.Job.ID) {
				if it.Status != store.ItemSubmitted {
					t.Fatalf("item %d is %s before any confirmation, want submitted", it.Seq, it.Status)
				}
			}
			calls, err := p.store.ListMsgCalls(ctx, job.Job.ID)
			if recorded && (err != nil || len(calls) != 3) {
				t.Fatalf("recorded calls = %d, %v; want 3 of 10 items", len(calls), err)
			}
			clk.Advance(31 * time.Second)
			rep, err := p.reconciler.Run(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !recorded {
				if rep.UnderReview != 30 || rep.Repended != 0 {
					t.Fatalf("without the record: %+v, want 30 under review and none resent", rep)
				}
				return
			}
			if rep.Confirmed != 30 {
				t.Fatalf("reconciler: %+v, want 30 confirmed by the look-up by msg id", rep)
			}
			v := p.driveUntil(clk, func(v store.JobView) bool { return v.Job.Status == store.JobCompleted }, job.Job.ID)
			if c := v.Counts(); c.Confirmed != 30 || mp.calls != 3 {
				t.Fatalf("counts %+v after %d calls, want 30 confirmed by 3 calls", c, mp.calls)
			}
		})
	}
}

// A provider event settles the items of the call it names: the first
// event confirms them (one failed call fails its items), a duplicate and
// an event of an unknown id change nothing, and the job completes without
// any look-up; counts add up.
func TestProviderEventSettlesItsCallOnce(t *testing.T) {
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 20})
	p.account("wx-a", 1000, 1000, 0, 10)
	mp := &massProvider{Provider: p.sender.Provider, sent: map[string]bool{}}
	p.sender.Provider, p.reconciler.Provider = mp, mp
	p.sender.MsgCalls, p.reconciler.MsgCalls = p.store, p.store
	job := p.submit(submit.Request{Template: "hi", Recipients: recipients([]string{"wx-a"}, 30)}, "mass-ev")
	ctx := context.Background()
	for range 10 {
		p.step(ctx)
		clk.Advance(100 * time.Millisecond)
	}
	calls, err := p.store.ListMsgCalls(ctx, job.Job.ID)
	if err != nil || len(calls) != 3 {
		t.Fatalf("recorded calls = %d, %v; want 3", len(calls), err)
	}
	confirmed := reconcile.Settlement{To: store.ItemConfirmed}
	failed := reconcile.Settlement{To: store.ItemFailed, Error: &store.ItemError{Category: "permanent", Code: "send_fail", Message: "the provider sent none"}}
	for i, c := range calls {
		s := confirmed
		if i == 2 {
			s = failed
		}
		if n, err := p.reconciler.SettleMsgCall(ctx, c.Account, c.MsgID, s); err != nil || n != 10 {
			t.Fatalf("event for %s: %d settled, %v; want 10", c.MsgID, n, err)
		}
		// The same event again, late: nothing changes.
		if n, err := p.reconciler.SettleMsgCall(ctx, c.Account, c.MsgID, failed); err != nil || n != 0 {
			t.Fatalf("duplicate event for %s: %d settled, %v; want none", c.MsgID, n, err)
		}
	}
	if _, err := p.reconciler.SettleMsgCall(ctx, "wx-a", "never-sent", confirmed); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("event of an unknown id: %v, want ErrNotFound", err)
	}
	v := p.driveUntil(clk, func(v store.JobView) bool { return store.JobFinal(v.Job.Status) }, job.Job.ID)
	if c := v.Counts(); c.Confirmed != 20 || c.Failed != 10 || c.Submitted != 0 || mp.calls != 3 {
		t.Fatalf("job %s counts %+v after %d calls, want 20 confirmed, 10 failed by 3 calls", v.Job.Status, c, mp.calls)
	}
}

// Items made final outside the sender publish their items.outcomes too:
// a provider event's (confirmed or failed, each item once, a duplicate
// event publishing nothing) and a look-up's by message id, with the
// recipient, ref and message id; items sent under review publish none.
// The event's items are read by seq, or, without an ItemGetter, from
// their shard's listing.
func TestOutcomesOfItemsSettledByEventsAndLookUps(t *testing.T) {
	for _, bySeq := range []bool{true, false} {
		t.Run(fmt.Sprintf("bySeq=%v", bySeq), func(t *testing.T) { testOutcomesOfSettledItems(t, bySeq) })
	}
}

func testOutcomesOfSettledItems(t *testing.T, bySeq bool) {
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 20})
	if bySeq {
		p.reconciler.Items = p.store
	}
	p.account("wx-a", 1000, 1000, 0, 10)
	mp := &massProvider{Provider: p.sender.Provider, sent: map[string]bool{}}
	p.sender.Provider, p.reconciler.Provider = mp, mp
	p.sender.MsgCalls, p.reconciler.MsgCalls = p.store, p.store
	outcomes := &alerttest.Recorder{}
	p.reconciler.Outcomes = outcomes
	rs := recipients([]string{"wx-a"}, 40)
	for i := range rs {
		rs[i].Ref = "ref-" + rs[i].To
	}
	job := p.submit(submit.Request{Template: "hi", Recipients: rs}, "mass-outcomes")
	ctx := context.Background()
	for range 10 {
		p.step(ctx)
		clk.Advance(100 * time.Millisecond)
	}
	calls, err := p.store.ListMsgCalls(ctx, job.Job.ID)
	if err != nil || len(calls) < 4 {
		t.Fatalf("recorded calls = %d, %v; want 4 or more of at most 10 items", len(calls), err)
	}
	failed := reconcile.Settlement{To: store.ItemFailed, Error: &store.ItemError{Category: "permanent", Code: "send_fail", Message: "none sent"}}
	review := reconcile.Settlement{To: store.ItemSubmitted, Error: &store.ItemError{Message: "some sent"}}
	for _, c := range []struct {
		call store.MsgCall
		s    reconcile.Settlement
	}{{calls[0], reconcile.Settlement{To: store.ItemConfirmed}}, {calls[1], failed}, {calls[1], failed}, {calls[2], review}} {
		if _, err := p.reconciler.SettleMsgCall(ctx, c.call.Account, c.call.MsgID, c.s); err != nil {
			t.Fatal(err)
		}
	}
	// The other calls' events are lost: the look-up by their msg ids confirms them.
	clk.Advance(31 * time.Second)
	if _, err := p.reconciler.Run(ctx); err != nil {
		t.Fatal(err)
	}
	seen := outcomesOnce(t, outcomes.Of(alert.ItemOutcomes), job.Job.ID, 0)
	byCall := map[int64]int{}
	for i, c := range calls {
		for _, seq := range c.Seqs {
			byCall[seq] = i
		}
	}
	n := 0
	for _, it := range p.items(job.Job.ID) {
		o, ok := seen[it.Seq]
		switch call := byCall[it.Seq]; {
		case call == 2:
			if ok || it.Status != store.ItemSubmitted {
				t.Errorf("item %d under review: %s, outcome %+v; want none", it.Seq, it.Status, o)
			}
			continue
		case !ok:
			t.Errorf("item %d (%s, call %d) has no outcome", it.Seq, it.Status, call)
			continue
		}
		n++
		if o.To != it.To || o.Ref != "ref-"+it.To || o.Account != "wx-a" || o.Status != string(it.Status) || o.MsgID != calls[byCall[it.Seq]].MsgID {
			t.Errorf("outcome %+v of item %+v", o, it)
		}
		if it.Status == store.ItemFailed && (o.Category != "permanent" || o.Code != "send_fail") {
			t.Errorf("failed item's outcome %+v", o)
		}
	}
	if want := 40 - len(calls[2].Seqs); n != want {
		t.Fatalf("%d outcomes, want %d (confirmed and failed by events, confirmed by look-ups)", n, want)
	}
}
