package sender_test

import (
	"context"
	"testing"

	"github.com/qunfa/qunfa/internal/mockprovider"
	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/submit"
)

// TestSlowedShardHandsBackItsPace: a batch answered "rate limited" halves
// the shard's speed, and when the pause that pace asks for is longer than
// MaxWait the turn hands the shard back for it and sends nothing more: it
// slows down instead of hammering the provider.
func TestSlowedShardHandsBackItsPace(t *testing.T) {
	t.Parallel()
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 5})
	p.account("a", 10, 10, 0, 1)
	calls := &callRecorder{Provider: p.sender.Provider, clk: clk}
	p.sender.Provider = calls
	if err := p.mock.SetBehaviour("a", mockprovider.Behaviour{Errors: []mockprovider.InjectedError{{Errcode: 45009, Ratio: 1}}}); err != nil {
		t.Fatal(err)
	}
	p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 20)}, "slowed")
	res := p.step(context.Background())
	// 5 calls (half the burst), slowed to half speed: 5 items at 10/s
	// take 0.5 s more at half speed, over MaxWait (300 ms).
	if len(res) != 1 || res[0].Disposition != sender.HandedBack || res[0].Reason != "slowed down after rate limiting" {
		t.Fatalf("turn %+v, want it handed back to slow down", res)
	}
	if n := len(calls.at); n != 5 {
		t.Fatalf("%d calls in the turn, want the one batch of 5 before it slowed down", n)
	}
}
