// Package api is qunfa's HTTP API v1 (DESIGN.md, "Contract: HTTP API v1"):
// accounts, job submission, job status and item listings, and operator
// commands. New returns one http.Handler that the api Lambda serves through
// an API Gateway adapter (internal/handlers) and the local runtime serves
// directly, so both run the same code.
//
// Every route but /healthz needs "Authorization: Bearer <token>"; the token's
// SHA-256 (HashToken) names a tenant in the store, and a tenant sees only
// its own jobs and accounts: another tenant's job is a 404. Errors are
// application/problem+json (RFC 9457, see Problem). A refused request
// changes nothing.
package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strings"
	"time"

	"github.com/qunfa/qunfa/internal/campaign"
	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/control"
	"github.com/qunfa/qunfa/internal/dashboard"
	"github.com/qunfa/qunfa/internal/netguard"
	"github.com/qunfa/qunfa/internal/provider/accesstoken"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/submit"
)

// DefaultMaxBodyBytes bounds a request body unless Deps says otherwise.
const DefaultMaxBodyBytes = 10 << 20

// Deps is what the API needs from the rest of qunfa.
type Deps struct {
	Store     store.Store
	Submitter *submit.Submitter
	Control   *control.Controller
	Clock     clock.Clock  // default clock.System{}
	Logger    *slog.Logger // default slog.Default()
	// MaxBodyBytes bounds a request body (default DefaultMaxBodyBytes);
	// larger bodies get 413.
	MaxBodyBytes int64
	// Scheduler keeps campaigns' schedules (EventBridge rules in AWS;
	// default campaign.NoScheduler{}, the local runtime fires them itself).
	Scheduler campaign.Scheduler
	// CampaignZone is the time zone of the cron schedules of campaigns
	// that name none, the stack's default (nil: UTC): the next firing
	// shown is counted in it.
	CampaignZone *time.Location
	// Webhooks stores webhooks and their deliveries (default: Store, when
	// it implements store.WebhookStore).
	Webhooks store.WebhookStore
	// AllowPrivateURLs lets webhook URLs point to loopback and private
	// addresses (`qunfa dev --allow-private-urls`); never in production.
	AllowPrivateURLs bool
	// Resolver checks webhook host names at registration (default
	// net.DefaultResolver).
	Resolver netguard.Resolver
	// Series reads the per-minute series of jobs and accounts (default:
	// Store, when it implements store.SeriesStore; none: empty series).
	Series store.SeriesStore
	// Tenants keeps API tokens and account ownership (default: Store, when
	// it implements store.TenantStore).
	Tenants store.TenantStore
	// Audit records every state-changing call (default: Store, when it
	// implements store.AuditStore).
	Audit store.AuditStore
	// PlatformTokenHash is HashToken of the platform operator's token, the
	// only credential of the /v1/tenants routes (empty: those routes
	// refuse every call).
	PlatformTokenHash string
	// GrantOnPut grants an account nobody owns to the tenant that first
	// PUTs it (qunfa dev's convenience; off in production, where the
	// platform operator grants accounts).
	GrantOnPut bool
	// Events settles items by providers' callbacks (nil: callbacks of
	// events answer 503).
	Events ProviderEvents
	// WechatCallbacks and WecomCallbacks hold the secrets that verify and
	// open the WeChat (Official Account) and WeCom callbacks (zero: no
	// callback of that provider verifies). Never logged.
	WechatCallbacks, WecomCallbacks CallbackSecrets
}

// CallbackSecrets are one provider's callback secrets: Token signs its
// callbacks and AESKey (the EncodingAESKey) encrypts them. Each is the
// account's own (Accounts, by accesstoken.AccountKey) when it has one,
// else its owner tenant's (Tenants, or the default one); the API fills in
// the owners.
type CallbackSecrets struct {
	Token, AESKey accesstoken.Lookup
}

