package wecomapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/mockprovider"
	"github.com/qunfa/qunfa/internal/provider"
)

var quiet = slog.New(slog.DiscardHandler)

// fixture is the adapter talking to the real mock provider over 127.0.0.1.
type fixture struct {
	mock   *mockprovider.Mock
	srv    *httptest.Server
	client *Client
}

func newFixture(t *testing.T, mcfg mockprovider.Config, ccfg Config) *fixture {
	t.Helper()
	mcfg.LogPath = filepath.Join(t.TempDir(), "deliveries.jsonl")
	mcfg.Logger = quiet
	m, err := mockprovider.New(mcfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(m.Handler())
	t.Cleanup(srv.Close)
	t.Cleanup(func() { _ = m.Close() }) // runs first: releases held calls
	ccfg.BaseURL = srv.URL
	ccfg.Logger = quiet
	c, err := New(ccfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return &fixture{mock: m, srv: srv, client: c}
}

// newLoopbackServer serves the mock on 127.0.0.1 until the test ends.
func newLoopbackServer(tb testing.TB, m *mockprovider.Mock) string {
	tb.Helper()
	srv := httptest.NewServer(m.Handler())
	tb.Cleanup(srv.Close)
	tb.Cleanup(func() { _ = m.Close() })
	return srv.URL
}

func newClient(t *testing.T, baseURL string, cfg Config) *Client {
	t.Helper()
	cfg.BaseURL, cfg.Logger = baseURL, quiet
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func one(key string) provider.SendRequest {
	return provider.SendRequest{Account: "acct-a", Keys: []string{key}, To: []string{"user-" + key}, Content: "hello"}
}

func send(t *testing.T, c *Client, req provider.SendRequest) []provider.RecipientResult {
	t.Helper()
	res, err := c.Send(context.Background(), req)
	if err != nil {
		t.Fatalf("Send: %v", err)
	}
	if len(res.Recipients) != len(req.To) {
		t.Fatalf("%d results for %d recipients", len(res.Recipients), len(req.To))
	}
	return res.Recipients
}

func TestSendSingleIsAcceptedAndDelivered(t *testing.T) {
	t.Parallel()
	f := newFixture(t, mockprovider.Config{}, Config{})
	r := send(t, f.client, one("k1"))[0]
	if !r.Accepted || r.Category != "" || r.MsgID == "" {
		t.Fatalf("result = %+v, want accepted with a msgid", r)
	}
	if !f.mock.Delivered("k1") {
		t.Fatal("the mock did not log key k1")
	}
	for key, want := range map[string]provider.Status{"k1": provider.StatusDelivered, "nope": provider.StatusUnknown} {
		st, err := f.client.Status(context.Background(), provider.StatusRequest{Account: "acct-a", Key: key})
		if err != nil || st != want {
			t.Errorf("Status(%s) = %q, %v; want %q", key, st, err, want)
		}
	}
}

func TestSendMultiGivesEachRecipientItsResult(t *testing.T) {
	t.Parallel()
	f := newFixture(t, mockprovider.Config{Rate: 1, Burst: 2}, Config{})
	if err := f.mock.SetBehaviour("acct-a", mockprovider.Behaviour{RatePerSec: 1, Burst: 2, InvalidToIDs: []string{"bad"}}); err != nil {
		t.Fatal(err)
	}
	req := provider.SendRequest{Account: "acct-a", Content: "hi",
		To: []string{"u1", "bad", "u2", "u3"}, Keys: []string{"k1", "k2", "k3", "k4"}}
	rs := send(t, f.client, req)
	wantCat := []provider.Category{"", provider.Permanent, "", provider.RateLimited}
	wantCode := []string{"", "81013", "", "45009"}
	for i, r := range rs {
		if r.Accepted != (wantCat[i] == "") || r.Category != wantCat[i] || r.Code != wantCode[i] {
			t.Errorf("recipient %d: %+v, want category %q code %q", i, r, wantCat[i], wantCode[i])
		}
	}
	for key, want := range map[string]bool{"k1": true, "k2": false, "k3": true, "k4": false} {
		if f.mock.Delivered(key) != want {
			t.Errorf("Delivered(%s) = %v, want %v", key, !want, want)
		}
	}
}

// TestCodesAgainstTheMock makes the mock answer each code and checks the
// category the adapter gives it.
func TestCodesAgainstTheMock(t *testing.T) {
	t.Parallel()
	cases := []struct {
		errcode int
		want    provider.Category
	}{
		{45009, provider.RateLimited},
		{45033, provider.RateLimited},
		{-1, provider.Retryable},
		{42001, provider.AccountDown},
		{40014, provider.AccountDown},
		{81013, provider.Permanent},
		{40003, provider.Permanent},
		{60011, provider.Permanent},
		{99999, provider.Retryable},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprint(tc.errcode), func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, mockprovider.Config{}, Config{})
			err := f.mock.SetBehaviour("acct-a", mockprovider.Behaviour{Errors: []mockprovider.InjectedError{{Errcode: tc.errcode, Ratio: 1}}})
			if err != nil {
				t.Fatal(err)
			}
			for _, req := range []provider.SendRequest{one("k1"), {
				Account: "acct-a", Content: "x", To: []string{"a", "b"}, Keys: []string{"k2", "k3"},
			}} {
				for i, r := range send(t, f.client, req) {
					if r.Accepted || r.Category != tc.want || r.Code != fmt.Sprint(tc.errcode) {
						t.Errorf("%d recipients, #%d: %+v, want %q", len(req.To), i, r, tc.want)
					}
				}
			}
		})
	}
}

