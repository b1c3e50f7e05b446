// Package wechatmp holds the provider adapters of WeChat Official
// Accounts (公众号). Template is the template-message adapter
// (message/template/send): one OpenID per call, the account's template
// with the message in its "content" field, a numeric msgid. Its access
// token (cgi-bin/token, client_credential) is cached for its lifetime and
// fetched again at once when a call answers 40001, 40014, 41001 or 42001.
//
// Template messages take no message key and have no status look-up: an
// accepted send answers a msgid and its delivery comes later as a
// TEMPLATESENDJOBFINISH event about it (WeChat names the app by its
// AppID), so the item stays submitted (RecipientResult.AwaitConfirm)
// until the event settles it; without one, and for an answer that is
// lost, it goes to review after the settle delay, never resent. 45009 is
// WeChat's daily quota: RateLimited, so the shard slows down and retries
// without using attempts.
package wechatmp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/provider"
	"github.com/qunfa/qunfa/internal/provider/accesstoken"
	"github.com/qunfa/qunfa/internal/provider/httpcall"
)

var _ provider.Provider = (*Template)(nil)

// ErrInvalidRequest is returned for a call that cannot be sent as given;
// nothing was sent.
var ErrInvalidRequest = errors.New("wechatmp: invalid request")

// DefaultBaseURL is WeChat's API root.
const DefaultBaseURL = "https://api.weixin.qq.com"

// Config configures an adapter.
type Config struct {
	// BaseURL is the API root (default DefaultBaseURL).
	BaseURL string
	// Credentials gives the AppSecret of the tenant owning a call's
	// account; Secret is used when nil. Never logged.
	Credentials provider.Credentials
	Secret      string
	// Owners maps an account to its tenant (nil: the default credential).
	Owners accesstoken.Owners
	// Timeouts bound each call.
	Timeouts httpcall.Timeouts
	// Clock times the access tokens (default: the system clock).
	Clock clock.Clock
	// Logger receives failure logs (default: slog.Default()).
	Logger *slog.Logger
	// WrapHTTP, when set, wraps the HTTP client the adapter builds (the
	// Lambda functions' X-Ray tracing).
	WrapHTTP func(*http.Client) *http.Client
}

// Codes maps the error codes of cgi-bin/token and message/template/send
// (WeChat's global return codes) to their categories. A code not listed
// is Retryable: refused, so not delivered, and bounded by the attempts.
var Codes = map[int]provider.Category{
	-1:    provider.Retryable,   // system busy
	40001: provider.AccountDown, // invalid secret or access token (after one refresh)
	40013: provider.AccountDown, // invalid appid
	40014: provider.AccountDown, // invalid access token (after one refresh)
	40164: provider.AccountDown, // caller IP not whitelisted
	41001: provider.AccountDown, // access token missing
	42001: provider.AccountDown, // access token expired (after one refresh)
	48001: provider.AccountDown, // API not authorised for the account
	40037: provider.AccountDown, // invalid template_id: every call of the account fails
	45009: provider.RateLimited, // daily API quota reached
	40003: provider.Permanent,   // invalid openid
	43004: provider.Permanent,   // the user does not follow the account
	43019: provider.Permanent,   // the user is on the account's blacklist
	47001: provider.Permanent,   // data format error
	47003: provider.Permanent,   // argument invalid (the template's fields)
	40130: provider.Permanent,   // mass send: fewer than 2 or more than 10,000 OpenIDs
	45028: provider.RateLimited, // mass send: no mass-send quota left
	45015: provider.Permanent,   // customer-service message: the user has not interacted within 48 hours
}

func classifyCode(code int) provider.Category {
	if cat, ok := Codes[code]; ok {
		return cat
	}
	return provider.Retryable
}

func tokenRefused(code int) bool {
	return code == 40001 || code == 40014 || code == 41001 || code == 42001
}

// ParseTemplateAccount splits a template account "<appid>:<template_id>".
func ParseTemplateAccount(account string) (appID, templateID string, err error) {
	appID, templateID, ok := strings.Cut(account, ":")
	if !ok || appID == "" || templateID == "" {
		return "", "", fmt.Errorf("account %q is not <appid>:<template_id>", account)
	}
	return appID, templateID, nil
}

// Template is the template-message adapter; safe for concurrent use.
type Template struct{ api *api }

// NewTemplate builds the template-message adapter.
func NewTemplate(cfg Config) (*Template, error) {
	a, err := newAPI(cfg)
	if err != nil {
		return nil, err
	}
	return &Template{api: a}, nil
}

