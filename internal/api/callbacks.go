package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/provider"
	"github.com/qunfa/qunfa/internal/provider/accesstoken"
	"github.com/qunfa/qunfa/internal/provider/wechatmp"
	"github.com/qunfa/qunfa/internal/provider/wxcrypt"
	"github.com/qunfa/qunfa/internal/reconcile"
	"github.com/qunfa/qunfa/internal/store"
)

// maxCallbackBytes bounds a provider event's body (WeChat's are < 2 kB).
const maxCallbackBytes = 64 << 10

// An event about a message id not recorded yet waits for the record up to
// eventRecordWait, looking again every eventRecordPoll: the sender records
// a call's message ids when it records the call's batch, which can come
// after a quick event (the provider answered the call, then posted the
// event, while the batch's slower calls were still out). WeChat waits 5 s
// for an answer; an id still unknown after the wait is not ours (another
// system sending through the same app) and is ignored.
const (
	eventRecordWait = 2 * time.Second
	eventRecordPoll = 200 * time.Millisecond
)

// ProviderEvents settles the items of a provider call by the provider's
// event about its message id (reconcile.Reconciler).
type ProviderEvents interface {
	SettleMsgCall(ctx context.Context, account, msgID string, s reconcile.Settlement) (int, error)
}

// routeCallbacks registers the provider callback routes: no bearer token,
// each request authenticated by the provider's own signature.
func (s *server) routeCallbacks() {
	s.mux.HandleFunc("GET /v1/callbacks/wechat-mp/{account}", s.wechatEcho)
	s.mux.HandleFunc("POST /v1/callbacks/wechat-mp/{account}", s.wechatEvent)
	s.mux.HandleFunc("GET /v1/callbacks/wecom-app/{account}", s.wecomEcho)
	s.mux.HandleFunc("POST /v1/callbacks/wecom-app/{account}", s.wecomEvent)
}

// callbackKeys are an account's callback token and EncodingAESKey ("":
// none).
type callbackKeys struct{ token, aesKey string }

// callbackKeys reads the account's callback secrets; when they cannot be
// read it answers 503 (the provider retries) and returns false.
func (s *server) callbackKeys(w http.ResponseWriter, r *http.Request, set CallbackSecrets) (callbackKeys, bool) {
	account := r.PathValue("account")
	var k callbackKeys
	for _, c := range []struct {
		l    accesstoken.Lookup
		v    *string
		what string
	}{{set.Token, &k.token, "token"}, {set.AESKey, &k.aesKey, "EncodingAESKey"}} {
		if c.l.Accounts == nil && c.l.Tenants == nil {
			continue
		}
		if s.Tenants != nil {
			c.l.Owners = s.Tenants
		}
		v, err := findCallbackSecret(r.Context(), c.l, account)
		if err != nil {
			s.Logger.Warn("callback secret unavailable", slog.String("account", account), slog.String("secret", c.what), slog.Any("err", err))
			writeProblem(w, newProblem(http.StatusServiceUnavailable, kindInternal, "the account's callback "+c.what+" is unavailable; the provider retries"))
			return callbackKeys{}, false
		}
		*c.v = v
	}
	return k, true
}

// findCallbackSecret is the account's own secret, else its app's own
// (a template account's AppID), else its owner tenant's.
func findCallbackSecret(ctx context.Context, l accesstoken.Lookup, account string) (string, error) {
	if app := receiveID(account); app != account && l.Accounts != nil {
		if v, err := l.Accounts.Token(ctx, accesstoken.AccountKey(account)); err == nil || !errors.Is(err, provider.ErrNoCredentials) {
			return v, err
		}
		l.Accounts = accountAlias{l.Accounts, app}
	}
	v, _, err := l.Find(ctx, account)
	return v, err
}

// accountAlias asks creds for app's own credential whatever account is
// named.
type accountAlias struct {
	creds provider.Credentials
	app   string
}

func (a accountAlias) Token(ctx context.Context, _ string) (string, error) {
	return a.creds.Token(ctx, accesstoken.AccountKey(a.app))
}

