package metrics_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/metrics"
	"github.com/qunfa/qunfa/internal/provider"
)

// fakeProvider answers with canned results, taking latency on a fake clock.
type fakeProvider struct {
	clk     *clock.Fake
	latency time.Duration
	results []provider.RecipientResult
	err     error
	calls   int
}

func (f *fakeProvider) Send(ctx context.Context, req provider.SendRequest) (provider.SendResult, error) {
	f.calls++
	f.clk.Advance(f.latency)
	if f.err != nil {
		return provider.SendResult{}, f.err
	}
	return provider.SendResult{Recipients: slices.Clone(f.results)}, nil
}

func (f *fakeProvider) Status(ctx context.Context, req provider.StatusRequest) (provider.Status, error) {
	return provider.StatusDelivered, nil
}

// tally is a Recorder that remembers every call.
type tally struct {
	mu        sync.Mutex
	sent      map[string]int
	failed    map[[2]string]int
	limited   map[string]int
	latencies map[string][]time.Duration
	metrics.Nop
}

func newTally() *tally {
	return &tally{sent: map[string]int{}, failed: map[[2]string]int{}, limited: map[string]int{}, latencies: map[string][]time.Duration{}}
}

func (t *tally) MessagesSent(_ context.Context, a string, n int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sent[a] += n
}
func (t *tally) MessagesFailed(_ context.Context, a, c string, n int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.failed[[2]string{a, c}] += n
}
func (t *tally) RateLimited(_ context.Context, a string, n int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.limited[a] += n
}
func (t *tally) ProviderLatency(_ context.Context, a string, d time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.latencies[a] = append(t.latencies[a], d)
}

func TestProviderRecordsSends(t *testing.T) {
	clk := clock.NewFake(time.Date(2025, 3, 1, 9, 0, 0, 0, time.UTC))
	fake := &fakeProvider{clk: clk, latency: 120 * time.Millisecond, results: []provider.RecipientResult{
		{Accepted: true, MsgID: "m1"},
		{Accepted: true, MsgID: "m2"},
		{Category: provider.RateLimited, Code: "45009"},
		{Category: provider.Permanent, Code: "81013"},
		{Category: provider.Permanent, Code: "40003"},
		{Category: provider.Uncertain},
		{Category: provider.AccountDown, Code: "42001"},
	}}
	rec := newTally()
	p := &metrics.MeasuredProvider{Next: fake, Recorder: rec, Clock: clk}
	ctx := context.Background()
	req := provider.SendRequest{Account: "acct-a", Keys: make([]string, 7), To: make([]string, 7), Content: "hi"}

	res, err := p.Send(ctx, req)
	if err != nil || len(res.Recipients) != 7 || res.Recipients[0].MsgID != "m1" {
		t.Fatalf("the decorator changed the result: %+v, %v", res, err)
	}
	if rec.sent["acct-a"] != 2 || rec.limited["acct-a"] != 1 {
		t.Errorf("sent %d, rate limited %d; want 2, 1", rec.sent["acct-a"], rec.limited["acct-a"])
	}
	wantFailed := map[[2]string]int{
		{"acct-a", "permanent"}: 2, {"acct-a", "uncertain"}: 1, {"acct-a", "account_down"}: 1,
	}
	for k, n := range wantFailed {
		if rec.failed[k] != n {
			t.Errorf("failed %v = %d, want %d", k, rec.failed[k], n)
		}
	}
	if len(rec.failed) != len(wantFailed) {
		t.Errorf("failed categories %v, want %v (rate limits are not failures)", rec.failed, wantFailed)
	}
	if got := rec.latencies["acct-a"]; len(got) != 1 || got[0] != 120*time.Millisecond {
		t.Errorf("latencies %v, want [120ms]", got)
	}

	// A call that returns an error is passed on and not measured.
	fake.err = context.Canceled
	if _, err := p.Send(ctx, req); !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
	if len(rec.latencies["acct-a"]) != 1 || rec.sent["acct-a"] != 2 {
		t.Error("a failed call was measured")
	}
	// Status passes through.
	if st, err := p.Status(ctx, provider.StatusRequest{Account: "acct-a", Key: "k"}); err != nil || st != provider.StatusDelivered {
		t.Errorf("Status = %v, %v", st, err)
	}
	if fake.calls != 2 {
		t.Errorf("provider called %d times, want 2", fake.calls)
	}
}

// Provider is the production constructor: it measures with the system clock.
func TestProviderConstructor(t *testing.T) {
	fake := &fakeProvider{clk: clock.NewFake(time.Time{}), results: []provider.RecipientResult{{Accepted: true}}}
	rec := newTally()
	if _, err := metrics.Provider(fake, rec).Send(context.Background(), provider.SendRequest{Account: "a"}); err != nil {
		t.Fatal(err)
	}
	if rec.sent["a"] != 1 || len(rec.latencies["a"]) != 1 || rec.latencies["a"][0] < 0 {
		t.Errorf("sent %v latencies %v", rec.sent, rec.latencies)
	}
}
