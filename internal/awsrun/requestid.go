package awsrun

import (
	"context"
	"log/slog"
	"sync/atomic"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-lambda-go/lambdacontext"
)

// Every log line of a function carries the invocation's request id
// (request_id, the id Lambda reports in its own START/END/REPORT lines and
// API Gateway's access log records as lambdaRequestId) and its X-Ray trace
// id (trace_id). The core logs without a context, so the ids of the
// invocation being handled are kept for the process: Lambda hands a
// process one invocation at a time. Where a record's context carries the
// Lambda context, that one wins.

// invocation is the ids of the invocation being handled.
type invocation struct{ requestID, traceID string }

// invocationIDs adds the ids to every record.
type invocationIDs struct {
	next    slog.Handler
	current *atomic.Pointer[invocation]
}

func (h invocationIDs) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h invocationIDs) Handle(ctx context.Context, r slog.Record) error {
	inv := h.current.Load()
	if lc, ok := lambdacontext.FromContext(ctx); ok {
		inv = &invocation{requestID: lc.AwsRequestID, traceID: traceIDOf(ctx)}
	}
	if inv != nil {
		r.AddAttrs(slog.String("request_id", inv.requestID))
		if inv.traceID != "" {
			r.AddAttrs(slog.String("trace_id", inv.traceID))
		}
	}
	return h.next.Handle(ctx, r)
}

func (h invocationIDs) WithAttrs(attrs []slog.Attr) slog.Handler {
	return invocationIDs{next: h.next.WithAttrs(attrs), current: h.current}
}

func (h invocationIDs) WithGroup(name string) slog.Handler {
	return invocationIDs{next: h.next.WithGroup(name), current: h.current}
}

// traceIDOf is the X-Ray trace header aws-lambda-go puts in the context.
func traceIDOf(ctx context.Context) string {
	v, _ := ctx.Value("x-amzn-trace-id").(string) //nolint:staticcheck // aws-lambda-go's key
	return v
}

// trackInvocations wraps h so that, while it handles an invocation, the
// logs made from current carry its ids.
func trackInvocations(h lambda.Handler, current *atomic.Pointer[invocation]) lambda.Handler {
	return invocationTracker{next: h, current: current}
}

type invocationTracker struct {
	next    lambda.Handler
	current *atomic.Pointer[invocation]
}

func (t invocationTracker) Invoke(ctx context.Context, payload []byte) ([]byte, error) {
	inv := &invocation{traceID: traceIDOf(ctx)}
	if lc, ok := lambdacontext.FromContext(ctx); ok {
		inv.requestID = lc.AwsRequestID
	}
	t.current.Store(inv)
	defer t.current.CompareAndSwap(inv, nil)
	return t.next.Invoke(ctx, payload)
}