func (d Deps) withDefaults() Deps {
	if d.Clock == nil {
		d.Clock = clock.System{}
	}
	if d.Logger == nil {
		d.Logger = slog.Default()
	}
	if d.MaxBodyBytes <= 0 {
		d.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if d.Scheduler == nil {
		d.Scheduler = campaign.NoScheduler{}
	}
	if ss, ok := d.Store.(store.SeriesStore); ok && d.Series == nil {
		d.Series = ss
	}
	if d.Tenants == nil {
		d.Tenants, _ = d.Store.(store.TenantStore)
	}
	if d.Audit == nil {
		d.Audit, _ = d.Store.(store.AuditStore)
	}
	return d
}

// HashToken is how an API token is stored: the hex SHA-256 of the token.
// Whoever provisions tokens binds HashToken(token) to a tenant with
// Store.PutToken; the token itself is never stored.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// server holds the dependencies of the route handlers.
type server struct {
	Deps
	mux      *routeMux
	keyLocks keyLocks // per tenant + idempotency key
}

// New returns the HTTP API v1 handler.
func New(deps Deps) http.Handler {
	s := &server{Deps: deps.withDefaults(), mux: newRouteMux()}
	s.mux.HandleFunc("GET /healthz", s.healthz)
	// The operator dashboard: static files, no token, data via API v1; not
	// itself an API v1 route, so outside Routes and openapi.json.
	s.mux.ServeMux.Handle("GET "+dashboard.Prefix, dashboard.Handler())
	s.mux.ServeMux.Handle("GET /{$}", http.RedirectHandler(dashboard.Prefix, http.StatusFound))
	s.mux.HandleFunc("GET /v1/openapi.json", serveOpenAPI)
	s.mux.HandleFunc("GET /v1/openapi-3.0.json", serveOpenAPI30)

	s.handleRole("PUT /v1/accounts/{account}", store.RoleAdmin, s.putAccount)
	s.handle("GET /v1/accounts/{account}", s.getAccount)
	s.handle("GET /v1/accounts", s.listAccounts)
	s.handle("GET /v1/accounts/{account}/series", s.accountSeries)
	s.handle("GET /v1/accounts/{account}/breaker/history", s.breakerHistory)

	s.handle("POST /v1/jobs", s.submitJob)
	s.handle("POST /v1/jobs/preview", s.previewJob)
	s.handle("POST /v1/jobs/{id}/preview", s.previewStaged)
	s.handle("GET /v1/jobs", s.listJobs)
	s.handle("GET /v1/jobs/{id}", s.getJob)
	s.handle("PATCH /v1/jobs/{id}", s.updateLimits)
	s.handle("GET /v1/jobs/{id}/items", s.listItems)
	s.handle("GET /v1/jobs/{id}/series", s.jobSeries)
	s.handle("POST /v1/jobs/{id}/pause", s.command("pause", s.Control.Pause))
	s.handle("POST /v1/jobs/{id}/resume", s.command("resume", s.Control.Resume))
	s.handle("POST /v1/jobs/{id}/cancel", s.command("cancel", s.cancelJob))
	s.handle("GET /v1/jobs/{id}/recipients", s.listParts)
	s.handle("PUT /v1/jobs/{id}/recipients/{part}", s.putPart)
	s.handle("POST /v1/jobs/{id}/start", s.startJob)
	s.handle("POST /v1/jobs/{id}/redrive", s.redrive)
	s.handle("POST /v1/jobs/{id}/items/{seq}/resolve", s.resolve)
	s.handle("GET /v1/suppressions", s.listSuppressions)
	s.handle("POST /v1/suppressions", s.importSuppressions)
	s.handle("PUT /v1/suppressions/{account}/{to}", s.putSuppression)
	s.handle("DELETE /v1/suppressions/{account}/{to}", s.deleteSuppression)
	s.handle("POST /v1/campaigns", s.putCampaign)
	s.handle("GET /v1/campaigns", s.listCampaigns)
	s.handle("GET /v1/campaigns/{id}", s.getCampaign)
	s.handle("DELETE /v1/campaigns/{id}", s.deleteCampaign)
	s.routeWebhooks()
	s.routeTokens()
	s.routeQuotas()
	s.handleRole("GET /v1/audit", store.RoleAdmin, s.listAudit)
	s.routeCallbacks()
	return s
}

// ServeHTTP routes a request, answering unknown routes and wrong methods
// with problems instead of the mux's plain-text pages, and turning a panic
// into a 500 problem.
func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.Logger.Error("api handler panicked", slog.String("method", r.Method), slog.String("path", r.URL.Path),
				slog.Any("panic", v), slog.String("stack", string(debug.Stack())))
			writeProblem(w, newProblem(http.StatusInternalServerError, kindInternal, "the server failed to handle the request"))
		}
	}()
	if _, pattern := s.mux.Handler(r); pattern == "" {
		// The mux has no route: find out whether it would say 404 or 405
		// (or redirect to a cleaned path) without letting it write.
		cw := &captureWriter{header: http.Header{}}
		s.mux.ServeHTTP(cw, r)
		switch cw.status {
		case http.StatusMethodNotAllowed:
			w.Header().Set("Allow", cw.header.Get("Allow"))
			writeProblem(w, newProblem(http.StatusMethodNotAllowed, kindMethod,
				r.Method+" is not allowed on "+r.URL.Path+"; allowed: "+cw.header.Get("Allow")))
		case http.StatusNotFound, 0:
			writeProblem(w, newProblem(http.StatusNotFound, kindNotFound, "no such route: "+r.Method+" "+r.URL.Path))
		default:
			for k, v := range cw.header {
				w.Header()[k] = v
			}
			w.WriteHeader(cw.status)
			_, _ = w.Write(cw.body)
		}
		return
	}
	s.mux.ServeHTTP(w, r)
}

// captureWriter records what a handler would answer.
type captureWriter struct {
	header http.Header
	status int
	body   []byte
}

