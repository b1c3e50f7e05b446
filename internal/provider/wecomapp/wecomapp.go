// Package wecomapp is the provider adapter for WeCom application messages
// (企业微信应用消息): POST cgi-bin/message/send?access_token=… with the
// recipients' UserIDs joined by "|" in touser, up to 1,000 per call.
//
// An account is "<corpid>:<agentid>" (the application); its secret (the
// application's corpsecret) is the account's own credential when it has
// one (Config.AccountCredentials), else its owner tenant's
// (provider.Credentials, per tenant). The access token from
// cgi-bin/gettoken is cached for its lifetime (expires_in, less a
// margin) and fetched again at once when a call answers 40014, 42001 or
// 41001 (the call is then made once more: nothing was delivered).
//
// The answer lists invalid and unlicensed users (those are Permanent);
// every other recipient of an accepted call is accepted with the call's
// msgid. WeCom silently drops messages over a member's per-app limit: such
// a recipient is reported accepted, and qunfa cannot know better. The API
// takes no message key and has no status look-up: an item whose answer is
// lost goes to review. Codes are classified as in the wecomapi adapter.
package wecomapp

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

var _ provider.Provider = (*Client)(nil)

// ErrInvalidRequest is returned by Send for a request that cannot be sent
// as given; nothing was sent.
var ErrInvalidRequest = errors.New("wecomapp: invalid request")

// MaxPerCall is how many users one call may name.
const MaxPerCall = 1000

// DefaultBaseURL is WeCom's API root.
const DefaultBaseURL = "https://qyapi.weixin.qq.com"