func TestDownAccountIsAccountDown(t *testing.T) {
	t.Parallel()
	f := newFixture(t, mockprovider.Config{}, Config{})
	if err := f.mock.SetBehaviour("acct-a", mockprovider.Behaviour{Down: true}); err != nil {
		t.Fatal(err)
	}
	if r := send(t, f.client, one("k1"))[0]; r.Category != provider.AccountDown || r.Code != "42001" {
		t.Fatalf("result = %+v, want account_down 42001", r)
	}
}

func TestNoAnswerAfterWritingIsUncertain(t *testing.T) {
	t.Parallel()
	f := newFixture(t, mockprovider.Config{}, Config{ResponseTimeout: 100 * time.Millisecond})
	if err := f.mock.SetBehaviour("acct-a", mockprovider.Behaviour{TimeoutRatio: 1}); err != nil {
		t.Fatal(err)
	}
	r := send(t, f.client, one("k1"))[0]
	if r.Accepted || r.Category != provider.Uncertain {
		t.Fatalf("result = %+v, want uncertain", r)
	}
	if !f.mock.Delivered("k1") {
		t.Fatal("the mock did not deliver the timed-out call; the test proves nothing")
	}
	st, err := f.client.Status(context.Background(), provider.StatusRequest{Account: "acct-a", Key: "k1"})
	if err != nil || st != provider.StatusDelivered {
		t.Fatalf("Status = %q, %v; want delivered", st, err)
	}
}

func TestConnectionRefusedIsRetryable(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, "http://"+addr, Config{})
	req := provider.SendRequest{Account: "acct-a", Content: "x", To: []string{"a", "b"}, Keys: []string{"k1", "k2"}}
	for i, r := range send(t, c, req) {
		if r.Accepted || r.Category != provider.Retryable || r.Message == "" {
			t.Errorf("recipient %d: %+v, want retryable with a message", i, r)
		}
	}
	if _, err := c.Status(context.Background(), provider.StatusRequest{Key: "k1"}); err == nil {
		t.Fatal("Status against a closed port succeeded")
	}
}

// handlerFixture serves h on 127.0.0.1 and counts the requests it sees.
func handlerFixture(t *testing.T, h http.HandlerFunc) (*Client, *sync.Map) {
	t.Helper()
	seen := &sync.Map{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		seen.Store(r.URL.Path+" "+r.Header.Get("Idempotency-Key"), string(body))
		r.Body = io.NopCloser(bytes.NewReader(body))
		h(w, r)
	}))
	t.Cleanup(srv.Close)
	return newClient(t, srv.URL, Config{Token: "s3cret"}), seen
}

func TestAnswersOtherThanErrcodes(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		h        http.HandlerFunc
		wantCat  provider.Category
		wantCode string
	}{
		{"HTTP 503", func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "overloaded", http.StatusServiceUnavailable)
		}, provider.Retryable, "http_503"},
		{"HTTP 500 with errcode", func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = io.WriteString(w, `{"errcode":-1,"errmsg":"busy"}`)
		}, provider.Retryable, "-1"},
		{"HTTP 429", func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusTooManyRequests)
		}, provider.RateLimited, "http_429"},
		{"HTTP 401", func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusUnauthorized)
		}, provider.AccountDown, "http_401"},
		{"HTTP 400 from the mock", func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, `{"errcode":40058,"errmsg":"invalid parameter"}`)
		}, provider.Permanent, "40058"},
		{"200 that is not JSON", func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.WriteString(w, `<html>gateway</html>`)
		}, provider.Uncertain, ""},
		{"200 without errcode", func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.WriteString(w, `{"msgid":"x"}`)
		}, provider.Uncertain, ""},
		{"connection reset after the request", func(w http.ResponseWriter, _ *http.Request) {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				if tc, ok := conn.(*net.TCPConn); ok {
					_ = tc.SetLinger(0) // RST instead of FIN
				}
				_ = conn.Close()
			}
		}, provider.Uncertain, ""},
		{"truncated body", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Length", "100")
			_, _ = io.WriteString(w, `{"errcode":0,`)
			w.(http.Flusher).Flush()
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				_ = conn.Close()
			}
		}, provider.Uncertain, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, seen := handlerFixture(t, tc.h)
			r := send(t, c, one("k1"))[0]
			if r.Accepted || r.Category != tc.wantCat || r.Code != tc.wantCode {
				t.Fatalf("result = %+v, want category %q code %q", r, tc.wantCat, tc.wantCode)
			}
			n := 0
			seen.Range(func(any, any) bool { n++; return true })
			if n != 1 {
				t.Fatalf("server saw %d distinct requests, want exactly 1 (no replay)", n)
			}
		})
	}
}