func (a accountAlias) Invalidate(ctx context.Context, _, secret string) {
	a.creds.Invalidate(ctx, accesstoken.AccountKey(a.app), secret)
}

// receiveID is the app an account's callbacks are encrypted for: the
// AppID or CorpID before the account's ":" (a template account
// "<appid>:<template_id>", a WeCom application "<corpid>:<agentid>").
func receiveID(account string) string {
	id, _, _ := strings.Cut(account, ":")
	return id
}

// forbidCallback answers 403: nothing of the request is believed.
func forbidCallback(w http.ResponseWriter, detail string) {
	writeProblem(w, newProblem(http.StatusForbidden, kindForbidden, detail))
}

// readCallback reads a callback's body (at most maxCallbackBytes; 413
// beyond).
func readCallback(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxCallbackBytes))
	if err != nil {
		writeProblem(w, newProblem(http.StatusRequestEntityTooLarge, kindTooLarge, "an event is at most 64 kB"))
		return nil, false
	}
	return body, true
}

// canOpen answers 403 and returns false for an encrypted callback that
// cannot verify: no msg_signature, or no secrets to verify it with.
func canOpen(w http.ResponseWriter, r *http.Request, k callbackKeys) bool {
	switch {
	case r.URL.Query().Get("msg_signature") == "":
		forbidCallback(w, "an encrypted callback is signed with msg_signature")
		return false
	case k.token == "" || k.aesKey == "":
		forbidCallback(w, "the account has no callback token and EncodingAESKey: an encrypted callback cannot be verified")
		return false
	}
	return true
}

// openEncrypted verifies an encrypted callback's msg_signature and
// decrypts its Encrypt for the account's app; on failure it answers 403
// (or 400 for a body that is no encrypted callback) and returns false.
func openEncrypted(w http.ResponseWriter, r *http.Request, k callbackKeys, encrypt string) ([]byte, bool) {
	if !canOpen(w, r, k) {
		return nil, false
	}
	c, err := wxcrypt.New(k.token, k.aesKey, receiveID(r.PathValue("account")))
	if err != nil {
		forbidCallback(w, "the account's callback secrets cannot open an encrypted callback: "+err.Error())
		return nil, false
	}
	q := r.URL.Query()
	msg, err := c.Open(q.Get("msg_signature"), q.Get("timestamp"), q.Get("nonce"), encrypt)
	switch {
	case errors.Is(err, wxcrypt.ErrSignature):
		forbidCallback(w, "msg_signature is not the SHA-1 of the account's callback token, timestamp, nonce and Encrypt")
		return nil, false
	case errors.Is(err, wxcrypt.ErrReceiveID):
		forbidCallback(w, "the event is encrypted for another app than the account's")
		return nil, false
	case err != nil:
		forbidCallback(w, "Encrypt does not decrypt with the account's EncodingAESKey")
		return nil, false
	}
	return msg, true
}

// wechatVerified checks a plain WeChat callback's signature against the
// account's callback token; on failure it answers 403 and returns false.
func (s *server) wechatVerified(w http.ResponseWriter, r *http.Request, k callbackKeys) bool {
	q := r.URL.Query()
	if !wechatmp.VerifySignature(k.token, q.Get("timestamp"), q.Get("nonce"), q.Get("signature")) {
		forbidCallback(w, "the signature is not the SHA-1 of the account's callback token, timestamp and nonce")
		return false
	}
	return true
}

