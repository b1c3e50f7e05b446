package metrics

import (
	"context"

	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/provider"
)

// MeasuredProvider is a provider.Provider decorator that records every
// Send: its latency, and per recipient sent, rate-limited or failed by
// category. Status look-ups pass through unmeasured.
type MeasuredProvider struct {
	Next     provider.Provider
	Recorder Recorder
	Clock    clock.Clock // default clock.System{}
}

var _ provider.Provider = (*MeasuredProvider)(nil)

// Provider wraps p so that r records what its sends do.
func Provider(p provider.Provider, r Recorder) provider.Provider {
	return &MeasuredProvider{Next: p, Recorder: r, Clock: clock.System{}}
}

// Send calls the wrapped provider and records the call. A call that returns
// an error (cancelled, malformed) recorded nothing at the provider and is
// not measured.
func (m *MeasuredProvider) Send(ctx context.Context, req provider.SendRequest) (provider.SendResult, error) {
	clk := m.Clock
	if clk == nil {
		clk = clock.System{}
	}
	start := clk.Now()
	res, err := m.Next.Send(ctx, req)
	if err != nil {
		return res, err
	}
	m.Recorder.ProviderLatency(ctx, req.Account, clk.Now().Sub(start))
	var sent, limited int
	failed := map[provider.Category]int{}
	for _, r := range res.Recipients {
		switch {
		case r.Accepted:
			sent++
		case r.Category == provider.RateLimited:
			limited++
		default:
			cat := r.Category
			if cat == "" {
				cat = "unknown"
			}
			failed[cat]++
		}
	}
	if sent > 0 {
		m.Recorder.MessagesSent(ctx, req.Account, sent)
	}
	if limited > 0 {
		m.Recorder.RateLimited(ctx, req.Account, limited)
	}
	for cat, n := range failed {
		m.Recorder.MessagesFailed(ctx, req.Account, string(cat), n)
	}
	return res, nil
}

// Status passes through to the wrapped provider.
func (m *MeasuredProvider) Status(ctx context.Context, req provider.StatusRequest) (provider.Status, error) {
	return m.Next.Status(ctx, req)
}