func TestRequestShape(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var auth, ctype []string
	c, seen := handlerFixture(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auth = append(auth, r.Header.Get("Authorization"))
		ctype = append(ctype, r.Header.Get("Content-Type"))
		mu.Unlock()
		if r.URL.Path == "/message/send" {
			_, _ = io.WriteString(w, `{"errcode":0,"errmsg":"ok","results":[{"toId":"a","errcode":0,"msgid":"m1"}],"invalid":["c"]}`)
			return
		}
		_, _ = io.WriteString(w, `{"errcode":0,"errmsg":"ok","msgid":"m0"}`)
	})
	send(t, c, one("k1"))
	rs := send(t, c, provider.SendRequest{Account: "acct-a", Content: "x", To: []string{"a", "b", "c"}, Keys: []string{"k2", "k3", "k4"}})

	body, ok := seen.Load("/message/sendText k1")
	if !ok || body != `{"guid":"acct-a","toId":"user-k1","content":"hello"}` {
		t.Fatalf("sendText body = %v (found %v)", body, ok)
	}
	body, ok = seen.Load("/message/send ")
	if !ok || body != `{"guid":"acct-a","toIds":["a","b","c"],"content":"x","keys":["k2","k3","k4"]}` {
		t.Fatalf("send body = %v (found %v)", body, ok)
	}
	if !reflect.DeepEqual(auth, []string{"Bearer s3cret", "Bearer s3cret"}) || ctype[0] != "application/json" {
		t.Fatalf("headers: auth %v content type %v", auth, ctype)
	}
	want := []provider.RecipientResult{
		{Accepted: true, MsgID: "m1"},
		{Category: provider.Uncertain, Message: "the answer has no result for this recipient"},
		{Category: provider.Permanent, Code: "40003", Message: "listed as invalid"},
	}
	if !reflect.DeepEqual(rs, want) {
		t.Fatalf("results = %+v, want %+v", rs, want)
	}
}

func TestInvalidRequestsAreRefusedBeforeSending(t *testing.T) {
	t.Parallel()
	c, seen := handlerFixture(t, func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, `{"errcode":0}`)
	})
	for _, req := range []provider.SendRequest{
		{Keys: []string{"k"}, To: []string{"u"}, Content: "x"},
		{Account: "a", Content: "x"},
		{Account: "a", Keys: []string{"k"}, To: []string{"u", "v"}, Content: "x"},
		{Account: "a", Keys: []string{"k"}, To: []string{""}, Content: "x"},
		{Account: "a", Keys: []string{"k"}, To: []string{"u"}},
	} {
		if _, err := c.Send(context.Background(), req); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("Send(%+v) err = %v, want ErrInvalidRequest", req, err)
		}
	}
	if _, err := c.Status(context.Background(), provider.StatusRequest{Account: "a"}); !errors.Is(err, ErrInvalidRequest) {
		t.Errorf("Status without key err = %v, want ErrInvalidRequest", err)
	}
	seen.Range(func(k, _ any) bool {
		t.Errorf("server saw %v", k)
		return true
	})
}

func TestCancelledContextIsAnError(t *testing.T) {
	t.Parallel()
	f := newFixture(t, mockprovider.Config{}, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res, err := f.client.Send(ctx, one("k1"))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if len(res.Recipients) != 1 || res.Recipients[0].Category != provider.Retryable {
		t.Fatalf("results = %+v, want one retryable (nothing was written)", res.Recipients)
	}
	if f.mock.Delivered("k1") {
		t.Fatal("a cancelled call was delivered")
	}
}

func TestStatusErrors(t *testing.T) {
	t.Parallel()
	cases := map[string]http.HandlerFunc{
		"HTTP 500": func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(500) },
		"errcode": func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.WriteString(w, `{"errcode":-1,"errmsg":"busy"}`)
		},
		"unexpected status": func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.WriteString(w, `{"errcode":0,"status":"pending"}`)
		},
		"unreadable":         func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, `nope`) },
		"errcode not a JSON": func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, `{"status":"unknown"}`) },
	}
	for name, h := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c, _ := handlerFixture(t, h)
			if st, err := c.Status(context.Background(), provider.StatusRequest{Key: "k"}); err == nil {
				t.Fatalf("Status = %q with no error", st)
			}
		})
	}
}