// Close drops idle connections.
func (t *Template) Close() error {
	t.api.http.CloseIdleConnections()
	return nil
}

// Status: template messages have no look-up.
func (t *Template) Status(context.Context, provider.StatusRequest) (provider.Status, error) {
	return "", fmt.Errorf("wechat-mp-template: %w", provider.ErrStatusUnsupported)
}

type templateBody struct {
	ToUser     string                       `json:"touser"`
	TemplateID string                       `json:"template_id"`
	Data       map[string]map[string]string `json:"data"`
}

// Send sends req.Content to one OpenID with the account's template.
func (t *Template) Send(ctx context.Context, req provider.SendRequest) (provider.SendResult, error) {
	appID, templateID, err := ParseTemplateAccount(req.Account)
	switch {
	case err != nil:
		return provider.SendResult{}, fmt.Errorf("%w: %v", ErrInvalidRequest, err)
	case len(req.To) != 1 || len(req.Keys) != 1:
		return provider.SendResult{}, fmt.Errorf("%w: one OpenID per call, got %d", ErrInvalidRequest, len(req.To))
	case req.To[0] == "" || req.Content == "":
		return provider.SendResult{}, fmt.Errorf("%w: empty OpenID or content", ErrInvalidRequest)
	}
	body, err := json.Marshal(templateBody{ToUser: req.To[0], TemplateID: templateID,
		Data: map[string]map[string]string{"content": {"value": req.Content}}})
	if err != nil {
		return provider.SendResult{}, fmt.Errorf("%w: encode: %v", ErrInvalidRequest, err)
	}
	res, err := t.api.send(ctx, req.Account, appID, "/cgi-bin/message/template/send", body, 1)
	for i, r := range res.Recipients {
		if r.Accepted && r.MsgID != "" {
			// Delivered or not: TEMPLATESENDJOBFINISH tells.
			res.Recipients[i].AwaitConfirm, res.Recipients[i].EventAccount = true, appID
		}
	}
	return res, err
}

// api is what the Official Account adapters share: credentials, the
// access token, one call.
type api struct {
	cfg  Config
	base string
	http *http.Client

	tokens accesstoken.Cache // by appid and secret
}

