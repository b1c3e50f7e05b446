// Package wecomapi is the provider adapter for the wecomapi HTTP protocol
// (WeCom accounts behind a unified API; the mock provider speaks it too).
//
// A single recipient goes to POST /message/sendText with its message key in
// the Idempotency-Key header; several go to POST /message/send with the keys
// in the body. Every outcome is classified into a provider.Category:
//
//   - errcode 0: accepted;
//   - 45009, 45033 (and HTTP 429): RateLimited;
//   - -1, HTTP 503 and 501, and any errcode the adapter does not know:
//     Retryable (the provider answered and refused, so nothing was
//     delivered);
//   - other HTTP 5xx without an errcode (502, 504, 500: a gateway may
//     answer them after the provider processed the call): Uncertain;
//   - 40001, 40014, 41001, 42001 (and HTTP 401/403): AccountDown;
//   - 40003, 81013 and the other recipient, content and permission codes
//     (and other HTTP 4xx): Permanent;
//   - no answer and the request never fully written (connection refused,
//     dial timeout, DNS): Retryable;
//   - the request written and then no usable answer (response timeout,
//     connection reset, truncated or unreadable body): Uncertain.
//
// "Written" is observed with net/http/httptrace (WroteRequest), and the
// adapter forbids net/http from replaying a request once its body has been
// read, so one Send is at most one delivery attempt.
package wecomapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/provider"
	"github.com/qunfa/qunfa/internal/provider/httpcall"
)

var _ provider.Provider = (*Client)(nil)

// ErrInvalidRequest is returned by Send and Status for a request that
// cannot be sent as given (no account, no recipient, keys not matching
// recipients, empty content or key); nothing was sent.
var ErrInvalidRequest = errors.New("wecomapi: invalid request")

// errCallTimeout is the cause of a call cut off by the adapter's own
// overall deadline.
var errCallTimeout = errors.New("wecomapi: call deadline exceeded")

// maxAnswer bounds the answer body the adapter reads.
const maxAnswer = 1 << 20

// Config configures a Client.
type Config struct {
	// BaseURL is the provider's root, e.g. http://127.0.0.1:8081.
	BaseURL string
	// Token is the API credential, sent as "Authorization: Bearer". It is
	// never logged: Config's String and LogValue redact it.
	Token string
	// ConnectTimeout bounds dialing (and TLS); default 3 s.
	ConnectTimeout time.Duration
	// ResponseTimeout bounds the wait for the answer once the request is
	// written; default 10 s. A Send never lasts longer than
	// ConnectTimeout + 2 × ResponseTimeout (the second ResponseTimeout
	// bounds reading the body), so a status look-up made later than that
	// cannot race the call.
	ResponseTimeout time.Duration
	// MaxIdleConnsPerHost is how many keep-alive connections are kept to
	// the provider; default 128 (the sender runs up to ~64 calls at once).
	MaxIdleConnsPerHost int
	// Logger receives failure logs (default: slog.Default()).
	Logger *slog.Logger
	// Credentials, when set, gives the token of each call at run time:
	// the token of the tenant owning the call's account (Owners), else the
	// deployment's default. Wrap it in credcache. A token the provider
	// refuses (an authentication error) is reported with Invalidate, and
	// the call is made once more if the secret now holds another token.
	// When nil, Token is used for every call.
	Credentials provider.Credentials
	// Owners maps a provider account to the tenant owning it
	// (store.TenantStore). Nil: every account uses the default credential.
	Owners AccountOwners
	// Clock times the cache of the accounts' owners (default: the system
	// clock).
	Clock clock.Clock
	// WrapHTTP, when set, wraps the HTTP client the adapter builds (the
	// Lambda functions' X-Ray tracing).
	WrapHTTP func(*http.Client) *http.Client
}

// AccountOwners tells which tenant owns a provider account
// (store.ErrNotFound when nobody does).
type AccountOwners interface {
	AccountOwner(ctx context.Context, account string) (string, error)
}

// LogValue lets slog print a Config without its token.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("base_url", c.BaseURL),
		slog.String("token", redact(c.Token)),
		slog.Duration("connect_timeout", c.ConnectTimeout),
		slog.Duration("response_timeout", c.ResponseTimeout),
		slog.Int("max_idle_conns_per_host", c.MaxIdleConnsPerHost),
		slog.Bool("run_time_credentials", c.Credentials != nil),
	)
}

// String prints a Config without its token.
func (c Config) String() string {
	return fmt.Sprintf("wecomapi.Config{BaseURL: %q, Token: %s, ConnectTimeout: %s, ResponseTimeout: %s, MaxIdleConnsPerHost: %d}",
		c.BaseURL, redact(c.Token), c.ConnectTimeout, c.ResponseTimeout, c.MaxIdleConnsPerHost)
}

