package sender_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/alert"
	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/provider"
	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/submit"
)

// probeTakeoverScript answers a turn's calls by a script: the first fails
// (retryable) while, meanwhile, another shard of the account opened the
// breaker, let it cool down and went silent in its half-open probe; the
// second (this turn's probe, taken over) is rate-limited; the third and
// fourth fail again; the rest go to the provider.
type probeTakeoverScript struct {
	provider.Provider
	st      store.Store
	clk     clock.Clock
	tenant  string
	account string
	mu      sync.Mutex
	n       int
	err     error
}

func (s *probeTakeoverScript) Send(ctx context.Context, req provider.SendRequest) (provider.SendResult, error) {
	s.mu.Lock()
	s.n++
	n := s.n
	s.mu.Unlock()
	answer := func(c provider.Category) (provider.SendResult, error) {
		var res provider.SendResult
		for range req.To {
			res.Recipients = append(res.Recipients, provider.RecipientResult{Category: c, Message: "scripted"})
		}
		return res, nil
	}
	switch n {
	case 1:
		br, err := s.st.GetBreaker(ctx, s.tenant, s.account)
		if err == nil {
			now := s.clk.Now()
			br.Tenant, br.Account = s.tenant, s.account
			br.State, br.Opens, br.ProbeShard = store.BreakerHalfOpen, 1, "other-job/0"
			br.OpenedAt, br.Until, br.UpdatedAt = now.Add(-3*time.Minute), now.Add(-2*time.Minute), now.Add(-2*time.Minute)
			_, err = s.st.SaveBreaker(ctx, br)
		}
		s.mu.Lock()
		s.err = err
		s.mu.Unlock()
		return answer(provider.Retryable)
	case 2:
		return answer(provider.RateLimited)
	case 3, 4:
		return answer(provider.Retryable)
	}
	return s.Provider.Send(ctx, req)
}

// TestProbeTakenOverStartsANewStreak: a turn that had one failed send
// when it took over a silent half-open probe, and whose probe went
// through (rate-limited, not failed), closes the breaker and counts a
// new streak from there: two failures after the probe stay short of the
// account's three consecutive failures, and the breaker stays closed.
func TestProbeTakenOverStartsANewStreak(t *testing.T) {
	t.Parallel()
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 1, BackoffBase: time.Millisecond, BackoffCap: time.Millisecond})
	breakerAccount(p, "a", 3)
	script := &probeTakeoverScript{Provider: p.sender.Provider, st: p.store, clk: clk, tenant: tenant, account: "a"}
	p.sender.Provider = script
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 8)}, "probe-streak")
	v := p.driveUntil(clk, final, job.Job.ID)
	script.mu.Lock()
	calls, err := script.n, script.err
	script.mu.Unlock()
	if err != nil {
		t.Fatalf("the other shard's breaker: %v", err)
	}
	if calls < 5 {
		t.Fatalf("%d calls, want the scripted four and more", calls)
	}
	if ev := p.alerts.Of(alert.BreakerClosed); len(ev) != 1 {
		t.Fatalf("BreakerClosed alerts %+v, want 1 (the probe taken over went through)", ev)
	}
	if ev := p.alerts.Of(alert.BreakerOpened); len(ev) != 0 {
		t.Fatalf("BreakerOpened alerts %+v, want none: two failures after the probe are not a streak of three", ev)
	}
	if v.Job.Status != store.JobCompleted || v.Counts().Confirmed != 8 {
		t.Fatalf("job %s counts %+v, want completed with 8 confirmed", v.Job.Status, v.Counts())
	}
}