func newAPI(cfg Config) (*api, error) {
	base, err := httpcall.BaseURL(cfg.BaseURL, DefaultBaseURL)
	if err != nil {
		return nil, fmt.Errorf("wechatmp config: %w", err)
	}
	cfg.Timeouts = cfg.Timeouts.WithDefaults()
	if cfg.Clock == nil {
		cfg.Clock = clock.System{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &api{cfg: cfg, base: base, http: httpcall.Wrap(cfg.WrapHTTP, httpcall.NewClient(cfg.Timeouts))}, nil
}

// answer is every field a WeChat answer may carry.
type answer struct {
	Errcode     *int        `json:"errcode"`
	Errmsg      string      `json:"errmsg"`
	AccessToken string      `json:"access_token"`
	ExpiresIn   int64       `json:"expires_in"`
	MsgID       json.Number `json:"msgid"`
	MassMsgID   json.Number `json:"msg_id"`
	MsgDataID   json.Number `json:"msg_data_id"`
	MsgStatus   string      `json:"msg_status"`
}

// app is the account's credentials for one call.
type app struct {
	appID, tenant, secret string
}

// send posts body to path with the app's access token; every one of the
// n recipients gets the call's outcome.
func (a *api) send(ctx context.Context, account, appID, path string, body []byte, n int) (provider.SendResult, error) {
	ap := app{appID: appID}
	var err error
	if ap.tenant, ap.secret, err = a.secret(ctx, account); err != nil {
		a.cfg.Logger.Warn("wechat-mp credentials unavailable", slog.String("account", account), slog.Any("err", err))
		return httpcall.Same(n, provider.RecipientResult{Category: provider.Retryable, Message: "provider credentials unavailable"}), ctx.Err()
	}
	for attempt := 0; ; attempt++ {
		tok, refused := a.accessToken(ctx, &ap, attempt > 0)
		if refused != nil {
			return httpcall.Same(n, *refused), ctx.Err()
		}
		ex := httpcall.Do(ctx, a.http, a.cfg.Timeouts, http.MethodPost, a.base+path+"?access_token="+url.QueryEscape(tok),
			http.Header{"Content-Type": {"application/json"}}, body)
		if ex.Err != nil {
			if ex.Wrote {
				a.cfg.Logger.Warn("wechat-mp call went out without an answer", slog.String("account", account), slog.Any("err", ex.Err))
			}
			return httpcall.Same(n, provider.RecipientResult{Category: ex.Category(), Message: ex.Err.Error()}), ctx.Err()
		}
		var ans answer
		parseErr := json.Unmarshal(ex.Body, &ans)
		if ex.Status == http.StatusOK && parseErr == nil && ans.Errcode != nil && tokenRefused(*ans.Errcode) && attempt == 0 {
			a.tokens.Drop(ap.appID, ap.secret, tok) // nothing was delivered: new token, once more
			continue
		}
		return httpcall.Same(n, interpret(ex, ans, parseErr)), nil
	}
}

// interpret reads an answered call.
func interpret(ex httpcall.Exchange, ans answer, parseErr error) provider.RecipientResult {
	switch {
	case ex.Status != http.StatusOK:
		cat := provider.Permanent
		switch st := ex.Status; {
		case st == http.StatusServiceUnavailable || st == http.StatusNotImplemented:
			cat = provider.Retryable
		case st >= 500:
			cat = provider.Uncertain // a gateway may answer after the call went through
		case st == http.StatusTooManyRequests:
			cat = provider.RateLimited
		case st == http.StatusUnauthorized || st == http.StatusForbidden:
			cat = provider.AccountDown
		}
		return provider.RecipientResult{Category: cat, Code: "http_" + strconv.Itoa(ex.Status), Message: httpcall.Snippet(ex.Body)}
	case parseErr != nil || ans.Errcode == nil:
		return provider.RecipientResult{Category: provider.Uncertain, Message: "unreadable answer: " + httpcall.Snippet(ex.Body)}
	case *ans.Errcode != 0:
		return provider.RecipientResult{Category: classifyCode(*ans.Errcode), Code: strconv.Itoa(*ans.Errcode), Message: ans.Errmsg}
	}
	id := ans.MsgID.String()
	if id == "" {
		id = ans.MassMsgID.String() // mass/send names it msg_id
	}
	return provider.RecipientResult{Accepted: true, MsgID: id}
}

// secret is the AppSecret of the account's owner.
func (a *api) secret(ctx context.Context, account string) (tenant, secret string, err error) {
	return accesstoken.Secret(ctx, a.cfg.Credentials, a.cfg.Secret, a.cfg.Owners, account)
}

// accessToken returns a live access token, from the cache unless fresh.
// A refusal (nothing sent) comes back as every recipient's result; a
// secret cgi-bin/token refuses is reported to Credentials and a rotated
// one tried once.
func (a *api) accessToken(ctx context.Context, ap *app, fresh bool) (string, *provider.RecipientResult) {
	now := a.cfg.Clock.Now()
	if !fresh {
		if tok, ok := a.tokens.Get(ap.appID, ap.secret, now); ok {
			return tok, nil
		}
	}
	for attempt := 0; ; attempt++ {
		q := url.Values{"grant_type": {"client_credential"}, "appid": {ap.appID}, "secret": {ap.secret}}
		ex := httpcall.Do(ctx, a.http, a.cfg.Timeouts, http.MethodGet, a.base+"/cgi-bin/token?"+q.Encode(), nil, nil)
		if ex.Err != nil {
			return "", &provider.RecipientResult{Category: provider.Retryable, Message: "token: " + ex.Err.Error()}
		}
		var ans answer
		if err := json.Unmarshal(ex.Body, &ans); ex.Status != http.StatusOK || err != nil {
			return "", &provider.RecipientResult{Category: provider.Retryable, Code: "http_" + strconv.Itoa(ex.Status), Message: "token: " + httpcall.Snippet(ex.Body)}
		}
		if ans.Errcode != nil && *ans.Errcode != 0 {
			code := *ans.Errcode
			if code == 40001 && attempt == 0 && a.cfg.Credentials != nil {
				a.cfg.Credentials.Invalidate(ctx, ap.tenant, ap.secret)
				if s, err := a.cfg.Credentials.Token(ctx, ap.tenant); err == nil && s != ap.secret {
					ap.secret = s
					continue
				}
			}
			cat := classifyCode(code)
			if cat != provider.RateLimited && cat != provider.Retryable {
				cat = provider.AccountDown // token sends nothing: the account's credentials are wrong
			}
			return "", &provider.RecipientResult{Category: cat, Code: strconv.Itoa(code), Message: "token: " + ans.Errmsg}
		}
		a.tokens.Put(ap.appID, ap.secret, ans.AccessToken, now, ans.ExpiresIn)
		return ans.AccessToken, nil
	}
}
