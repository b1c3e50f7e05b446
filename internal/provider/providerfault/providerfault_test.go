package providerfault_test

import (
	"context"
	"slices"
	"testing"

	"github.com/qunfa/qunfa/internal/provider"
	"github.com/qunfa/qunfa/internal/provider/providerfault"
)

// countingProvider delivers every send and counts them.
type countingProvider struct{ delivered []string }

func (c *countingProvider) Send(_ context.Context, req provider.SendRequest) (provider.SendResult, error) {
	c.delivered = append(c.delivered, req.Keys...)
	return provider.SendResult{Recipients: []provider.RecipientResult{{Accepted: true}}}, nil
}

func (c *countingProvider) Status(context.Context, provider.StatusRequest) (provider.Status, error) {
	return provider.StatusDelivered, nil
}

func run(seed uint64) ([]provider.Category, []string) {
	inner := &countingProvider{}
	p := providerfault.New(inner, providerfault.Config{Seed: seed, BeforeRatio: 0.3, AfterRatio: 0.3})
	var cats []provider.Category
	for i := range 50 {
		res, _ := p.Send(context.Background(), provider.SendRequest{Account: "a", Keys: []string{string(rune('A' + i))}, To: []string{"u"}, Content: "x"})
		cats = append(cats, res.Recipients[0].Category)
	}
	return cats, inner.delivered
}

// TestFaultsReplayAndMeanWhatTheySay: the same seed injects the same
// faults; a fault before delivery delivers nothing and is retryable, a
// lost answer after delivery is uncertain and delivered.
func TestFaultsReplayAndMeanWhatTheySay(t *testing.T) {
	a, delivered := run(7)
	b, _ := run(7)
	if !slices.Equal(a, b) {
		t.Fatal("the same seed gave other faults")
	}
	retryable, uncertain, accepted := 0, 0, 0
	for _, c := range a {
		switch c {
		case provider.Retryable:
			retryable++
		case provider.Uncertain:
			uncertain++
		case "":
			accepted++
		}
	}
	if retryable == 0 || uncertain == 0 || accepted == 0 {
		t.Fatalf("faults %d retryable, %d uncertain, %d accepted: want some of each", retryable, uncertain, accepted)
	}
	if len(delivered) != uncertain+accepted {
		t.Fatalf("%d delivered, want %d (accepted + answers lost after delivery)", len(delivered), uncertain+accepted)
	}
}
