package metrics_test

import (
	"context"
	"os"
	"time"

	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/metrics"
	"github.com/qunfa/qunfa/internal/provider"
)

// A Lambda function records through the provider decorator and flushes one
// EMF line per set of dimension values at the end of the invocation.
func ExampleNewEMF() {
	ctx := context.Background()
	clk := clock.NewFake(time.Date(2025, 3, 1, 9, 0, 0, 0, time.UTC))
	emf := metrics.NewEMF(os.Stdout, metrics.EMFOptions{Clock: clk, Dimensions: map[string]string{"function": "sender"}})
	p := &metrics.MeasuredProvider{Next: acceptAll{clk}, Recorder: emf, Clock: clk}
	_, _ = p.Send(ctx, provider.SendRequest{Account: "acct-a", Keys: []string{"k1", "k2"}, To: []string{"u1", "u2"}, Content: "hi"})
	_ = emf.Flush(ctx)
	// Output:
	// {"_aws":{"CloudWatchMetrics":[{"Dimensions":[["function","account"]],"Metrics":[{"Name":"qunfa_provider_latency_seconds","Unit":"Seconds"},{"Name":"qunfa_messages_sent_total","Unit":"Count"}],"Namespace":"qunfa"}],"Timestamp":1740819600250},"account":"acct-a","function":"sender","qunfa_messages_sent_total":2,"qunfa_provider_latency_seconds":[0.25]}
}

// acceptAll accepts every recipient after 250ms.
type acceptAll struct{ clk *clock.Fake }

func (a acceptAll) Send(_ context.Context, req provider.SendRequest) (provider.SendResult, error) {
	a.clk.Advance(250 * time.Millisecond)
	res := provider.SendResult{}
	for range req.To {
		res.Recipients = append(res.Recipients, provider.RecipientResult{Accepted: true})
	}
	return res, nil
}

func (acceptAll) Status(context.Context, provider.StatusRequest) (provider.Status, error) {
	return provider.StatusUnknown, nil
}
