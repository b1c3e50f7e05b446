// Package providerfault is a fault-injecting decorator of the provider
// port, for chaos tests: a send may fail before it reaches the provider
// (a retryable 5xx, nothing delivered), or reach it and then lose its
// answer (a gateway 502/504 after processing, a timeout, a reset: the
// message may be delivered, the result is uncertain). Look-ups may fail.
// Decisions come from a seeded source, so a failing run replays.
package providerfault

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"

	"github.com/qunfa/qunfa/internal/provider"
)

// ErrLookUpFailed is the error of an injected look-up failure.
var ErrLookUpFailed = errors.New("providerfault: status look-up failed")

// Config sets the faults; ratios are per call.
type Config struct {
	Seed uint64
	// BeforeRatio: the call fails before delivery (HTTP 503: retryable).
	BeforeRatio float64
	// AfterRatio: the call is delivered, then its answer is lost (gateway
	// 502/504, timeout, reset: uncertain).
	AfterRatio float64
	// StatusErrorRatio: a look-up fails.
	StatusErrorRatio float64
}

// Provider injects faults into an inner provider.
type Provider struct {
	inner provider.Provider
	cfg   Config

	mu      sync.Mutex
	rnd     *rand.Rand
	enabled bool
	counts  map[string]int
}

var _ provider.Provider = (*Provider)(nil)

// New wraps p. Faults are on until Heal.
func New(p provider.Provider, cfg Config) *Provider {
	return &Provider{inner: p, cfg: cfg, rnd: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x7f4a)), enabled: true, counts: map[string]int{}}
}

// Heal turns every fault off.
func (p *Provider) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.enabled = false
}

// Injected returns how many faults of each kind were injected.
func (p *Provider) Injected() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]int, len(p.counts))
	for k, v := range p.counts {
		out[k] = v
	}
	return out
}

func (p *Provider) draw(kind string, ratio float64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.enabled || p.rnd.Float64() >= ratio {
		return false
	}
	p.counts[kind]++
	return true
}

func same(n int, r provider.RecipientResult) provider.SendResult {
	out := provider.SendResult{Recipients: make([]provider.RecipientResult, n)}
	for i := range out.Recipients {
		out.Recipients[i] = r
	}
	return out
}

// Send injects a failure before delivery or a lost answer after it.
func (p *Provider) Send(ctx context.Context, req provider.SendRequest) (provider.SendResult, error) {
	if p.draw("before", p.cfg.BeforeRatio) {
		return same(len(req.To), provider.RecipientResult{Category: provider.Retryable, Code: "http_503", Message: "injected: service unavailable"}), nil
	}
	res, err := p.inner.Send(ctx, req)
	if err == nil && p.draw("after", p.cfg.AfterRatio) {
		return same(len(req.To), provider.RecipientResult{Category: provider.Uncertain, Code: "http_502", Message: "injected: answer lost after delivery"}), nil
	}
	return res, err
}

// Status injects look-up failures.
func (p *Provider) Status(ctx context.Context, req provider.StatusRequest) (provider.Status, error) {
	if p.draw("status_error", p.cfg.StatusErrorRatio) {
		return "", ErrLookUpFailed
	}
	return p.inner.Status(ctx, req)
}
