package mockprovider

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/clock"
)

var t0 = time.Date(2025, 3, 1, 9, 0, 0, 0, time.UTC)

// fixture is a mock behind a real HTTP server on 127.0.0.1.
type fixture struct {
	mock    *Mock
	srv     *httptest.Server
	logPath string
}

func newFixture(t *testing.T, cfg Config) *fixture {
	t.Helper()
	if cfg.LogPath == "" {
		cfg.LogPath = filepath.Join(t.TempDir(), "deliveries.jsonl")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	m, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	srv := httptest.NewServer(m.Handler())
	t.Cleanup(srv.Close)
	// Registered last so it runs first: releases withheld answers, which
	// srv.Close would otherwise wait for.
	t.Cleanup(func() { _ = m.Close() })
	return &fixture{mock: m, srv: srv, logPath: cfg.LogPath}
}

// do sends a request and decodes the JSON answer into a map.
func (f *fixture) do(t *testing.T, method, path, key string, body any) (int, map[string]any) {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, f.srv.URL+path, rd)
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
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("%s %s: content type %q", method, path, ct)
	}
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("%s %s: decode: %v", method, path, err)
	}
	return resp.StatusCode, out
}

func (f *fixture) sendText(t *testing.T, guid, to, key string) map[string]any {
	t.Helper()
	status, out := f.do(t, http.MethodPost, "/message/sendText", key,
		map[string]string{"guid": guid, "toId": to, "content": "hello " + to})
	if status != http.StatusOK {
		t.Fatalf("sendText status %d: %v", status, out)
	}
	return out
}

func (f *fixture) put(t *testing.T, guid string, body any) {
	t.Helper()
	if status, out := f.do(t, http.MethodPut, "/_mock/accounts/"+guid, "", body); status != http.StatusOK {
		t.Fatalf("PUT account: %d %v", status, out)
	}
}

func code(out map[string]any) int {
	c, ok := out["errcode"].(float64)
	if !ok {
		return -999
	}
	return int(c)
}

func readLog(t *testing.T, path string) []map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []map[string]any
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var l map[string]any
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		lines = append(lines, l)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return lines
}

// seqSource is a math/rand/v2 Source that yields the given draws in turn.
type seqSource struct {
	mu    sync.Mutex
	draws []float64
	i     int
}

func (s *seqSource) Uint64() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := s.draws[s.i%len(s.draws)]
	s.i++
	return uint64(v*(1<<53)) << 11
}

func TestSendTextDeliversLogsAndAnswersStatus(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Config{Clock: clock.NewFake(t0)})

	out := f.sendText(t, "acct-a", "user-1", "job1-1")
	if code(out) != 0 || out["errmsg"] != "ok" || out["msgid"] == "" || out["msgid"] == nil {
		t.Fatalf("answer = %v", out)
	}

	lines := readLog(t, f.logPath)
	if len(lines) != 1 {
		t.Fatalf("log has %d lines, want 1", len(lines))
	}
	want := map[string]any{"ts": "2025-03-01T09:00:00Z", "guid": "acct-a", "toId": "user-1", "content": "hello user-1", "key": "job1-1"}
	if !reflect.DeepEqual(lines[0], want) {
		t.Fatalf("log line = %v, want %v", lines[0], want)
	}

	_, st := f.do(t, http.MethodGet, "/message/status?key=job1-1", "", nil)
	if code(st) != 0 || st["status"] != "delivered" {
		t.Fatalf("status of sent key = %v", st)
	}
	_, st = f.do(t, http.MethodGet, "/message/status?key=never-sent", "", nil)
	if code(st) != 0 || st["status"] != "unknown" {
		t.Fatalf("status of unknown key = %v", st)
	}
}

