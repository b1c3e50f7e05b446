// Package httpprovider is the generic HTTP provider adapter (SMS
// gateways, in-house senders): one request per recipient, built from the
// account's store.HTTPProvider (URL, method, headers, body template), and
// classified by which HTTP statuses the account says mean accepted, rate
// limited or permanent. Everything else is read as for every provider:
// 501/503 Retryable, other 5xx Uncertain (a gateway may answer them after
// the message went out), 401/403 AccountDown, 429 RateLimited, other 4xx
// Permanent; no answer is Retryable before the request was written and
// Uncertain after.
//
// Templates: {{to}}, {{content}}, {{key}} (the message key, for a
// provider that de-duplicates on it), {{account}}; header values may also
// hold {{secret}}, the tenant's credential for the provider, which is
// never logged. In a JSON body the values are JSON-escaped, in a form body
// URL-encoded.
//
// The provider has no status look-up: an item whose answer is lost goes
// to review.
package httpprovider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/qunfa/qunfa/internal/netguard"
	"github.com/qunfa/qunfa/internal/provider"
	"github.com/qunfa/qunfa/internal/provider/httpcall"
	"github.com/qunfa/qunfa/internal/store"
)

var _ provider.Provider = (*Client)(nil)

// ErrInvalidRequest is returned for a call that cannot be made as given
// (no configuration, more than one recipient); nothing was sent.
var ErrInvalidRequest = errors.New("httpprovider: invalid request")

// Config configures a Client.
type Config struct {
	// Credentials gives {{secret}}: the credential of the tenant owning
	// the account (nil: empty).
	Credentials provider.Credentials
	// Timeouts bound each call.
	Timeouts httpcall.Timeouts
	// AllowPrivate lets the URLs reach loopback and private addresses
	// (local testing only): they are tenant-given.
	AllowPrivate bool
	// Logger receives failure logs (default: slog.Default()).
	Logger *slog.Logger
	// WrapHTTP, when set, wraps the HTTP client the adapter builds (the
	// Lambda functions' X-Ray tracing).
	WrapHTTP func(*http.Client) *http.Client
}

// Client is the adapter; safe for concurrent use.
type Client struct {
	cfg  Config
	http *http.Client
}

// New builds a Client. Unless AllowPrivate, its connections reach only
// public addresses.
func New(cfg Config) *Client {
	cfg.Timeouts = cfg.Timeouts.WithDefaults()
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	hc := httpcall.NewClient(cfg.Timeouts)
	if !cfg.AllowPrivate {
		tr := hc.Transport.(*http.Transport)
		dialer := &net.Dialer{Timeout: cfg.Timeouts.Connect, KeepAlive: 30 * time.Second, Control: netguard.Control}
		tr.DialContext = dialer.DialContext
		tr.Proxy = nil // a proxy would dial for us, past the guard
	}
	return &Client{cfg: cfg, http: httpcall.Wrap(cfg.WrapHTTP, hc)}
}

// Close drops idle connections.
func (c *Client) Close() error {
	c.http.CloseIdleConnections()
	return nil
}

// Send needs the account's configuration: see SendFor.
func (c *Client) Send(context.Context, provider.SendRequest) (provider.SendResult, error) {
	return provider.SendResult{}, fmt.Errorf("%w: the http provider sends with its account's configuration (SendFor)", ErrInvalidRequest)
}

// Status: a generic HTTP provider has no look-up.
func (c *Client) Status(context.Context, provider.StatusRequest) (provider.Status, error) {
	return "", fmt.Errorf("http provider: %w", provider.ErrStatusUnsupported)
}

// SendFor sends req with account a's configuration: one recipient.
func (c *Client) SendFor(ctx context.Context, a store.Account, req provider.SendRequest) (provider.SendResult, error) {
	if a.HTTP == nil {
		return provider.SendResult{}, fmt.Errorf("%w: account %s has no http configuration", ErrInvalidRequest, a.ID)
	}
	if len(req.To) != 1 || len(req.Keys) != 1 {
		return provider.SendResult{}, fmt.Errorf("%w: one recipient and one key per call, got %d and %d", ErrInvalidRequest, len(req.To), len(req.Keys))
	}
	h := a.HTTP
	vars := map[string]string{"to": req.To[0], "content": req.Content, "key": req.Keys[0], "account": req.Account, "secret": ""}
	needSecret := false
	for _, v := range h.Headers {
		needSecret = needSecret || strings.Contains(v, "{{secret}}")
	}
	if !needSecret || c.cfg.Credentials == nil {
		return c.call(ctx, a, vars), nil
	}
	sec, err := c.cfg.Credentials.Token(ctx, a.Tenant)
	if err != nil && !errors.Is(err, provider.ErrNoCredentials) {
		c.cfg.Logger.Warn("http provider credentials unavailable", slog.String("account", a.ID), slog.Any("err", err))
		return httpcall.Same(1, provider.RecipientResult{Category: provider.Retryable, Message: "provider credentials unavailable"}), ctx.Err()
	}
	vars["secret"] = sec
	res := c.call(ctx, a, vars)
	if res.Recipients[0].Category != provider.AccountDown {
		return res, ctx.Err()
	}
	// The provider refused the credential (401/403: nothing was sent):
	// read it again, and call once more if it was rotated.
	c.cfg.Credentials.Invalidate(ctx, a.Tenant, sec)
	if again, err := c.cfg.Credentials.Token(ctx, a.Tenant); err == nil && again != sec {
		vars["secret"] = again
		res = c.call(ctx, a, vars)
	}
	return res, ctx.Err()
}