// wechatEcho answers WeChat's server check: echostr back when signed
// (WeChat signs it plainly in every message mode).
func (s *server) wechatEcho(w http.ResponseWriter, r *http.Request) {
	k, ok := s.callbackKeys(w, r, s.WechatCallbacks)
	if !ok || !s.wechatVerified(w, r, k) {
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.WriteString(w, r.URL.Query().Get("echostr"))
}

// wechatEvent takes a signed event, plain or (encrypt_type=aes, WeChat's
// safe and compatible modes) encrypted. A MASSSENDJOBFINISH or a
// TEMPLATESENDJOBFINISH settles the items of its msg_id; other events,
// unknown ids, duplicates and late events change nothing and are answered
// "success" (WeChat would retry anything else).
func (s *server) wechatEvent(w http.ResponseWriter, r *http.Request) {
	k, ok := s.callbackKeys(w, r, s.WechatCallbacks)
	if !ok {
		return
	}
	encrypted := r.URL.Query().Get("encrypt_type") == "aes"
	if encrypted && !canOpen(w, r, k) {
		return
	}
	body, ok := readCallback(w, r)
	if !ok {
		return
	}
	if encrypted {
		env, err := wxcrypt.ParseEnvelope(body)
		if err != nil {
			writeProblem(w, newProblem(http.StatusBadRequest, kindBadRequest, "the body is not an encrypted WeChat event (XML with Encrypt): "+err.Error()))
			return
		}
		if body, ok = openEncrypted(w, r, k, env.Encrypt); !ok {
			return
		}
	} else if !s.wechatVerified(w, r, k) {
		return
	}
	ev, err := wechatmp.ParseEvent(body)
	if err != nil {
		writeProblem(w, newProblem(http.StatusBadRequest, kindBadRequest, "the body is not a WeChat event (XML): "+err.Error()))
		return
	}
	if set, ok := wechatSettlement(ev); ok && !s.settleEvent(w, r, receiveID(r.PathValue("account")), ev, set) {
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.WriteString(w, "success")
}

// wechatSettlement is what a WeChat event says of the items of its
// msg_id; false for an event that settles nothing.
func wechatSettlement(ev wechatmp.Event) (reconcile.Settlement, bool) {
	if ev.MsgID == "" {
		return reconcile.Settlement{}, false
	}
	switch ev.Event {
	case wechatmp.EventMassSendJobFinish:
		switch ev.Outcome() {
		case wechatmp.MassFailed:
			return reconcile.Settlement{To: store.ItemFailed, Error: &store.ItemError{Category: string(provider.Permanent), Code: "mass_" + ev.Status,
				Message: "WeChat's MASSSENDJOBFINISH: " + ev.Status + ", nothing sent"}}, true
		case wechatmp.MassReview:
			return reconcile.Settlement{To: store.ItemSubmitted, Error: &store.ItemError{Message: massReviewMessage(ev)}}, true
		}
		return reconcile.Settlement{To: store.ItemConfirmed}, true
	case wechatmp.EventTemplateSendJobFinish:
		msg := "WeChat's TEMPLATESENDJOBFINISH: " + ev.Status
		switch ev.TemplateOutcome() {
		case wechatmp.TemplateRefused:
			// The user blocks the account's template messages: a resend
			// would be refused too.
			return reconcile.Settlement{To: store.ItemFailed, Error: &store.ItemError{Category: string(provider.Permanent), Code: "template_user_block",
				Message: msg + ": the user blocks the account's template messages"}}, true
		case wechatmp.TemplateNotDelivered:
			// Not delivered, and WeChat does not try again: a dead letter
			// an operator may redrive (category exhausted).
			return reconcile.Settlement{To: store.ItemFailed, Error: &store.ItemError{Category: store.CategoryExhausted, Code: "template_system_failed",
				Message: msg + ": not delivered; redrive to send again"}}, true
		case wechatmp.TemplateUnknown:
			return reconcile.Settlement{To: store.ItemSubmitted, Error: &store.ItemError{
				Message: msg + ", a status qunfa does not know: resolve by hand"}}, true
		}
		return reconcile.Settlement{To: store.ItemConfirmed}, true
	}
	return reconcile.Settlement{}, false
}

// settleEvent applies set to the items of the event's msg_id under app;
// when that cannot be recorded it answers 503 (the provider retries) and
// returns false. A msg_id unknown after eventRecordWait is logged and
// ignored.
func (s *server) settleEvent(w http.ResponseWriter, r *http.Request, app string, ev wechatmp.Event, set reconcile.Settlement) bool {
	if s.Events == nil {
		writeProblem(w, newProblem(http.StatusServiceUnavailable, kindInternal, "provider events are not taken here"))
		return false
	}
	n, err := s.Events.SettleMsgCall(r.Context(), app, ev.MsgID, set)
	for waited := time.Duration(0); errors.Is(err, store.ErrNotFound) && waited < eventRecordWait; waited += eventRecordPoll {
		if s.sleep(r.Context(), eventRecordPoll) != nil {
			break
		}
		n, err = s.Events.SettleMsgCall(r.Context(), app, ev.MsgID, set)
	}
	switch {
	case errors.Is(err, store.ErrNotFound):
		s.Logger.Info("wechat event for an unknown msg_id ignored", slog.String("account", app), slog.String("event", ev.Event), slog.String("msg_id", ev.MsgID))
	case err != nil:
		s.Logger.Error("wechat event not settled; WeChat retries", slog.String("account", app), slog.String("msg_id", ev.MsgID), slog.Any("err", err))
		writeProblem(w, newProblem(http.StatusServiceUnavailable, kindInternal, "the event could not be recorded; WeChat retries"))
		return false
	default:
		s.Logger.Info("wechat event settled", slog.String("account", app), slog.String("event", ev.Event), slog.String("msg_id", ev.MsgID),
			slog.String("status", ev.Status), slog.Int("sent", ev.SentCount), slog.Int("errors", ev.ErrorCount), slog.Int("items_settled", n))
	}
	return true
}

// sleep waits d on the server's clock (at once on a fake one).
func (s *server) sleep(ctx context.Context, d time.Duration) error {
	if sl, ok := s.Clock.(clock.Sleeper); ok {
		return sl.Sleep(ctx, d)
	}
	return clock.System{}.Sleep(ctx, d)
}

func massReviewMessage(ev wechatmp.Event) string {
	return fmt.Sprintf("WeChat's MASSSENDJOBFINISH: %s, %d sent, %d failed of %d; which ones is not told: resolve by hand",
		ev.Status, ev.SentCount, ev.ErrorCount, ev.TotalCount)
}

// wecomEcho answers WeCom's URL check: echostr is encrypted and signed
// (msg_signature over it); its plaintext goes back.
func (s *server) wecomEcho(w http.ResponseWriter, r *http.Request) {
	k, ok := s.callbackKeys(w, r, s.WecomCallbacks)
	if !ok {
		return
	}
	msg, ok := openEncrypted(w, r, k, r.URL.Query().Get("echostr"))
	if !ok {
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write(msg)
}

// wecomEvent takes a WeCom application's encrypted event. No WeCom event
// confirms an application message (their only confirmation is the send's
// answer, invaliduser listing the refused): every verified event is
// logged and answered with an empty 200, as WeCom asks of an event it
// need not be told more of.
func (s *server) wecomEvent(w http.ResponseWriter, r *http.Request) {
	k, ok := s.callbackKeys(w, r, s.WecomCallbacks)
	if !ok || !canOpen(w, r, k) {
		return
	}
	body, ok := readCallback(w, r)
	if !ok {
		return
	}
	env, err := wxcrypt.ParseEnvelope(body)
	if err != nil {
		writeProblem(w, newProblem(http.StatusBadRequest, kindBadRequest, "the body is not an encrypted WeCom event (XML with Encrypt): "+err.Error()))
		return
	}
	msg, ok := openEncrypted(w, r, k, env.Encrypt)
	if !ok {
		return
	}
	ev, err := wechatmp.ParseEvent(msg)
	if err != nil {
		writeProblem(w, newProblem(http.StatusBadRequest, kindBadRequest, "the decrypted event is not XML: "+err.Error()))
		return
	}
	s.Logger.Info("wecom event received; it confirms no message", slog.String("account", r.PathValue("account")),
		slog.String("msg_type", ev.MsgType), slog.String("event", ev.Event))
	w.WriteHeader(http.StatusOK)
}