func TestDuplicateSendsAreLoggedTwice(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Config{})
	a := f.sendText(t, "acct-a", "user-1", "k1")
	b := f.sendText(t, "acct-a", "user-1", "k1")
	if a["msgid"] == b["msgid"] {
		t.Fatalf("two sends got the same msgid %v", a["msgid"])
	}
	if n := len(readLog(t, f.logPath)); n != 2 {
		t.Fatalf("log has %d lines, want 2", n)
	}
}

func TestRateLimitFollowsTheClock(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	f := newFixture(t, Config{Clock: clk, Rate: 5, Burst: 10})

	accepted := func(n int) int {
		ok := 0
		for i := 0; i < n; i++ {
			switch c := code(f.sendText(t, "acct-a", "u", "")); c {
			case 0:
				ok++
			case CodeFrequencyLimit:
			default:
				t.Fatalf("unexpected errcode %d", c)
			}
		}
		return ok
	}

	if got := accepted(15); got != 10 {
		t.Fatalf("at t0 accepted %d, want the burst of 10", got)
	}
	clk.Advance(time.Second)
	if got := accepted(10); got != 5 {
		t.Fatalf("one second later accepted %d, want 5", got)
	}
	clk.Advance(200 * time.Millisecond)
	if got := accepted(3); got != 1 {
		t.Fatalf("200ms later accepted %d, want 1", got)
	}
	clk.Advance(time.Hour)
	if got := accepted(12); got != 10 {
		t.Fatalf("after an idle hour accepted %d, want the burst of 10", got)
	}
	// Another account has its own bucket.
	if c := code(f.sendText(t, "acct-b", "u", "")); c != 0 {
		t.Fatalf("acct-b errcode %d, want 0", c)
	}

	st := f.mock.Stats()["acct-a"]
	want := AccountStats{Calls: 40, Accepted: 26, RateLimited: 14}
	if st != want {
		t.Fatalf("stats = %+v, want %+v", st, want)
	}
	if n := len(readLog(t, f.logPath)); n != 27 {
		t.Fatalf("log has %d lines, want 27", n)
	}
}

func TestRateChangedAtRunTime(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	f := newFixture(t, Config{Clock: clk})
	for i := 0; i < 50; i++ {
		if c := code(f.sendText(t, "acct-a", "u", "")); c != 0 {
			t.Fatalf("unlimited account refused with %d", c)
		}
	}
	f.put(t, "acct-a", map[string]any{"rate_per_sec": 2, "burst": 3})
	ok := 0
	for i := 0; i < 6; i++ {
		if code(f.sendText(t, "acct-a", "u", "")) == 0 {
			ok++
		}
	}
	if ok != 3 {
		t.Fatalf("after setting burst 3 accepted %d, want 3", ok)
	}
}

func TestSilentDropAcceptsWithoutDelivering(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Config{Clock: clock.NewFake(t0), Rate: 1, Burst: 2, SilentDrop: true})
	for i, key := range []string{"k1", "k2", "k3", "k4"} {
		out := f.sendText(t, "acct-a", "u", key)
		if code(out) != 0 || out["msgid"] == nil {
			t.Fatalf("send %d answered %v, want an acceptance", i, out)
		}
	}
	if n := len(readLog(t, f.logPath)); n != 2 {
		t.Fatalf("log has %d lines, want 2 (the burst)", n)
	}
	for key, want := range map[string]bool{"k1": true, "k2": true, "k3": false, "k4": false} {
		if got := f.mock.Delivered(key); got != want {
			t.Errorf("Delivered(%s) = %v, want %v", key, got, want)
		}
	}
	want := AccountStats{Calls: 4, Accepted: 2, Dropped: 2}
	if st := f.mock.Stats()["acct-a"]; st != want {
		t.Fatalf("stats = %+v, want %+v", st, want)
	}
}

