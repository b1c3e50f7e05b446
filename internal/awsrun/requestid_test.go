package awsrun

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/lambdacontext"
)

// TestEveryLogLineCarriesTheRequestID: lines logged while an invocation
// is handled — by the core, which logs without a context, as well as with
// one — carry its request id and trace id; lines between invocations
// carry none.
func TestEveryLogLineCarriesTheRequestID(t *testing.T) {
	var buf bytes.Buffer
	log, current := newInvocationLogger(&buf, slog.LevelInfo, Reconciler)
	core := log.With(slog.String("part", "core"))
	h := handler(func(ctx context.Context, _ json.RawMessage) (string, error) {
		core.Info("no context")
		log.InfoContext(ctx, "with context")
		return "ok", nil
	}, current, log)
	invoke := func(requestID, traceID string) {
		t.Helper()
		ctx := lambdacontext.NewContext(context.Background(), &lambdacontext.LambdaContext{AwsRequestID: requestID})
		ctx = context.WithValue(ctx, "x-amzn-trace-id", traceID) //nolint:staticcheck // aws-lambda-go's key
		if out, err := h.Invoke(ctx, []byte(`{}`)); err != nil || string(out) != `"ok"` {
			t.Fatalf("Invoke: %s %v", out, err)
		}
	}
	invoke("req-1", "Root=1-aaaa;Parent=1;Sampled=1")
	log.Info("between invocations")
	invoke("req-2", "Root=1-bbbb;Parent=2;Sampled=1")

	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		lines = append(lines, m)
	}
	want := []struct{ msg, req, trace string }{
		{"no context", "req-1", "Root=1-aaaa;Parent=1;Sampled=1"},
		{"with context", "req-1", "Root=1-aaaa;Parent=1;Sampled=1"},
		{"between invocations", "", ""},
		{"no context", "req-2", "Root=1-bbbb;Parent=2;Sampled=1"},
		{"with context", "req-2", "Root=1-bbbb;Parent=2;Sampled=1"},
	}
	if len(lines) != len(want) {
		t.Fatalf("%d log lines, want %d:\n%s", len(lines), len(want), buf.String())
	}
	for i, w := range want {
		l := lines[i]
		req, _ := l["request_id"].(string)
		trace, _ := l["trace_id"].(string)
		if l["msg"] != w.msg || req != w.req || trace != w.trace || l["function"] != "reconciler" {
			t.Errorf("line %d: %v; want msg %q request_id %q trace_id %q", i, l, w.msg, w.req, w.trace)
		}
	}
}
