package httpprovider

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
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

type fixture struct {
	mock   *mockprovider.Mock
	secret *providertest.Secret
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
	sec := providertest.NewSecret("tok-1")
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
			return providertest.Fixture{Provider: f.client, Unreachable: configured{Client: f.client.Client, cfg: smsGateway(providertest.ClosedURL(t))},
				Mock: &providertest.MockProvider{Mock: f.mock, Secret: f.secret, CodePrefix: "http_"}}
		},
		Codes:      codes,
		MaxPerCall: provider.KindHTTP.MaxPerCall(),
	})
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