func TestSendMultiReportsEachRecipient(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Config{Clock: clock.NewFake(t0), Rate: 1, Burst: 2})
	f.put(t, "acct-a", map[string]any{"invalid_to_ids": []string{"bad"}})

	status, out := f.do(t, http.MethodPost, "/message/send", "", map[string]any{
		"guid": "acct-a", "toIds": []string{"u1", "bad", "u2", "u3"}, "content": "hi",
		"keys": []string{"k1", "k2", "k3", "k4"},
	})
	if status != http.StatusOK || code(out) != 0 {
		t.Fatalf("answer %d %v", status, out)
	}
	results := out["results"].([]any)
	wantCodes := []int{0, CodeRecipientInvalid, 0, CodeFrequencyLimit}
	wantTo := []string{"u1", "bad", "u2", "u3"}
	if len(results) != len(wantCodes) {
		t.Fatalf("results = %v", results)
	}
	for i, r := range results {
		r := r.(map[string]any)
		if r["toId"] != wantTo[i] || code(r) != wantCodes[i] {
			t.Errorf("results[%d] = %v, want toId %s errcode %d", i, r, wantTo[i], wantCodes[i])
		}
		if hasID := r["msgid"] != nil; hasID != (wantCodes[i] == 0) {
			t.Errorf("results[%d] msgid presence = %v", i, hasID)
		}
	}
	if !reflect.DeepEqual(out["invalid"], []any{"bad"}) {
		t.Fatalf("invalid = %v, want [bad]", out["invalid"])
	}
	lines := readLog(t, f.logPath)
	if len(lines) != 2 || lines[0]["key"] != "k1" || lines[1]["key"] != "k3" || lines[1]["toId"] != "u2" {
		t.Fatalf("log = %v, want k1/u1 and k3/u2", lines)
	}
	want := AccountStats{Calls: 1, Accepted: 2, RateLimited: 1, Failed: 1}
	if st := f.mock.Stats()["acct-a"]; st != want {
		t.Fatalf("stats = %+v, want %+v", st, want)
	}
}

func TestDownAccountAnswers42001(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Config{})
	f.put(t, "acct-a", map[string]any{"down": true})
	if c := code(f.sendText(t, "acct-a", "u", "k1")); c != CodeTokenExpired {
		t.Fatalf("errcode %d, want 42001", c)
	}
	_, out := f.do(t, http.MethodPost, "/message/send", "", map[string]any{"guid": "acct-a", "toIds": []string{"a", "b"}, "content": "x"})
	if code(out) != CodeTokenExpired || out["results"] != nil {
		t.Fatalf("multi answer %v, want a call-level 42001 without results", out)
	}
	if c := code(f.sendText(t, "acct-b", "u", "k2")); c != 0 {
		t.Fatalf("another account errcode %d, want 0", c)
	}
	if f.mock.Delivered("k1") {
		t.Fatal("a down account delivered")
	}
	want := AccountStats{Calls: 2, Failed: 3}
	if st := f.mock.Stats()["acct-a"]; st != want {
		t.Fatalf("stats = %+v, want %+v", st, want)
	}
}

func TestInjectedErrorsByRatio(t *testing.T) {
	t.Parallel()
	src := &seqSource{draws: []float64{0.05, 0.25, 0.5, 0.95}}
	f := newFixture(t, Config{Rand: src})
	f.put(t, "acct-a", map[string]any{"errors": []map[string]any{
		{"errcode": -1, "ratio": 0.1}, {"errcode": 45033, "ratio": 0.3},
	}})
	want := []int{CodeSystemBusy, CodeConcurrencyLimit, 0, 0}
	for i, w := range want {
		if c := code(f.sendText(t, "acct-a", "u", "")); c != w {
			t.Errorf("call %d errcode %d, want %d", i, c, w)
		}
	}
	if n := len(readLog(t, f.logPath)); n != 2 {
		t.Fatalf("log has %d lines, want 2", n)
	}
}