func (c *captureWriter) Header() http.Header { return c.header }
func (c *captureWriter) WriteHeader(code int) {
	if c.status == 0 {
		c.status = code
	}
}
func (c *captureWriter) Write(b []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	c.body = append(c.body, b...)
	return len(b), nil
}

// tenantHandler is a route handler that knows the caller's tenant. It
// returns the problem to answer, or nil when it answered itself.
type tenantHandler func(w http.ResponseWriter, r *http.Request, tenant string) *Problem

// handle registers an authenticated route open to tokens of the role its
// method needs: reads to every role, changes to operate and admin.
func (s *server) handle(pattern string, h tenantHandler) {
	need := store.RoleOperate
	if strings.HasPrefix(pattern, "GET ") {
		need = store.RoleRead
	}
	s.handleRole(pattern, need, h)
}

// handleRole registers an authenticated route open to tokens of role need
// or above; a weaker token gets 403 and the route does nothing.
func (s *server) handleRole(pattern string, need store.Role, h tenantHandler) {
	s.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		who, p := s.authenticate(r)
		if p == nil && !who.Role.Allows(need) {
			p = newProblem(http.StatusForbidden, kindForbidden,
				fmt.Sprintf("this %s token cannot do that; it needs the %s role", who.Role, need))
		}
		if p == nil {
			rec := &statusRecorder{ResponseWriter: w}
			p = h(rec, r.WithContext(withPrincipal(r.Context(), who)), who.Tenant)
			if p == nil {
				s.audit(r, pattern, who, who.Tenant, rec.status, w.Header())
			}
		}
		if p != nil {
			writeAuthProblem(w, r, p)
		}
	})
}

// writeAuthProblem answers p, with the Bearer challenge on a 401.
func writeAuthProblem(w http.ResponseWriter, r *http.Request, p *Problem) {
	if p.Status == http.StatusUnauthorized {
		challenge := `Bearer realm="qunfa"`
		if r.Header.Get("Authorization") != "" {
			challenge += `, error="invalid_token"`
		}
		w.Header().Set("WWW-Authenticate", challenge)
	}
	writeProblem(w, p)
}

// bearer returns the request's bearer token, or a 401 problem.
func bearer(r *http.Request) (string, *Problem) {
	auth := r.Header.Get("Authorization")
	if auth == "" {
		return "", newProblem(http.StatusUnauthorized, kindUnauthorized, `send "Authorization: Bearer <token>"`)
	}
	scheme, token, ok := strings.Cut(auth, " ")
	token = strings.TrimSpace(token)
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return "", newProblem(http.StatusUnauthorized, kindUnauthorized, `the Authorization header must be "Bearer <token>"`)
	}
	return token, nil
}

// authenticate finds the caller's token: unknown, revoked and expired
// tokens get 401.
func (s *server) authenticate(r *http.Request) (store.APIToken, *Problem) {
	token, p := bearer(r)
	if p != nil {
		return store.APIToken{}, p
	}
	t, err := s.Tenants.TokenByHash(r.Context(), HashToken(token))
	if errors.Is(err, store.ErrNotFound) {
		return store.APIToken{}, newProblem(http.StatusUnauthorized, kindUnauthorized, "the API token is not known (revoked, or never issued)")
	}
	if err != nil {
		return store.APIToken{}, s.internal(r, "look up API token", err)
	}
	if t.Expired(s.Clock.Now()) {
		return store.APIToken{}, newProblem(http.StatusUnauthorized, kindUnauthorized, "the API token has expired")
	}
	return t, nil
}

// internal logs an unexpected error and returns a 500 problem that does not
// leak it.
func (s *server) internal(r *http.Request, what string, err error) *Problem {
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		s.Logger.Info("api request cancelled by the client", slog.String("method", r.Method), slog.String("path", r.URL.Path))
	} else {
		s.Logger.Error("api request failed", slog.String("method", r.Method), slog.String("path", r.URL.Path),
			slog.String("step", what), slog.Any("err", err))
	}
	return newProblem(http.StatusInternalServerError, kindInternal, "the server failed to "+what+"; try again")
}

// storeProblem maps a store or control error to a problem.
func (s *server) storeProblem(r *http.Request, what string, err error) *Problem {
	switch {
	case errors.Is(err, store.ErrNotFound):
		return newProblem(http.StatusNotFound, kindNotFound, "no such "+what)
	case errors.Is(err, control.ErrNotAllowed), errors.Is(err, store.ErrInvalidTransition):
		return newProblem(http.StatusConflict, kindConflict, err.Error())
	case errors.Is(err, store.ErrInvalidArgument):
		// The store's words name its internals; the handlers validate
		// what they can say better before calling it.
		return newProblem(http.StatusBadRequest, kindBadRequest, "the request is not valid for this "+what)
	}
	return s.internal(r, "handle the "+what, err)
}

// writeJSON answers v with the given status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeProblem(w, newProblem(http.StatusInternalServerError, kindInternal, "the answer could not be encoded"))
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

func (s *server) healthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}
