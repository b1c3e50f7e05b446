package mockprovider

import (
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/clock"
)

// raw sends a request and returns the status, content type and body.
func (f *fixture) raw(t *testing.T, method, path, key, body string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(method, f.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
}

// TestGatewayErrors: gateway_errors answer an HTTP status with an HTML
// body, before delivery (nothing logged) or after it (delivered and logged
// first, like a gateway timing out on a provider that did the work), one
// draw per call; stats count them.
func TestGatewayErrors(t *testing.T) {
	t.Parallel()
	// Draws: 0.1 → the first entry (502 after delivery); 0.3 → the second
	// (504 before delivery); 0.9 → none.
	f := newFixture(t, Config{Rand: &seqSource{draws: []float64{0.1, 0.3, 0.9}}})
	f.put(t, "g", map[string]any{"gateway_errors": []map[string]any{
		{"status": 502, "ratio": 0.2, "after_delivery": true},
		{"status": 504, "ratio": 0.2},
	}})
	body := func(to string) string { return `{"guid":"g","toId":"` + to + `","content":"hi"}` }
	st, ct, b := f.raw(t, http.MethodPost, "/message/sendText", "k1", body("u1"))
	if st != 502 || !strings.HasPrefix(ct, "text/html") || !strings.Contains(b, "<html") {
		t.Fatalf("first call: %d %q %q, want 502 with an HTML body", st, ct, b)
	}
	if !f.mock.Delivered("k1") {
		t.Fatal("after_delivery: the message was not delivered and logged first")
	}
	st, _, _ = f.raw(t, http.MethodPost, "/message/sendText", "k2", body("u2"))
	if st != 504 || f.mock.Delivered("k2") {
		t.Fatalf("second call: %d delivered=%v, want 504 and nothing delivered", st, f.mock.Delivered("k2"))
	}
	if out := f.sendText(t, "g", "u3", "k3"); code(out) != 0 {
		t.Fatalf("third call: %v", out)
	}
	s := f.mock.Stats()["g"]
	if s.GatewayErrors != 2 || s.Calls != 3 || s.Accepted != 2 {
		t.Fatalf("stats %+v, want 2 gateway errors, 3 calls, 2 accepted", s)
	}
	if len(readLog(t, f.logPath)) != 2 {
		t.Fatal("log lines: want 2 (k1 after delivery, k3)")
	}
	// Invalid entries are refused.
	for _, bad := range []map[string]any{
		{"gateway_errors": []map[string]any{{"status": 200, "ratio": 0.1}}},
		{"gateway_errors": []map[string]any{{"status": 502, "ratio": 1.5}}},
		{"gateway_errors": []map[string]any{{"status": 502, "ratio": 0.6}, {"status": 504, "ratio": 0.6}}},
		{"status_latency_ms": -1},
	} {
		if st, _ := f.do(t, http.MethodPut, "/_mock/accounts/g", "", bad); st != http.StatusBadRequest {
			t.Errorf("PUT %v: %d, want 400", bad, st)
		}
	}
}

// TestStatusLookUpBehaviour: status_down answers look-ups 503,
// status_lookup false answers them 404 for that account,
// status_latency_ms delays them; stats count look-ups per account.
func TestStatusLookUpBehaviour(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	f := newFixture(t, Config{Clock: clk})
	f.sendText(t, "a", "u1", "k1")
	look := func(guid, key string) int {
		t.Helper()
		st, _, _ := f.raw(t, http.MethodGet, "/message/status?guid="+guid+"&key="+key, "", "")
		return st
	}
	if st := look("a", "k1"); st != 200 {
		t.Fatalf("healthy look-up: %d", st)
	}
	f.put(t, "a", map[string]any{"status_down": true})
	if st := look("a", "k1"); st != http.StatusServiceUnavailable {
		t.Fatalf("status_down: %d, want 503", st)
	}
	f.put(t, "a", map[string]any{"status_down": false, "status_lookup": false})
	if st := look("a", "k1"); st != http.StatusNotFound {
		t.Fatalf("status_lookup false: %d, want 404", st)
	}
	if st := look("b", "k1"); st != 200 {
		t.Fatalf("another account's look-up: %d, want 200", st)
	}
	f.put(t, "a", map[string]any{"status_lookup": true, "status_latency_ms": 200})
	start := clk.Now()
	done := make(chan int, 1)
	go func() { done <- look("a", "k1") }()
	for {
		select {
		case st := <-done:
			if st != 200 {
				t.Fatalf("slow look-up: %d", st)
			}
			if waited := clk.Now().Sub(start); waited < 200*time.Millisecond {
				t.Fatalf("look-up answered after %v of fake time, want at least its latency of 200ms", waited)
			}
			if s := f.mock.Stats(); s["a"].StatusCalls != 4 || s["b"].StatusCalls != 1 {
				t.Fatalf("status_calls a=%d b=%d, want 4 and 1", s["a"].StatusCalls, s["b"].StatusCalls)
			}
			b := f.mock.Behaviour("a")
			if b.StatusLatencyMS != 200 || !b.lookupEnabled() {
				t.Fatalf("behaviour %+v", b)
			}
			return
		default:
			clk.Advance(10 * time.Millisecond)
			runtime.Gosched()
		}
	}
}
