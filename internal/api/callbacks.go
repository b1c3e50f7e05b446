package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"

	"github.com/qunfa/qunfa/internal/provider"
	"github.com/qunfa/qunfa/internal/provider/wechatmp"
	"github.com/qunfa/qunfa/internal/reconcile"
	"github.com/qunfa/qunfa/internal/store"
)

// maxCallbackBytes bounds a provider event's body (WeChat's are < 2 kB).
const maxCallbackBytes = 64 << 10

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
}

// wechatVerified checks a WeChat callback's signature against the token
// of the tenant owning the account; on failure it answers 403 and returns
// false.
func (s *server) wechatVerified(w http.ResponseWriter, r *http.Request) bool {
	account := r.PathValue("account")
	q := r.URL.Query()
	token := ""
	if s.CallbackTokens != nil {
		tenant := ""
		if s.Tenants != nil {
			t, err := s.Tenants.AccountOwner(r.Context(), account)
			switch {
			case err == nil:
				tenant = t
			case !errors.Is(err, store.ErrNotFound):
				writeProblem(w, newProblem(http.StatusServiceUnavailable, kindInternal, "cannot read the account's owner; WeChat retries"))
				return false
			}
		}
		t, err := s.CallbackTokens.Token(r.Context(), tenant)
		if err != nil && !errors.Is(err, provider.ErrNoCredentials) {
			s.Logger.Warn("wechat callback token unavailable", slog.String("account", account), slog.Any("err", err))
			writeProblem(w, newProblem(http.StatusServiceUnavailable, kindInternal, "the callback token is unavailable; WeChat retries"))
			return false
		}
		token = t
	}
	if !wechatmp.VerifySignature(token, q.Get("timestamp"), q.Get("nonce"), q.Get("signature")) {
		writeProblem(w, newProblem(http.StatusForbidden, kindForbidden,
			"the signature is not the SHA-1 of the account's callback token, timestamp and nonce"))
		return false
	}
	return true
}

// wechatEcho answers WeChat's server check: echostr back when signed.
func (s *server) wechatEcho(w http.ResponseWriter, r *http.Request) {
	if !s.wechatVerified(w, r) {
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.WriteString(w, r.URL.Query().Get("echostr"))
}

// wechatEvent takes a signed event. A MASSSENDJOBFINISH settles the items
// of its msg_id; other events, unknown ids, duplicates and late events
// change nothing and are answered "success" (WeChat would retry anything
// else).
func (s *server) wechatEvent(w http.ResponseWriter, r *http.Request) {
	if !s.wechatVerified(w, r) {
		return
	}
	account := r.PathValue("account")
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxCallbackBytes))
	if err != nil {
		writeProblem(w, newProblem(http.StatusRequestEntityTooLarge, kindTooLarge, "an event is at most 64 kB"))
		return
	}
	ev, err := wechatmp.ParseEvent(body)
	if err != nil {
		writeProblem(w, newProblem(http.StatusBadRequest, kindBadRequest, "the body is not a WeChat event (XML): "+err.Error()))
		return
	}
	if ev.Event == wechatmp.EventMassSendJobFinish && ev.MsgID != "" {
		if s.Events == nil {
			writeProblem(w, newProblem(http.StatusServiceUnavailable, kindInternal, "provider events are not taken here"))
			return
		}
		set := reconcile.Settlement{To: store.ItemConfirmed}
		switch ev.Outcome() {
		case wechatmp.MassFailed:
			set = reconcile.Settlement{To: store.ItemFailed, Error: &store.ItemError{Category: string(provider.Permanent), Code: "mass_" + ev.Status,
				Message: "WeChat's MASSSENDJOBFINISH: " + ev.Status + ", nothing sent"}}
		case wechatmp.MassReview:
			set = reconcile.Settlement{To: store.ItemSubmitted, Error: &store.ItemError{
				Message: massReviewMessage(ev)}}
		}
		n, err := s.Events.SettleMsgCall(r.Context(), account, ev.MsgID, set)
		switch {
		case errors.Is(err, store.ErrNotFound):
			s.Logger.Info("wechat event for an unknown msg_id ignored", slog.String("account", account), slog.String("msg_id", ev.MsgID))
		case err != nil:
			s.Logger.Error("wechat event not settled; WeChat retries", slog.String("account", account), slog.String("msg_id", ev.MsgID), slog.Any("err", err))
			writeProblem(w, newProblem(http.StatusServiceUnavailable, kindInternal, "the event could not be recorded; WeChat retries"))
			return
		default:
			s.Logger.Info("wechat mass send finished", slog.String("account", account), slog.String("msg_id", ev.MsgID),
				slog.String("status", ev.Status), slog.Int("sent", ev.SentCount), slog.Int("errors", ev.ErrorCount), slog.Int("items_settled", n))
		}
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.WriteString(w, "success")
}

func massReviewMessage(ev wechatmp.Event) string {
	return fmt.Sprintf("WeChat's MASSSENDJOBFINISH: %s, %d sent, %d failed of %d; which ones is not told: resolve by hand",
		ev.Status, ev.SentCount, ev.ErrorCount, ev.TotalCount)
}