func TestTimeoutDeliversButNeverAnswers(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Config{Rand: &seqSource{draws: []float64{0.1, 0.9}}})
	f.put(t, "acct-a", map[string]any{"timeout_ratio": 0.5})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The client gives up as soon as the mock starts withholding.
	f.mock.onHold = cancel

	body := `{"guid":"acct-a","toId":"u","content":"x"}`
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.srv.URL+"/message/sendText", strings.NewReader(body))
	req.Header.Set("Idempotency-Key", "held")
	resp, err := f.srv.Client().Do(req)
	if err == nil {
		resp.Body.Close()
		t.Fatalf("held call answered %d", resp.StatusCode)
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("held call error %v, want the client's cancellation", err)
	}
	if !f.mock.Delivered("held") {
		t.Fatal("held call was not delivered")
	}
	if c := code(f.sendText(t, "acct-a", "u", "answered")); c != 0 {
		t.Fatalf("second call errcode %d", c)
	}
	want := AccountStats{Calls: 2, Accepted: 2, Timeouts: 1}
	if st := f.mock.Stats()["acct-a"]; st != want {
		t.Fatalf("stats = %+v, want %+v", st, want)
	}
}

func TestCloseReleasesHeldCalls(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Config{})
	f.put(t, "acct-a", map[string]any{"timeout_ratio": 1})
	held := make(chan struct{})
	f.mock.onHold = func() { close(held) }
	errc := make(chan error, 1)
	go func() {
		resp, err := f.srv.Client().Post(f.srv.URL+"/message/sendText", "application/json",
			strings.NewReader(`{"guid":"acct-a","toId":"u","content":"x"}`))
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	select {
	case <-held:
	case err := <-errc:
		t.Fatalf("call returned before it was held: %v", err)
	}
	if err := f.mock.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err == nil {
		t.Fatal("a held call got an answer when the mock closed")
	}
	if c := code(f.sendText(t, "acct-a", "u", "after-close")); c != CodeSystemBusy {
		t.Fatalf("send after Close errcode %d, want -1", c)
	}
	if f.mock.Delivered("after-close") {
		t.Fatal("a closed mock delivered")
	}
}

// sleepClock is a fake clock that records the waits asked of it.
type sleepClock struct {
	*clock.Fake
	mu    sync.Mutex
	slept []time.Duration
}

func (c *sleepClock) Sleep(_ context.Context, d time.Duration) error {
	c.mu.Lock()
	c.slept = append(c.slept, d)
	c.mu.Unlock()
	c.Advance(d)
	return nil
}

func TestLatencyWaitsThroughTheClock(t *testing.T) {
	t.Parallel()
	clk := &sleepClock{Fake: clock.NewFake(t0)}
	f := newFixture(t, Config{Clock: clk})
	f.put(t, "acct-a", map[string]any{"latency_ms": 250})
	f.sendText(t, "acct-a", "u", "")
	f.sendText(t, "acct-b", "u", "")
	clk.mu.Lock()
	defer clk.mu.Unlock()
	if !reflect.DeepEqual(clk.slept, []time.Duration{250 * time.Millisecond}) {
		t.Fatalf("slept %v, want one 250ms wait", clk.slept)
	}
	if got := readLog(t, f.logPath)[0]["ts"]; got != "2025-03-01T09:00:00.25Z" {
		t.Fatalf("delivery ts %v, want after the latency", got)
	}
}