// call makes one request of account a with the template values.
func (c *Client) call(ctx context.Context, a store.Account, vars map[string]string) provider.SendResult {
	h := a.HTTP
	header := http.Header{}
	for name, v := range h.Headers {
		header.Set(name, render(v, vars, nil))
	}
	var body []byte
	if h.Body != "" {
		body = []byte(render(h.Body, vars, escaperFor(header.Get("Content-Type"))))
	}
	method := h.Method
	if method == "" {
		method = http.MethodPost
	}
	ex := httpcall.Do(ctx, c.http, c.cfg.Timeouts, method, render(h.URL, vars, url.QueryEscape), header, body)
	if ex.Err != nil {
		if ex.Wrote {
			c.cfg.Logger.Warn("http provider call went out without an answer", slog.String("account", a.ID), slog.Any("err", ex.Err))
		}
		return httpcall.Same(1, provider.RecipientResult{Category: ex.Category(), Message: ex.Err.Error()})
	}
	return provider.SendResult{Recipients: []provider.RecipientResult{classify(h, ex)}}
}

// classify reads an answered call.
func classify(h *store.HTTPProvider, ex httpcall.Exchange) provider.RecipientResult {
	code := "http_" + strconv.Itoa(ex.Status)
	switch {
	case slices.Contains(h.Accepted, ex.Status):
		return provider.RecipientResult{Accepted: true, MsgID: msgID(h.MsgIDField, ex.Body)}
	case slices.Contains(h.RateLimited, ex.Status):
		return provider.RecipientResult{Category: provider.RateLimited, Code: code, Message: httpcall.Snippet(ex.Body)}
	case slices.Contains(h.Permanent, ex.Status):
		return provider.RecipientResult{Category: provider.Permanent, Code: code, Message: httpcall.Snippet(ex.Body)}
	}
	var cat provider.Category
	switch st := ex.Status; {
	case st == http.StatusServiceUnavailable || st == http.StatusNotImplemented:
		cat = provider.Retryable
	case st >= 500:
		cat = provider.Uncertain
	case st == http.StatusTooManyRequests:
		cat = provider.RateLimited
	case st == http.StatusUnauthorized || st == http.StatusForbidden:
		cat = provider.AccountDown
	case st >= 200 && st < 300:
		// A success the account did not list: it may have been sent.
		cat = provider.Uncertain
	default:
		cat = provider.Permanent
	}
	return provider.RecipientResult{Category: cat, Code: code, Message: httpcall.Snippet(ex.Body)}
}

// msgID reads field from a JSON answer ("" when absent).
func msgID(field string, body []byte) string {
	if field == "" {
		return ""
	}
	var m map[string]any
	if json.Unmarshal(body, &m) != nil {
		return ""
	}
	switch v := m[field].(type) {
	case string:
		return v
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	return ""
}

// escaperFor picks how values are escaped in a body of contentType.
func escaperFor(contentType string) func(string) string {
	mt, _, _ := mime.ParseMediaType(contentType)
	switch {
	case mt == "application/x-www-form-urlencoded":
		return url.QueryEscape
	case mt == "application/json" || strings.HasSuffix(mt, "+json"):
		return jsonEscape
	}
	return nil
}

func jsonEscape(s string) string {
	b, _ := json.Marshal(s)
	return string(b[1 : len(b)-1])
}

// render replaces {{name}} by vars[name], escaped by esc when set.
func render(tmpl string, vars map[string]string, esc func(string) string) string {
	var b strings.Builder
	for {
		i := strings.Index(tmpl, "{{")
		if i < 0 {
			b.WriteString(tmpl)
			return b.String()
		}
		j := strings.Index(tmpl[i:], "}}")
		if j < 0 {
			b.WriteString(tmpl)
			return b.String()
		}
		b.WriteString(tmpl[:i])
		name := strings.TrimSpace(tmpl[i+2 : i+j])
		v, ok := vars[name]
		switch {
		case !ok:
			b.WriteString(tmpl[i : i+j+2])
		case esc != nil:
			b.WriteString(esc(v))
		default:
			b.WriteString(v)
		}
		tmpl = tmpl[i+j+2:]
	}
}
