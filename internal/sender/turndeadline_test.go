package sender_test

import (
	"context"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/dispatch"
	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/submit"
)

// TestTurnEndsBeforeItsDeadline: a turn ends, and enqueues its
// continuation, DeadlineMargin before its context's deadline (a Lambda
// invocation's timeout) or after TurnDuration, whichever comes first, so the
// invocation never times out with a batch in hand.
func TestTurnEndsBeforeItsDeadline(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name               string
		deadline, duration time.Duration
		want               time.Duration
	}{
		{"the context's deadline first", 10 * time.Second, time.Minute, 7 * time.Second},
		{"TurnDuration first", 100 * time.Second, 5 * time.Second, 5 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// The context's deadline is wall-clock time: the fake clock
			// starts at the wall clock's now.
			clk := clock.NewFake(time.Now().UTC().Truncate(time.Second))
			p := newPipeline(t, pipelineOptions{clock: clk, responseTimeout: 200 * time.Millisecond, sender: sender.Config{
				ClaimBatch: 5, MaxWait: 2 * time.Second, TurnDuration: tc.duration, DeadlineMargin: 3 * time.Second,
			}})
			p.account("a", 10, 10, 0, 1) // 300 items at 10/s: 30 s of sending
			p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 300)}, "deadline")
			start := clk.Now()
			ctx, cancel := context.WithDeadline(context.Background(), start.Add(tc.deadline))
			defer cancel()
			res := p.step(ctx)
			took := clk.Now().Sub(start)
			if len(res) != 1 || res[0].Disposition != sender.Done || res[0].Reason != "turn time up" {
				t.Fatalf("turn results %+v after %v, want one turn ended for its time", res, took)
			}
			if took < tc.want || took >= tc.want+time.Second {
				t.Fatalf("the turn ended after %v, want within a batch after %v", took, tc.want)
			}
			next, err := dispatch.Decode(p.nextTurn(time.Minute).Body)
			if err != nil || next.Turn != 2 {
				t.Fatalf("continuation %+v %v, want turn 2", next, err)
			}
		})
	}
}