// GoString prints a Config for %#v without its token.
func (c Config) GoString() string { return c.String() }

func redact(secret string) string {
	if secret == "" {
		return "(none)"
	}
	return "[REDACTED]"
}

func (c Config) withDefaults() Config {
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = 3 * time.Second
	}
	if c.ResponseTimeout == 0 {
		c.ResponseTimeout = 10 * time.Second
	}
	if c.MaxIdleConnsPerHost == 0 {
		c.MaxIdleConnsPerHost = 128
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Clock == nil {
		c.Clock = clock.System{}
	}
	return c
}

func (c Config) validate() error {
	var errs []error
	u, err := url.Parse(c.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, fmt.Errorf("base URL %q must be an absolute http(s) URL", c.BaseURL))
	}
	if c.ConnectTimeout < 0 {
		errs = append(errs, errors.New("connect timeout must not be negative"))
	}
	if c.ResponseTimeout < 0 {
		errs = append(errs, errors.New("response timeout must not be negative"))
	}
	if c.MaxIdleConnsPerHost < 0 {
		errs = append(errs, errors.New("max idle connections per host must not be negative"))
	}
	return errors.Join(errs...)
}

// Client is the wecomapi provider adapter. It is safe for concurrent use.
type Client struct {
	cfg    Config
	base   string // BaseURL without a trailing slash
	http   *http.Client
	owners *ownerCache
}

