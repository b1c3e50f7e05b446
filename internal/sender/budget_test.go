package sender_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/alert"
	"github.com/qunfa/qunfa/internal/dispatch"
	"github.com/qunfa/qunfa/internal/provider"
	"github.com/qunfa/qunfa/internal/queue"
	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/submit"
)

// gateProvider holds the first call of one account until released, then
// answers it "rate limited" (nothing delivered, so its budget is given
// back). Every other call goes through.
type gateProvider struct {
	provider.Provider
	account string
	entered chan struct{} // closed when the held call arrives
	release chan struct{} // close to answer it
	once    sync.Once
}

func (g *gateProvider) Send(ctx context.Context, req provider.SendRequest) (provider.SendResult, error) {
	held := false
	if req.Account == g.account {
		g.once.Do(func() { held = true })
	}
	if !held {
		return g.Provider.Send(ctx, req)
	}
	close(g.entered)
	if !released(g.release) {
		return provider.SendResult{}, errors.New("gateProvider: the test never released the held call")
	}
	res := provider.SendResult{}
	for range req.To {
		res.Recipients = append(res.Recipients, provider.RecipientResult{Category: provider.RateLimited, Code: "45009", Message: "frequency limit"})
	}
	return res, nil
}

// hookStore runs hooks before a budget pause and after a give-back.
type hookStore struct {
	store.Store
	mu            sync.Mutex
	beforePause   func()
	afterGiveBack func()
}

func (h *hookStore) TransitionJob(ctx context.Context, p store.TransitionJobParams) (store.Job, error) {
	if p.To == store.JobPaused && p.PauseReason == store.PauseBudget {
		h.mu.Lock()
		f := h.beforePause
		h.beforePause = nil
		h.mu.Unlock()
		if f != nil {
			f()
		}
	}
	return h.Store.TransitionJob(ctx, p)
}

func (h *hookStore) ReserveBudget(ctx context.Context, jobID string, n int64) (store.BudgetGrant, error) {
	g, err := h.Store.ReserveBudget(ctx, jobID, n)
	if n < 0 {
		h.mu.Lock()
		f := h.afterGiveBack
		h.afterGiveBack = nil
		h.mu.Unlock()
		if f != nil {
			f()
		}
	}
	return g, err
}

// TestBudgetRaceForTheLastUnits (issue 19): shard A holds a reservation
// while shard B finds the budget used up and pauses the job; A's send then
// never happens and A gives its reservation back. Whichever comes first —
// B's pause or A's give-back — the job must not stay paused with budget
// left: it ends paused for budget with exactly the budget sent.
func TestBudgetRaceForTheLastUnits(t *testing.T) {
	for _, tc := range []struct {
		name string
		// giveBackFirst: A gives back after B's reservation failed but
		// before B's pause is written (B's re-check must lift it); else
		// after B's pause (A's give-back must lift it).
		giveBackFirst bool
	}{{"pause then give-back", false}, {"give-back then pause", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, clk := fakePipeline(t, sender.Config{ClaimBatch: 5})
			p.account("a", 1000, 1000, 0, 1)
			p.account("b", 1000, 1000, 0, 1)
			gate := &gateProvider{Provider: p.sender.Provider, account: "a", entered: make(chan struct{}), release: make(chan struct{})}
			p.sender.Provider = gate
			hooks := &hookStore{Store: p.sender.Store}
			p.sender.Store = hooks
			const budget = 10
			job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: append(recipients([]string{"a"}, 5), recipients([]string{"b"}, 20)...), Budget: budget}, "race")
			ctx := context.Background()

			msgs, err := p.queue.Receive(ctx, queue.ReceiveParams{Max: 10, VisibilityTimeout: time.Hour})
			if err != nil || len(msgs) != 2 {
				t.Fatalf("receive the two shards' turns: %v, %d messages", err, len(msgs))
			}
			var msgA, msgB queue.Message
			for _, m := range msgs {
				tn, err := dispatch.Decode(m.Body)
				if err != nil {
					t.Fatal(err)
				}
				if job.Shards[tn.Shard].Account == "a" {
					msgA = m
				} else {
					msgB = m
				}
			}
			done := func(m queue.Message, res sender.Result) {
				if res.Disposition == sender.Done {
					if err := p.queue.Delete(ctx, m.ReceiptHandle); err != nil && !errors.Is(err, queue.ErrNotFound) {
						t.Error(err)
					}
				}
			}

			// A reserves its 5 units and its call is held.
			aDone := make(chan struct{})
			go func() {
				defer close(aDone)
				res, err := p.sender.HandleTurn(ctx, turnMessage(msgA))
				if err != nil {
					t.Errorf("turn of shard a: %v", err)
				}
				done(msgA, res)
			}()
			recv(t, gate.entered, "shard a's held call")

			gaveBack := make(chan struct{})
			hooks.afterGiveBack = func() { close(gaveBack) }
			if tc.giveBackFirst {
				hooks.beforePause = func() {
					close(gate.release)
					if !released(gaveBack) {
						t.Error("shard a never gave its budget back")
					}
				}
			}
			// B reserves the other 5, sends them, and finds the budget used up.
			res, err := p.sender.HandleTurn(ctx, turnMessage(msgB))
			if err != nil {
				t.Fatalf("turn of shard b: %v", err)
			}
			done(msgB, res)
			if !tc.giveBackFirst {
				if v, _ := p.store.GetJob(ctx, job.Job.ID); v.Job.Status != store.JobPaused {
					t.Fatalf("shard b found the budget used up, but the job is %s", v.Job.Status)
				}
				close(gate.release)
			}
			recv(t, aDone, "shard a's turn")

			v := p.driveUntil(clk, func(v store.JobView) bool {
				c := v.Counts()
				return v.Job.Status != store.JobRunning && c.Submitted == 0 && len(p.deliveries()) >= budget
			}, job.Job.ID)
			if v.Job.Status != store.JobPaused || v.Job.PauseReason != store.PauseBudget {
				t.Fatalf("job ended %s (%s), want paused for budget", v.Job.Status, v.Job.PauseReason)
			}
			if n := len(p.deliveries()); n != budget || v.Job.BudgetUsed != budget || v.Counts().Confirmed != budget {
				t.Fatalf("delivered %d, budget_used %d, confirmed %d; want all %d", n, v.Job.BudgetUsed, v.Counts().Confirmed, budget)
			}
			evs := p.alerts.Of(alert.JobPaused)
			if len(evs) == 0 {
				t.Fatal("no JobPaused alert")
			}
			if d := evs[len(evs)-1].Detail.(alert.JobPausedDetail); d.BudgetUsed != budget || d.Budget != budget {
				t.Fatalf("last JobPaused alert says %d of %d used, want %d of %d", d.BudgetUsed, d.Budget, budget, budget)
			}
			for _, e := range evs {
				if d := e.Detail.(alert.JobPausedDetail); d.BudgetUsed < d.Budget {
					t.Errorf("a JobPaused alert was published with budget left: %+v", d)
				}
			}
			p.checkExactlyOnce(job.Job.ID)
		})
	}
}