// TestLatencyGrowsWithRecipients: latency_per_recipient_ms makes a call
// of n recipients wait latency_ms + n × latency_per_recipient_ms, and the
// log lines of such a call tell the call, its size and that latency.
func TestLatencyGrowsWithRecipients(t *testing.T) {
	t.Parallel()
	clk := &sleepClock{Fake: clock.NewFake(t0)}
	f := newFixture(t, Config{Clock: clk})
	f.put(t, "acct-a", map[string]any{"latency_ms": 10, "latency_per_recipient_ms": 100})
	if code, out := f.do(t, http.MethodPost, "/message/send", "", map[string]any{"guid": "acct-a", "toIds": []string{"a", "b", "c"}, "content": "x"}); code != http.StatusOK || out["errcode"] != 0.0 {
		t.Fatalf("send: %d %v", code, out)
	}
	f.sendText(t, "acct-a", "d", "")
	clk.mu.Lock()
	slept := slices.Clone(clk.slept)
	clk.mu.Unlock()
	if !reflect.DeepEqual(slept, []time.Duration{310 * time.Millisecond, 110 * time.Millisecond}) {
		t.Fatalf("slept %v, want 310ms for 3 recipients, then 110ms for 1", slept)
	}
	lines := readLog(t, f.logPath)
	want := []struct{ call, n, ms float64 }{{1, 3, 310}, {1, 3, 310}, {1, 3, 310}, {2, 1, 110}}
	if len(lines) != len(want) {
		t.Fatalf("%d log lines, want %d", len(lines), len(want))
	}
	for i, w := range want {
		if l := lines[i]; l["call"] != w.call || l["call_recipients"] != w.n || l["latency_ms"] != w.ms {
			t.Errorf("line %d = %v, want call %v of %v recipients, latency %v ms", i, l, w.call, w.n, w.ms)
		}
	}
	if code, out := f.do(t, http.MethodPut, "/_mock/accounts/acct-a", "", map[string]any{"latency_per_recipient_ms": -1}); code != http.StatusBadRequest {
		t.Errorf("negative latency_per_recipient_ms: %d %v", code, out)
	}
}

func TestAccountBehaviourRoundTrip(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Config{Rate: 7})
	_, got := f.do(t, http.MethodGet, "/_mock/accounts/acct-a", "", nil)
	if got["rate_per_sec"] != 7.0 {
		t.Fatalf("default behaviour %v, want rate 7 from the config", got)
	}
	f.put(t, "acct-a", map[string]any{"burst": 3, "latency_ms": 0, "timeout_ratio": 0.25,
		"errors": []map[string]any{{"errcode": 81013, "ratio": 0.5}}})
	f.put(t, "acct-a", map[string]any{"down": true})
	want := Behaviour{RatePerSec: 7, Burst: 3, TimeoutRatio: 0.25, Down: true,
		Errors: []InjectedError{{Errcode: 81013, Ratio: 0.5}}}
	if got := f.mock.Behaviour("acct-a"); !reflect.DeepEqual(got, want) {
		t.Fatalf("behaviour = %+v, want %+v", got, want)
	}
	_, out := f.do(t, http.MethodGet, "/_mock/accounts/acct-a", "", nil)
	if out["down"] != true || out["burst"] != 3.0 || out["timeout_ratio"] != 0.25 {
		t.Fatalf("GET = %v", out)
	}

	for _, bad := range []string{
		`{"rate_per_sec": -1}`, `{"timeout_ratio": 1.5}`, `{"burst": -2}`,
		`{"errors": [{"errcode": -1, "ratio": 0.7}, {"errcode": 45009, "ratio": 0.7}]}`,
		`{"errors": [{"errcode": 0, "ratio": 0.1}]}`, `not json`,
	} {
		status, out := f.do(t, http.MethodPut, "/_mock/accounts/acct-a", "", bad)
		if status != http.StatusBadRequest || code(out) == 0 {
			t.Errorf("PUT %s: %d %v, want 400 with an errcode", bad, status, out)
		}
	}
	if got := f.mock.Behaviour("acct-a"); !reflect.DeepEqual(got, want) {
		t.Fatalf("a refused PUT changed the behaviour to %+v", got)
	}
}

