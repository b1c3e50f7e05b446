package sender_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/mockprovider"
	"github.com/qunfa/qunfa/internal/queue"
	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/submit"
)

var errCrash = errors.New("injected crash")

// crashingStore is a store that "crashes" after a number of writes: from
// then on every call fails, like a process that died. The handler using it
// returns an error and its in-memory state is lost; what it wrote stays.
type crashingStore struct {
	store.Store
	left atomic.Int64
}

func (c *crashingStore) alive() error {
	if c.left.Add(-1) < 0 {
		return errCrash
	}
	return nil
}

func (c *crashingStore) ClaimItems(ctx context.Context, p store.ClaimItemsParams) (store.ClaimItemsResult, error) {
	if err := c.alive(); err != nil {
		return store.ClaimItemsResult{}, err
	}
	return c.Store.ClaimItems(ctx, p)
}

func (c *crashingStore) UpdateItems(ctx context.Context, p store.UpdateItemsParams) (store.UpdateItemsResult, error) {
	if err := c.alive(); err != nil {
		return store.UpdateItemsResult{}, err
	}
	return c.Store.UpdateItems(ctx, p)
}

func (c *crashingStore) AdvanceShard(ctx context.Context, p store.AdvanceShardParams) (store.Shard, error) {
	if err := c.alive(); err != nil {
		return store.Shard{}, err
	}
	return c.Store.AdvanceShard(ctx, p)
}

func (c *crashingStore) TakeTokens(ctx context.Context, p store.TakeTokensParams) (store.TakeTokensResult, error) {
	if err := c.alive(); err != nil {
		return store.TakeTokensResult{}, err
	}
	return c.Store.TakeTokens(ctx, p)
}

// TestNoDuplicateSendsUnderFaults is the exactly-once property: random
// provider faults (busy, rate limit, invalid recipient, answers lost after
// delivery), senders crashing at random writes, the same queue message
// worked by two senders at once — no recipient ever gets two accepted
// messages, and once faults heal every item ends terminal, with counts that
// match the items and the mock's delivery log.
func TestNoDuplicateSendsUnderFaults(t *testing.T) {
	var runs atomic.Int64
	rapid.Check(t, func(rt *rapid.T) {
		if runs.Add(1) > propertyRuns {
			return // bound the cost; -rapid.checks raises the number of draws, not of runs
		}
		clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		p := newPipeline(t, pipelineOptions{
			clock:           clk,
			responseTimeout: 150 * time.Millisecond,
			mockSeed:        rapid.Int64Range(1, 1<<40).Draw(rt, "seed"),
			shardSplit:      rapid.IntRange(5, 40).Draw(rt, "split"),
			sender: sender.Config{
				ClaimBatch:  rapid.IntRange(1, 8).Draw(rt, "batch"),
				Concurrency: 4, MaxAttempts: 3, BackoffBase: time.Second, BackoffCap: 4 * time.Second,
				TurnDuration: 20 * time.Second,
			},
		})
		nAcct := rapid.IntRange(1, 3).Draw(rt, "accounts")
		var names []string
		for i := range nAcct {
			name := fmt.Sprintf("acct-%d", i)
			names = append(names, name)
			p.account(name, 1000, 1000, 0, rapid.SampledFrom([]int{1, 1, 3}).Draw(rt, "perCall"))
			var errs []mockprovider.InjectedError
			for _, code := range []int{-1, 45009, 81013} {
				if rapid.Bool().Draw(rt, "inject") {
					errs = append(errs, mockprovider.InjectedError{Errcode: code, Ratio: rapid.Float64Range(0, 0.25).Draw(rt, "ratio")})
				}
			}
			b := mockprovider.Behaviour{Errors: errs, TimeoutRatio: rapid.SampledFrom([]float64{0, 0, 0.1}).Draw(rt, "timeouts")}
			if err := p.mock.SetBehaviour(name, b); err != nil {
				rt.Fatal(err)
			}
		}
		per := rapid.IntRange(3, 25).Draw(rt, "perAccount")
		job := p.submit(submit.Request{Name: "prop", Template: "msg {{n}}", Recipients: recipients(names, per)}, "prop")

		ctx := context.Background()
		healed := false
		for step := 0; step < 400; step++ {
			if step == 150 {
				for _, n := range names {
					_ = p.mock.SetBehaviour(n, mockprovider.Behaviour{})
				}
				healed = true
			}
			clk.Advance(700 * time.Millisecond)
			if step%8 == 7 {
				if _, err := p.reconciler.Run(ctx); err != nil {
					rt.Fatalf("reconcile: %v", err)
				}
			}
			msgs, err := p.queue.Receive(ctx, queue.ReceiveParams{Max: 10, VisibilityTimeout: 60 * time.Second})
			if err != nil {
				rt.Fatalf("receive: %v", err)
			}
			for _, m := range msgs {
				msg := turnMessage(m)
				mode := "normal"
				if !healed {
					mode = rapid.SampledFrom([]string{"normal", "normal", "twice", "crash"}).Draw(rt, "mode")
				}
				var results []sender.Result
				var errs []error
				switch mode {
				case "normal":
					r, err := p.sender.HandleTurn(ctx, msg)
					results, errs = append(results, r), append(errs, err)
				case "twice":
					var mu sync.Mutex
					var wg sync.WaitGroup
					for range 2 {
						wg.Add(1)
						go func() {
							defer wg.Done()
							r, err := p.sender.HandleTurn(ctx, msg)
							mu.Lock()
							results, errs = append(results, r), append(errs, err)
							mu.Unlock()
						}()
					}
					waitGroup(rt, &wg, "two concurrent turns of one message")
				case "crash":
					cs := &crashingStore{Store: p.store}
					cs.left.Store(int64(rapid.IntRange(0, 12).Draw(rt, "crashAfter")))
					s2 := *p.sender
					s2.Store = cs
					r, err := s2.HandleTurn(ctx, msg)
					if err != nil && !errors.Is(err, errCrash) {
						rt.Fatalf("turn: %v", err)
					}
					results, errs = append(results, r), append(errs, err)
				}
				del := true
				for i := range results {
					if errs[i] != nil || results[i].Disposition != sender.Done {
						del = false
					}
					if errs[i] != nil && !errors.Is(errs[i], errCrash) {
						rt.Fatalf("turn failed: %v", errs[i])
					}
				}
				if del {
					if err := p.queue.Delete(ctx, m.ReceiptHandle); err != nil && !errors.Is(err, queue.ErrNotFound) {
						rt.Fatalf("delete: %v", err)
					}
				}
			}
			v, err := p.store.GetJob(ctx, job.Job.ID)
			if err != nil {
				rt.Fatal(err)
			}
			if healed && store.JobFinal(v.Job.Status) {
				break
			}
		}
		p.checkExactlyOnce(job.Job.ID)
		v, err := p.store.GetJob(ctx, job.Job.ID)
		if err != nil {
			rt.Fatal(err)
		}
		if !store.JobFinal(v.Job.Status) {
			rt.Fatalf("job not final after faults healed: %s %+v", v.Job.Status, v.Counts())
		}
		if c := v.Counts(); c.Pending != 0 || c.Submitted != 0 || c.Total() != v.Job.Total {
			rt.Fatalf("final counts %+v, total %d", c, v.Job.Total)
		}
	})
}
