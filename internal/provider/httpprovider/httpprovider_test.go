package httpprovider

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/mockprovider"
	"github.com/qunfa/qunfa/internal/provider"
	"github.com/qunfa/qunfa/internal/provider/credcache"
	"github.com/qunfa/qunfa/internal/provider/httpcall"
	"github.com/qunfa/qunfa/internal/provider/providertest"
	"github.com/qunfa/qunfa/internal/store"
)

var quiet = slog.New(slog.DiscardHandler)

// smsGateway is the account configuration for the mock's SMS gateway.
func smsGateway(base string) *store.HTTPProvider {
	return &store.HTTPProvider{
		URL:         base + "/sms/send",
		Method:      "POST",
		Headers:     map[string]string{"Content-Type": "application/json", "Authorization": "Bearer {{secret}}"},
		Body:        `{"account": "{{account}}", "to": "{{to}}", "content": "{{content}}", "key": "{{key}}"}`,
		Accepted:    []int{200},
		RateLimited: []int{429},
		Permanent:   []int{400, 404},
		MsgIDField:  "id",
	}
}

// configured is the adapter as the router calls it: with the account's
// configuration.
type configured struct {
	*Client
	cfg *store.HTTPProvider
}

func (c configured) Send(ctx context.Context, req provider.SendRequest) (provider.SendResult, error) {
	return c.SendFor(ctx, store.Account{Tenant: "tenant-a", ID: req.Account, Provider: "http", HTTP: c.cfg}, req)
}

type secret struct {
	mu sync.Mutex
	s  string
}

func (s *secret) Token(context.Context, string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.s, nil
}
func (s *secret) Invalidate(context.Context, string, string) {}
func (s *secret) set(v string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.s = v
}

type fixture struct {
	mock   *mockprovider.Mock
	secret *secret
	client configured
	logDir string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	dir := t.TempDir()
	m, err := mockprovider.New(mockprovider.Config{Protocol: mockprovider.ProtocolHTTP, Logger: quiet, LogPath: filepath.Join(dir, "d.jsonl")})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(m.Handler())
	t.Cleanup(srv.Close)
	t.Cleanup(func() { _ = m.Close() })
	sec := &secret{s: "tok-1"}
	c := New(Config{AllowPrivate: true, Logger: quiet,
		Credentials: credcache.New(sec, credcache.Options{Clock: clock.NewFake(time.Unix(1_700_000_000, 0)), Log: quiet}),
		Timeouts:    httpcall.Timeouts{Connect: 200 * time.Millisecond, Response: 200 * time.Millisecond}})
	t.Cleanup(func() { _ = c.Close() })
	return &fixture{mock: m, secret: sec, client: configured{Client: c, cfg: smsGateway(srv.URL)}, logDir: dir}
}

func TestConformance(t *testing.T) {
	t.Parallel()
	var codes []providertest.Code
	for status, cat := range map[int]provider.Category{
		429: provider.RateLimited, 400: provider.Permanent, 404: provider.Permanent, 422: provider.Permanent,
		401: provider.AccountDown, 403: provider.AccountDown, 503: provider.Retryable, 501: provider.Retryable,
		500: provider.Uncertain, 502: provider.Uncertain,
	} {
		codes = append(codes, providertest.Code{Code: "http_" + strconv.Itoa(status), Category: cat})
	}
	providertest.Run(t, providertest.Adapter{
		New: func(t *testing.T) providertest.Fixture {
			f := newFixture(t)
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			closed := "http://" + ln.Addr().String()
			_ = ln.Close()
			return providertest.Fixture{Provider: f.client, Unreachable: configured{Client: f.client.Client, cfg: smsGateway(closed)}, Mock: &driver{f}}
		},
		Codes:      codes,
		MaxPerCall: provider.KindHTTP.MaxPerCall(),
	})
}

type driver struct{ f *fixture }

func (d *driver) change(t *testing.T, account string, fn func(*mockprovider.Behaviour)) {
	t.Helper()
	b := d.f.mock.Behaviour(account)
	fn(&b)
	if err := d.f.mock.SetBehaviour(account, b); err != nil {
		t.Fatal(err)
	}
}

func (d *driver) Deliveries(account string) int { return int(d.f.mock.Stats()[account].Accepted) }