func TestStatsEndpoint(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Config{Clock: clock.NewFake(t0), Rate: 1, Burst: 1})
	f.sendText(t, "acct-a", "u", "")
	f.sendText(t, "acct-a", "u", "")
	_, out := f.do(t, http.MethodGet, "/_mock/stats", "", nil)
	want := map[string]any{"accounts": map[string]any{"acct-a": map[string]any{
		"calls": 2.0, "accepted": 1.0, "rate_limited": 1.0, "failed": 0.0, "timeouts": 0.0, "dropped": 0.0,
		"gateway_errors": 0.0, "status_calls": 0.0,
	}}}
	if !reflect.DeepEqual(out, want) {
		t.Fatalf("stats = %v, want %v", out, want)
	}
}

func TestStatusSurvivesRestart(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "log.jsonl")
	first := newFixture(t, Config{LogPath: path})
	first.sendText(t, "acct-a", "u1", "before-restart")
	if err := first.mock.Close(); err != nil {
		t.Fatal(err)
	}

	second := newFixture(t, Config{LogPath: path})
	_, st := second.do(t, http.MethodGet, "/message/status?key=before-restart", "", nil)
	if st["status"] != "delivered" {
		t.Fatalf("after restart status = %v, want delivered", st)
	}
	second.sendText(t, "acct-a", "u2", "after-restart")
	lines := readLog(t, path)
	if len(lines) != 2 || lines[0]["key"] != "before-restart" || lines[1]["key"] != "after-restart" {
		t.Fatalf("log = %v, want both runs' lines in order", lines)
	}
}

func TestLoadSkipsATornLastLine(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "log.jsonl")
	content := `{"ts":"2025-03-01T09:00:00Z","guid":"a","toId":"u","content":"x","key":"k1"}` + "\n" + `{"ts":"2025-03-01T09:00:0`
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := New(Config{LogPath: path, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if !m.Delivered("k1") {
		t.Fatal("complete line not loaded")
	}
}

func TestMalformedRequestsGet400WithErrcode(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Config{})
	cases := []struct {
		name, path, body string
		want             int
	}{
		{"not json", "/message/sendText", `{"guid":`, CodeDataFormat},
		{"json array", "/message/sendText", `[1,2]`, CodeDataFormat},
		{"wrong type", "/message/sendText", `{"guid":1,"toId":"u","content":"x"}`, CodeDataFormat},
		{"no guid", "/message/sendText", `{"toId":"u","content":"x"}`, CodeInvalidParameter},
		{"no toId", "/message/sendText", `{"guid":"a","content":"x"}`, CodeInvalidParameter},
		{"no content", "/message/sendText", `{"guid":"a","toId":"u"}`, CodeEmptyContent},
		{"multi no toIds", "/message/send", `{"guid":"a","toIds":[],"content":"x"}`, CodeInvalidParameter},
		{"multi empty toId", "/message/send", `{"guid":"a","toIds":["u",""],"content":"x"}`, CodeInvalidParameter},
		{"multi keys mismatch", "/message/send", `{"guid":"a","toIds":["u","v"],"keys":["k"],"content":"x"}`, CodeInvalidParameter},
		{"multi no content", "/message/send", `{"guid":"a","toIds":["u"]}`, CodeEmptyContent},
		{"too large", "/message/sendText", `{"guid":"a","toId":"u","content":"` + strings.Repeat("x", maxBody) + `"}`, CodeDataFormat},
	}
	for _, c := range cases {
		status, out := f.do(t, http.MethodPost, c.path, "", c.body)
		if status != http.StatusBadRequest || code(out) != c.want || out["errmsg"] == "" {
			t.Errorf("%s: %d %v, want 400 errcode %d", c.name, status, out, c.want)
		}
	}
	status, out := f.do(t, http.MethodGet, "/message/status", "", nil)
	if status != http.StatusBadRequest || code(out) != CodeInvalidParameter {
		t.Errorf("status without key: %d %v", status, out)
	}
	status, out = f.do(t, http.MethodGet, "/nowhere", "", nil)
	if status != http.StatusNotFound || code(out) != CodeInvalidURL {
		t.Errorf("unknown path: %d %v", status, out)
	}
	if n := len(readLog(t, f.logPath)); n != 0 {
		t.Fatalf("malformed requests logged %d lines", n)
	}
	if len(f.mock.Stats()) != 0 {
		t.Fatalf("malformed requests counted: %v", f.mock.Stats())
	}
}