func TestConfigNeverShowsTheToken(t *testing.T) {
	t.Parallel()
	cfg := Config{BaseURL: "http://127.0.0.1:1", Token: "s3cret-token"}
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("config", slog.Any("cfg", cfg))
	for _, s := range []string{buf.String(), cfg.String(), fmt.Sprintf("%v %+v %#v %s", cfg, cfg, cfg, cfg)} {
		if strings.Contains(s, "s3cret") {
			t.Fatalf("token leaked: %s", s)
		}
		if !strings.Contains(s, "REDACTED") || !strings.Contains(s, "127.0.0.1:1") {
			t.Fatalf("config not shown: %s", s)
		}
	}
}

func TestNewValidatesConfig(t *testing.T) {
	t.Parallel()
	for _, cfg := range []Config{
		{}, {BaseURL: "127.0.0.1:80"}, {BaseURL: "ftp://x"},
		{BaseURL: "http://x", ConnectTimeout: -1}, {BaseURL: "http://x", ResponseTimeout: -1},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%v) accepted", cfg)
		}
	}
	c, err := New(Config{BaseURL: "http://x/"})
	if err != nil {
		t.Fatal(err)
	}
	if c.cfg.ConnectTimeout != 3*time.Second || c.cfg.ResponseTimeout != 10*time.Second || c.base != "http://x" {
		t.Fatalf("defaults = %+v base %q", c.cfg, c.base)
	}
}

func TestClassifyCode(t *testing.T) {
	t.Parallel()
	cases := []struct {
		code int
		want provider.Category
	}{
		{45009, provider.RateLimited}, {45033, provider.RateLimited},
		{-1, provider.Retryable},
		{42001, provider.AccountDown}, {40014, provider.AccountDown}, {40001, provider.AccountDown}, {41001, provider.AccountDown},
		{81013, provider.Permanent}, {40003, provider.Permanent}, {40058, provider.Permanent}, {44004, provider.Permanent},
		{45002, provider.Permanent}, {48002, provider.Permanent}, {60011, provider.Permanent}, {60111, provider.Permanent},
		{12345, provider.Retryable}, {-2, provider.Retryable},
	}
	for _, tc := range cases {
		if got := classifyCode(tc.code); got != tc.want {
			t.Errorf("classifyCode(%d) = %q, want %q", tc.code, got, tc.want)
		}
	}
	for status, want := range map[int]provider.Category{
		500: provider.Uncertain, 502: provider.Uncertain, 503: provider.Retryable, 504: provider.Uncertain,
		429: provider.RateLimited, 401: provider.AccountDown, 403: provider.AccountDown,
		400: provider.Permanent, 404: provider.Permanent, 307: provider.Permanent,
	} {
		if got := classifyHTTPStatus(status); got != want {
			t.Errorf("classifyHTTPStatus(%d) = %q, want %q", status, got, want)
		}
	}
}

// TestNoReplayOnAReusedConnection checks that net/http does not resend a
// written request when a keep-alive connection breaks under it (it would,
// for a request with an Idempotency-Key header and a rewindable body).
func TestNoReplayOnAReusedConnection(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	calls := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		key := r.Header.Get("Idempotency-Key")
		mu.Lock()
		calls[key]++
		first := calls[key] == 1
		mu.Unlock()
		if key == "k2" && first {
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				_ = conn.(*net.TCPConn).SetLinger(0)
				_ = conn.Close()
			}
			return
		}
		_, _ = io.WriteString(w, `{"errcode":0,"errmsg":"ok","msgid":"m"}`)
	}))
	t.Cleanup(srv.Close)
	c := newClient(t, srv.URL, Config{})

	if r := send(t, c, one("k1"))[0]; !r.Accepted {
		t.Fatalf("first send: %+v", r)
	}
	// k2 goes out on the kept-alive connection of k1, which then breaks.
	if r := send(t, c, one("k2"))[0]; r.Category != provider.Uncertain {
		t.Fatalf("second send: %+v, want uncertain", r)
	}
	mu.Lock()
	defer mu.Unlock()
	if calls["k2"] != 1 {
		t.Fatalf("the server saw k2 %d times, want 1", calls["k2"])
	}
}