// Config configures a Client.
type Config struct {
	// BaseURL is the API root (default DefaultBaseURL).
	BaseURL string
	// AccountCredentials gives an account's own application secret, by
	// accesstoken.AccountKey (nil, or provider.ErrNoCredentials for an
	// account: Credentials).
	AccountCredentials provider.Credentials
	// Credentials gives the application secret of the tenant owning a
	// call's account; Secret is used when both are nil.
	Credentials provider.Credentials
	// Secret is the application secret when Credentials is nil. Never
	// logged.
	Secret string
	// Owners maps an account to its tenant (nil: every account uses the
	// default credential).
	Owners AccountOwners
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

// AccountOwners tells which tenant owns an account (store.ErrNotFound:
// nobody).
type AccountOwners = accesstoken.Owners

// Client is the wecom-app adapter; safe for concurrent use.
type Client struct {
	cfg  Config
	base string
	http *http.Client

	tokens accesstoken.Cache // by corpid and secret
}

// New builds a Client.
func New(cfg Config) (*Client, error) {
	base, err := httpcall.BaseURL(cfg.BaseURL, DefaultBaseURL)
	if err != nil {
		return nil, fmt.Errorf("wecomapp config: %w", err)
	}
	cfg.Timeouts = cfg.Timeouts.WithDefaults()
	if cfg.Clock == nil {
		cfg.Clock = clock.System{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Client{cfg: cfg, base: base, http: httpcall.Wrap(cfg.WrapHTTP, httpcall.NewClient(cfg.Timeouts))}, nil
}

// Close drops idle connections.
func (c *Client) Close() error {
	c.http.CloseIdleConnections()
	return nil
}

// ParseAccount splits an account id "<corpid>:<agentid>".
func ParseAccount(account string) (corpID string, agentID int64, err error) {
	i := strings.LastIndexByte(account, ':')
	if i <= 0 {
		return "", 0, fmt.Errorf("account %q is not <corpid>:<agentid>", account)
	}
	agentID, err = strconv.ParseInt(account[i+1:], 10, 64)
	if err != nil || agentID <= 0 {
		return "", 0, fmt.Errorf("account %q: agentid %q is not a positive number", account, account[i+1:])
	}
	return account[:i], agentID, nil
}

// message is the body of cgi-bin/message/send (text).
type message struct {
	ToUser  string `json:"touser"`
	MsgType string `json:"msgtype"`
	AgentID int64  `json:"agentid"`
	Text    struct {
		Content string `json:"content"`
	} `json:"text"`
}

// answer is every field a WeCom answer may carry.
type answer struct {
	Errcode        *int   `json:"errcode"`
	Errmsg         string `json:"errmsg"`
	AccessToken    string `json:"access_token"`
	ExpiresIn      int64  `json:"expires_in"`
	InvalidUser    string `json:"invaliduser"`
	UnlicensedUser string `json:"unlicenseduser"`
	MsgID          string `json:"msgid"`
}

// app is what one call needs of its account.
type app struct {
	corpID  string
	agentID int64
	source  accesstoken.Source
	secret  string
}

// Send delivers req.Content to req.To (see provider.Provider).
func (c *Client) Send(ctx context.Context, req provider.SendRequest) (provider.SendResult, error) {
	n := len(req.To)
	corpID, agentID, err := ParseAccount(req.Account)
	switch {
	case err != nil:
		return provider.SendResult{}, fmt.Errorf("%w: %v", ErrInvalidRequest, err)
	case n == 0 || n > MaxPerCall:
		return provider.SendResult{}, fmt.Errorf("%w: %d recipients (1 to %d)", ErrInvalidRequest, n, MaxPerCall)
	case len(req.Keys) != n:
		return provider.SendResult{}, fmt.Errorf("%w: %d keys for %d recipients", ErrInvalidRequest, len(req.Keys), n)
	case req.Content == "":
		return provider.SendResult{}, fmt.Errorf("%w: content is empty", ErrInvalidRequest)
	}
	for _, to := range req.To {
		if to == "" || strings.Contains(to, "|") {
			return provider.SendResult{}, fmt.Errorf("%w: recipient %q is empty or holds \"|\"", ErrInvalidRequest, to)
		}
	}
	a := app{corpID: corpID, agentID: agentID}
	if a.secret, a.source, err = c.secret(ctx, req.Account); err != nil {
		c.cfg.Logger.Warn("wecom-app credentials unavailable", slog.String("account", req.Account), slog.Any("err", err))
		return httpcall.Same(n, provider.RecipientResult{Category: provider.Retryable, Message: "provider credentials unavailable"}), ctx.Err()
	}
	var msg message
	msg.ToUser, msg.MsgType, msg.AgentID, msg.Text.Content = strings.Join(req.To, "|"), "text", agentID, req.Content
	body, err := json.Marshal(msg)
	if err != nil {
		return provider.SendResult{}, fmt.Errorf("%w: encode: %v", ErrInvalidRequest, err)
	}
	for attempt := 0; ; attempt++ {
		tok, refused := c.accessToken(ctx, &a, attempt > 0)
		if refused != nil {
			return httpcall.Same(n, *refused), ctx.Err()
		}
		ex := httpcall.Do(ctx, c.http, c.cfg.Timeouts, http.MethodPost,
			c.base+"/cgi-bin/message/send?access_token="+url.QueryEscape(tok),
			http.Header{"Content-Type": {"application/json"}}, body)
		if ex.Err != nil {
			if ex.Wrote {
				c.cfg.Logger.Warn("wecom-app call went out without an answer",
					slog.String("account", req.Account), slog.Int("recipients", n), slog.Any("err", ex.Err))
			}
			return httpcall.Same(n, provider.RecipientResult{Category: ex.Category(), Message: ex.Err.Error()}), ctx.Err()
		}
		var ans answer
		parseErr := json.Unmarshal(ex.Body, &ans)
		if ex.Status == http.StatusOK && parseErr == nil && ans.Errcode != nil && tokenRefused(*ans.Errcode) && attempt == 0 {
			// Nothing was delivered: fetch a new token and call again.
			c.tokens.Drop(a.corpID, a.secret, tok)
			continue
		}
		return interpret(req, ex, ans, parseErr), nil
	}
}

func tokenRefused(code int) bool {
	return code == codeInvalidToken || code == codeTokenExpired || code == codeTokenMissing
}

// interpret turns an answered call into one result per recipient.
func interpret(req provider.SendRequest, ex httpcall.Exchange, ans answer, parseErr error) provider.SendResult {
	n := len(req.To)
	if ex.Status != http.StatusOK {
		code, msg, cat := "http_"+strconv.Itoa(ex.Status), http.StatusText(ex.Status), classifyHTTPStatus(ex.Status)
		if parseErr == nil && ans.Errcode != nil {
			code, msg = strconv.Itoa(*ans.Errcode), ans.Errmsg
			if ex.Status >= 500 {
				cat = classifyCode(*ans.Errcode)
			}
		}
		return httpcall.Same(n, provider.RecipientResult{Category: cat, Code: code, Message: msg})
	}
	if parseErr != nil || ans.Errcode == nil {
		// A 200 we cannot read may well be an acceptance.
		return httpcall.Same(n, provider.RecipientResult{Category: provider.Uncertain, Message: "unreadable answer: " + httpcall.Snippet(ex.Body)})
	}
	if *ans.Errcode != 0 {
		return httpcall.Same(n, provider.RecipientResult{Category: classifyCode(*ans.Errcode), Code: strconv.Itoa(*ans.Errcode), Message: ans.Errmsg})
	}
	refused := map[string]string{}
	for _, u := range splitUsers(ans.InvalidUser) {
		refused[u] = "invaliduser"
	}
	for _, u := range splitUsers(ans.UnlicensedUser) {
		refused[u] = "unlicenseduser"
	}
	out := make([]provider.RecipientResult, n)
	for i, to := range req.To {
		if code, ok := refused[to]; ok {
			out[i] = provider.RecipientResult{Category: provider.Permanent, Code: code, Message: "listed as " + code + " in the answer"}
			continue
		}
		out[i] = provider.RecipientResult{Accepted: true, MsgID: ans.MsgID}
	}
	return provider.SendResult{Recipients: out}
}

func splitUsers(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, "|")
}

// Status: the API has no look-up.
func (c *Client) Status(context.Context, provider.StatusRequest) (provider.Status, error) {
	return "", fmt.Errorf("wecom-app: %w", provider.ErrStatusUnsupported)
}

// secret is the account's own application secret, else its owner's, else
// Config.Secret when no credentials are configured.
func (c *Client) secret(ctx context.Context, account string) (string, accesstoken.Source, error) {
	if c.cfg.AccountCredentials == nil && c.cfg.Credentials == nil {
		return c.cfg.Secret, accesstoken.Source{}, nil
	}
	return accesstoken.Lookup{Accounts: c.cfg.AccountCredentials, Tenants: c.cfg.Credentials, Owners: c.cfg.Owners}.Find(ctx, account)
}

// accessToken returns a live access token of the app, from the cache
// unless fresh is set. A refusal (nothing sent) comes back as the result
// every recipient gets. A secret that gettoken refuses is reported to
// Credentials, and a rotated one is tried once.
func (c *Client) accessToken(ctx context.Context, a *app, fresh bool) (string, *provider.RecipientResult) {
	now := c.cfg.Clock.Now()
	if !fresh {
		if tok, ok := c.tokens.Get(a.corpID, a.secret, now); ok {
			return tok, nil
		}
	}
	for attempt := 0; ; attempt++ {
		q := url.Values{"corpid": {a.corpID}, "corpsecret": {a.secret}}
		ex := httpcall.Do(ctx, c.http, c.cfg.Timeouts, http.MethodGet, c.base+"/cgi-bin/gettoken?"+q.Encode(), nil, nil)
		if ex.Err != nil {
			// No message went out, whatever happened to gettoken.
			return "", &provider.RecipientResult{Category: provider.Retryable, Message: "gettoken: " + ex.Err.Error()}
		}
		var ans answer
		if err := json.Unmarshal(ex.Body, &ans); ex.Status != http.StatusOK || err != nil || ans.Errcode == nil {
			cat := classifyHTTPStatus(ex.Status)
			if cat == provider.Uncertain || ex.Status == http.StatusOK {
				cat = provider.Retryable // gettoken sends nothing
			}
			return "", &provider.RecipientResult{Category: cat, Code: "http_" + strconv.Itoa(ex.Status), Message: "gettoken: " + httpcall.Snippet(ex.Body)}
		}
		if code := *ans.Errcode; code != 0 {
			if code == codeInvalidSecret && attempt == 0 {
				a.source.Invalidate(ctx, a.secret)
				if s, err := a.source.Reread(ctx); err == nil && s != a.secret {
					a.secret = s
					continue
				}
			}
			return "", &provider.RecipientResult{Category: gettokenCategory(code), Code: strconv.Itoa(code), Message: "gettoken: " + ans.Errmsg}
		}
		c.tokens.Put(a.corpID, a.secret, ans.AccessToken, now, ans.ExpiresIn)
		return ans.AccessToken, nil
	}
}

// gettokenCategory: gettoken sends no message, so nothing it answers is
// Uncertain; refusals of the corp or secret put the account down.
func gettokenCategory(code int) provider.Category {
	switch cat := classifyCode(code); cat {
	case provider.RateLimited, provider.Retryable, provider.AccountDown:
		return cat
	default:
		return provider.AccountDown
	}
}