func TestServeStopsOnCancel(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "log.jsonl")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serveListener(ctx, ln, Config{LogPath: path, Logger: slog.New(slog.DiscardHandler)}) }()

	resp, err := http.Post("http://"+ln.Addr().String()+"/message/sendText", "application/json",
		strings.NewReader(`{"guid":"a","toId":"u","content":"x"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve returned %v after cancel", err)
	}
	if n := len(readLog(t, path)); n != 1 {
		t.Fatalf("log has %d lines, want 1", n)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	if _, err := New(Config{Rate: -1}); err == nil {
		t.Fatal("negative rate accepted")
	}
	if _, err := New(Config{LogPath: filepath.Join(t.TempDir(), "missing-dir", "x.jsonl")}); err == nil {
		t.Fatal("unwritable log path accepted")
	}
}

// TestConcurrentSendsKeepLinesWhole sends from many clients to a few
// accounts at once and checks that every log line parses and the log
// matches the stats exactly.
func TestConcurrentSendsKeepLinesWhole(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Config{Clock: clock.NewFake(t0), Rate: 50, Burst: 50})
	long := strings.Repeat("长内容", 500) // lines over the 4 KiB pipe-atomic size
	var wg sync.WaitGroup
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 10; i++ {
				acct := "acct-" + string(rune('a'+(g+i)%3))
				var body string
				path := "/message/sendText"
				if i%2 == 0 {
					path = "/message/send"
					body = `{"guid":"` + acct + `","toIds":["x","y","z"],"content":"` + long + `"}`
				} else {
					body = `{"guid":"` + acct + `","toId":"x","content":"` + long + `"}`
				}
				resp, err := f.srv.Client().Post(f.srv.URL+path, "application/json", strings.NewReader(body))
				if err != nil {
					t.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	wg.Wait()
	lines := readLog(t, f.logPath) // fails on any torn line
	perAcct := map[string]int64{}
	for _, l := range lines {
		if l["content"] != long {
			t.Fatalf("line content mangled for %v", l["guid"])
		}
		perAcct[l["guid"].(string)]++
	}
	var total int64
	for acct, st := range f.mock.Stats() {
		if st.Accepted != perAcct[acct] || st.Accepted != 50 {
			t.Errorf("%s: stats accepted %d, log lines %d, want 50 (the burst)", acct, st.Accepted, perAcct[acct])
		}
		total += st.Accepted + st.RateLimited
	}
	if total != 16*(5*3+5) {
		t.Fatalf("recipients counted %d, want %d", total, 16*(5*3+5))
	}
}

// An account with a token takes calls bearing it only; others answer
// 42001, as WeCom answers a rotated-out token.
func TestAccountTokenIsRequired(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Config{})
	f.put(t, "acct-a", map[string]any{"token": "tok-1"})
	call := func(token, key string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, f.srv.URL+"/message/sendText",
			strings.NewReader(`{"guid":"acct-a","toId":"u","content":"hi"}`))
		req.Header.Set("Idempotency-Key", key)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return code(out)
	}
	if c := call("", "k1"); c != CodeTokenExpired {
		t.Errorf("no token: errcode %d, want 42001", c)
	}
	if c := call("tok-0", "k2"); c != CodeTokenExpired {
		t.Errorf("wrong token: errcode %d, want 42001", c)
	}
	if c := call("tok-1", "k3"); c != 0 {
		t.Errorf("right token: errcode %d, want 0", c)
	}
	if f.mock.Delivered("k1") || f.mock.Delivered("k2") || !f.mock.Delivered("k3") {
		t.Error("delivered the wrong calls")
	}
}