func (d *driver) Refuse(t *testing.T, account, code string) {
	n, err := strconv.Atoi(strings.TrimPrefix(code, "http_"))
	if err != nil {
		t.Fatal(err)
	}
	d.change(t, account, func(b *mockprovider.Behaviour) { b.Errors = []mockprovider.InjectedError{{Errcode: n, Ratio: 1}} })
}

func (d *driver) InvalidRecipient(t *testing.T, account, to string) {
	d.change(t, account, func(b *mockprovider.Behaviour) { b.InvalidToIDs = append(b.InvalidToIDs, to) })
}

func (d *driver) HoldAnswers(t *testing.T, account string) {
	d.change(t, account, func(b *mockprovider.Behaviour) { b.TimeoutRatio = 1 })
}

// ExpireCredential makes the gateway take only a new key; renewable puts
// it in the secret (a rotation the cached adapter has not seen).
func (d *driver) ExpireCredential(t *testing.T, account string, renewable bool) {
	d.change(t, account, func(b *mockprovider.Behaviour) { b.Token = "tok-2" })
	if renewable {
		d.f.secret.set("tok-2")
	}
}

func TestBodyValuesAreEscapedAndTheSecretStaysInTheHeader(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	content := "line one\n\"quoted\" {{key}} & more"
	res, err := f.client.Send(t.Context(), provider.SendRequest{Account: "sms-a", To: []string{"+8613800000000"}, Keys: []string{"job:1"}, Content: content})
	if err != nil || !res.Recipients[0].Accepted || res.Recipients[0].MsgID == "" {
		t.Fatalf("Send = %+v, %v; want accepted with the gateway's id", res, err)
	}
	raw, err := os.ReadFile(filepath.Join(f.logDir, "d.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var ds []mockprovider.Delivery
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var d mockprovider.Delivery
		if err := json.Unmarshal([]byte(line), &d); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		ds = append(ds, d)
	}
	if len(ds) != 1 || ds[0].Content != content || ds[0].ToID != "+8613800000000" || ds[0].Key != "job:1" {
		t.Fatalf("delivered %+v; want the content byte for byte, the recipient and the key", ds)
	}
}

func TestPrivateAddressesAreRefusedUnlessAllowed(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	guarded := New(Config{Logger: quiet, Timeouts: httpcall.Timeouts{Connect: 200 * time.Millisecond, Response: 200 * time.Millisecond}})
	res, err := guarded.SendFor(t.Context(), store.Account{ID: "sms-b", HTTP: f.client.cfg},
		provider.SendRequest{Account: "sms-b", To: []string{"u"}, Keys: []string{"k"}, Content: "hi"})
	if err != nil || res.Recipients[0].Accepted || res.Recipients[0].Category != provider.Retryable {
		t.Fatalf("Send to 127.0.0.1 = %+v, %v; want retryable, nothing sent", res, err)
	}
	if n := f.mock.Stats()["sms-b"].Calls; n != 0 {
		t.Fatalf("the gateway on a private address got %d calls", n)
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	good := smsGateway("https://sms.example.com")
	if err := good.Validate(); err != nil {
		t.Fatalf("good.Validate() = %v", err)
	}
	for name, mutate := range map[string]func(h *store.HTTPProvider){
		"relative url":     func(h *store.HTTPProvider) { h.URL = "/send" },
		"method":           func(h *store.HTTPProvider) { h.Method = "DELETE" },
		"secret in body":   func(h *store.HTTPProvider) { h.Body = `{"k": "{{secret}}"}` },
		"nothing accepted": func(h *store.HTTPProvider) { h.Accepted = nil },
		"bad status":       func(h *store.HTTPProvider) { h.Permanent = []int{42} },
		"bad header":       func(h *store.HTTPProvider) { h.Headers = map[string]string{"X Bad": "v"} },
	} {
		h := *good
		mutate(&h)
		if err := h.Validate(); err == nil {
			t.Errorf("%s: Validate accepted %+v", name, h)
		}
	}
	if err := (*store.HTTPProvider)(nil).Validate(); err == nil {
		t.Error("(*store.HTTPProvider)(nil).Validate() accepted no configuration")
	}
}