// New builds a Client with its own tuned transport.
func New(cfg Config) (*Client, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("wecomapi config: %w", err)
	}
	dialer := &net.Dialer{Timeout: cfg.ConnectTimeout, KeepAlive: 30 * time.Second}
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           dialer.DialContext,
		ForceAttemptHTTP2:     true,
		TLSHandshakeTimeout:   cfg.ConnectTimeout,
		ResponseHeaderTimeout: cfg.ResponseTimeout,
		MaxIdleConns:          2 * cfg.MaxIdleConnsPerHost,
		MaxIdleConnsPerHost:   cfg.MaxIdleConnsPerHost,
		// Shorter than the usual server idle timeouts, so the client drops
		// a keep-alive connection before the server does: a request
		// written into a connection the server just closed comes back as
		// Uncertain.
		IdleConnTimeout: 30 * time.Second,
	}
	return &Client{
		cfg:    cfg,
		owners: newOwnerCache(cfg.Owners, cfg.Clock),
		base:   strings.TrimRight(cfg.BaseURL, "/"),
		http: httpcall.Wrap(cfg.WrapHTTP, &http.Client{
			Transport: tr,
			// A redirected POST could be sent twice; take the answer as it is.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}),
	}, nil
}

// Close drops the idle keep-alive connections.
func (c *Client) Close() error {
	c.http.CloseIdleConnections()
	return nil
}

type sendTextBody struct {
	GUID    string `json:"guid"`
	ToID    string `json:"toId"`
	Content string `json:"content"`
}

type sendMultiBody struct {
	GUID    string   `json:"guid"`
	ToIDs   []string `json:"toIds"`
	Content string   `json:"content"`
	Keys    []string `json:"keys"`
}

// answer is every field any wecomapi answer may carry.
type answer struct {
	Errcode *int     `json:"errcode"`
	Errmsg  string   `json:"errmsg"`
	MsgID   string   `json:"msgid"`
	Status  string   `json:"status"`
	Results []result `json:"results"`
	Invalid []string `json:"invalid"`
}

type result struct {
	ToID    string `json:"toId"`
	Errcode int    `json:"errcode"`
	Errmsg  string `json:"errmsg"`
	MsgID   string `json:"msgid"`
}

// Send delivers req.Content to req.To (see provider.Provider). Call-level
// failures come back as the same result for every recipient. If ctx ends
// during the call, Send returns the per-recipient results (Uncertain when
// the request had been written, Retryable when not) together with ctx's
// error.
func (c *Client) Send(ctx context.Context, req provider.SendRequest) (provider.SendResult, error) {
	if err := validateSend(req); err != nil {
		return provider.SendResult{}, err
	}
	var (
		path, key string
		body      any
	)
	if len(req.To) == 1 {
		path, key = "/message/sendText", req.Keys[0]
		body = sendTextBody{GUID: req.Account, ToID: req.To[0], Content: req.Content}
	} else {
		path = "/message/send"
		body = sendMultiBody{GUID: req.Account, ToIDs: req.To, Content: req.Content, Keys: req.Keys}
	}
	raw, err := json.Marshal(body)
	if err != nil {
		return provider.SendResult{}, fmt.Errorf("%w: encode body: %v", ErrInvalidRequest, err)
	}
	cred, err := c.credential(ctx, req.Account)
	if err != nil {
		// Nothing went out: retry later, when the secret may be readable.
		c.cfg.Logger.Warn("wecomapi provider credentials unavailable",
			slog.String("account", req.Account), slog.Any("err", err))
		res := same(len(req.To), provider.RecipientResult{Category: provider.Retryable, Message: "provider credentials unavailable"})
		if ctxErr := ctx.Err(); ctxErr != nil {
			return res, fmt.Errorf("wecomapi send: %w", ctxErr)
		}
		return res, nil
	}
	ex := c.call(ctx, cred, http.MethodPost, path, key, raw)
	if ex.err != nil {
		cat := provider.Retryable
		if ex.wrote {
			cat = provider.Uncertain
		}
		if cat == provider.Uncertain {
			c.cfg.Logger.Warn("wecomapi call went out without an answer",
				slog.String("account", req.Account), slog.Int("recipients", len(req.To)), slog.Any("err", ex.err))
		}
		res := same(len(req.To), provider.RecipientResult{Category: cat, Message: ex.err.Error()})
		if ctxErr := ctx.Err(); ctxErr != nil {
			return res, fmt.Errorf("wecomapi send: %w", ctxErr)
		}
		return res, nil
	}
	return interpret(req, ex), nil
}

func validateSend(req provider.SendRequest) error {
	var errs []error
	if req.Account == "" {
		errs = append(errs, errors.New("account is empty"))
	}
	if len(req.To) == 0 {
		errs = append(errs, errors.New("no recipient"))
	}
	if len(req.Keys) != len(req.To) {
		errs = append(errs, fmt.Errorf("%d keys for %d recipients", len(req.Keys), len(req.To)))
	}
	for i, to := range req.To {
		if to == "" {
			errs = append(errs, fmt.Errorf("recipient %d is empty", i))
		}
	}
	if req.Content == "" {
		errs = append(errs, errors.New("content is empty"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	return nil
}

// interpret turns an answered call into one result per recipient.
func interpret(req provider.SendRequest, ex exchange) provider.SendResult {
	n := len(req.To)
	ans, parseErr := ex.ans, ex.parseErr
	if ex.status != http.StatusOK {
		code := "http_" + strconv.Itoa(ex.status)
		msg := http.StatusText(ex.status)
		cat := classifyHTTPStatus(ex.status)
		if parseErr == nil && ans.Errcode != nil {
			code, msg = strconv.Itoa(*ans.Errcode), ans.Errmsg
			if ex.status >= 500 {
				// The provider itself answered and said what it did.
				cat = classifyCode(*ans.Errcode)
			}
		}
		return same(n, provider.RecipientResult{Category: cat, Code: code, Message: msg})
	}
	if parseErr != nil || ans.Errcode == nil {
		// A 200 we cannot read may well be an acceptance.
		return same(n, provider.RecipientResult{Category: provider.Uncertain, Message: "unreadable answer: " + snippet(ex.body)})
	}
	if *ans.Errcode != codeOK {
		return same(n, refused(*ans.Errcode, ans.Errmsg))
	}
	if n == 1 {
		return provider.SendResult{Recipients: []provider.RecipientResult{{Accepted: true, MsgID: ans.MsgID}}}
	}
	return perRecipient(req, ans)
}

// perRecipient reads a /message/send answer whose errcode is 0. Results
// are matched to recipients by position and checked by toId; a recipient
// the answer does not account for is Uncertain (the call was accepted, so
// it may have been delivered) unless it is listed as invalid.
func perRecipient(req provider.SendRequest, ans answer) provider.SendResult {
	invalid := make(map[string]bool, len(ans.Invalid))
	for _, to := range ans.Invalid {
		invalid[to] = true
	}
	out := make([]provider.RecipientResult, len(req.To))
	for i, to := range req.To {
		switch {
		case i < len(ans.Results) && ans.Results[i].ToID == to:
			r := ans.Results[i]
			if r.Errcode == codeOK {
				out[i] = provider.RecipientResult{Accepted: true, MsgID: r.MsgID}
			} else {
				out[i] = refused(r.Errcode, r.Errmsg)
			}
		case invalid[to]:
			out[i] = provider.RecipientResult{Category: provider.Permanent, Code: strconv.Itoa(codeInvalidRecipient), Message: "listed as invalid"}
		default:
			out[i] = provider.RecipientResult{Category: provider.Uncertain, Message: "the answer has no result for this recipient"}
		}
	}
	return provider.SendResult{Recipients: out}
}

func refused(code int, msg string) provider.RecipientResult {
	return provider.RecipientResult{Category: classifyCode(code), Code: strconv.Itoa(code), Message: msg}
}

func same(n int, r provider.RecipientResult) provider.SendResult {
	out := make([]provider.RecipientResult, n)
	for i := range out {
		out[i] = r
	}
	return provider.SendResult{Recipients: out}
}

func snippet(b []byte) string {
	const max = 200
	if len(b) > max {
		return string(b[:max]) + "…"
	}
	return string(b)
}

// Status looks a message key up with GET /message/status.
func (c *Client) Status(ctx context.Context, req provider.StatusRequest) (provider.Status, error) {
	if req.Key == "" {
		return "", fmt.Errorf("%w: key is empty", ErrInvalidRequest)
	}
	q := url.Values{"key": {req.Key}}
	if req.Account != "" {
		q.Set("guid", req.Account)
	}
	cred, err := c.credential(ctx, req.Account)
	if err != nil {
		return "", fmt.Errorf("wecomapi status %s: %w", req.Key, err)
	}
	ex := c.call(ctx, cred, http.MethodGet, "/message/status?"+q.Encode(), "", nil)
	if ex.err != nil {
		return "", fmt.Errorf("wecomapi status %s: %w", req.Key, ex.err)
	}
	if ex.status == http.StatusNotFound {
		// The account's provider has no look-up (DESIGN.md "Providers").
		return "", fmt.Errorf("wecomapi status %s: HTTP 404: %w", req.Key, provider.ErrStatusUnsupported)
	}
	if ex.status != http.StatusOK {
		return "", fmt.Errorf("wecomapi status %s: HTTP %d: %s", req.Key, ex.status, snippet(ex.body))
	}
	ans := ex.ans
	if ex.parseErr != nil || ans.Errcode == nil {
		return "", fmt.Errorf("wecomapi status %s: unreadable answer: %s", req.Key, snippet(ex.body))
	}
	if *ans.Errcode != codeOK {
		return "", fmt.Errorf("wecomapi status %s: errcode %d: %s", req.Key, *ans.Errcode, ans.Errmsg)
	}
	switch provider.Status(ans.Status) {
	case provider.StatusDelivered:
		return provider.StatusDelivered, nil
	case provider.StatusUnknown:
		return provider.StatusUnknown, nil
	default:
		// Anything else is not a "never accepted": resending on it could
		// deliver twice.
		return "", fmt.Errorf("wecomapi status %s: unexpected status %q", req.Key, ans.Status)
	}
}

// exchange is one HTTP round trip: either an answer (status and body) or
// err, with wrote telling whether the request had been fully written.
type exchange struct {
	status int
	body   []byte
	wrote  bool
	err    error

	ans      answer // body decoded (as far as it decodes: see parseErr)
	parseErr error  // json.Unmarshal's error for body
}

func (c *Client) exchange(ctx context.Context, token, method, path, key string, body []byte) exchange {
	callCtx, cancel := context.WithTimeoutCause(ctx, c.cfg.ConnectTimeout+2*c.cfg.ResponseTimeout, errCallTimeout)
	defer cancel()
	var wrote atomic.Bool
	callCtx = httptrace.WithClientTrace(callCtx, &httptrace.ClientTrace{
		WroteRequest: func(info httptrace.WroteRequestInfo) {
			if info.Err == nil {
				wrote.Store(true)
			}
		},
	})
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	hreq, err := http.NewRequestWithContext(callCtx, method, c.base+path, rd)
	if err != nil {
		return exchange{err: fmt.Errorf("%w: %v", ErrInvalidRequest, err)}
	}
	// Without GetBody net/http cannot replay the request on another
	// connection once the body has been read: at most one delivery per
	// call, whatever the Idempotency-Key header makes it believe.
	hreq.GetBody = nil
	if body != nil {
		hreq.Header.Set("Content-Type", "application/json")
	}
	hreq.Header.Set("Accept", "application/json")
	if key != "" {
		hreq.Header.Set("Idempotency-Key", key)
	}
	if token != "" {
		hreq.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.http.Do(hreq)
	if err != nil {
		return exchange{wrote: wrote.Load(), err: describe(callCtx, err)}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		// The answer started: the request was certainly written.
		return exchange{wrote: true, err: fmt.Errorf("read answer: %w", describe(callCtx, err))}
	}
	return answered(resp.StatusCode, b)
}

// answered is the exchange of a call the provider answered with status and
// body, the body decoded once for every reader of the answer.
func answered(status int, body []byte) exchange {
	ex := exchange{status: status, body: body, wrote: true}
	ex.parseErr = decodeAnswer(body, &ex.ans)
	return ex
}

// describe names the adapter's own deadline when it is what ended a call.
func describe(callCtx context.Context, err error) error {
	if errors.Is(context.Cause(callCtx), errCallTimeout) {
		return fmt.Errorf("%w: %w", errCallTimeout, err)
	}
	return err
}
