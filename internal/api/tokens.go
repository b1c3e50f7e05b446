package api

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/submit"
)

// principalKey carries the caller's token in a request's context.
type principalKey struct{}

func withPrincipal(ctx context.Context, t store.APIToken) context.Context {
	return context.WithValue(ctx, principalKey{}, t)
}

// principalFrom returns the token a request was authenticated with.
func principalFrom(ctx context.Context) (store.APIToken, bool) {
	t, ok := ctx.Value(principalKey{}).(store.APIToken)
	return t, ok
}

// NewToken returns a fresh API token secret.
func NewToken() string {
	return "qf_" + rand.Text() + rand.Text()
}

func newTokenID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return "tok_" + hex.EncodeToString(b)
}

// maxTokenNameChars bounds a token's name.
const maxTokenNameChars = 100

// TokenRequest is the body of POST /v1/tokens and POST
// /v1/tenants/{tenant}/tokens.
type TokenRequest struct {
	Name      string     `json:"name"`
	Role      string     `json:"role"`
	ExpiresAt *time.Time `json:"expires_at"`
}

// Token is a token as GET /v1/tokens lists it: never its secret.
type Token struct {
	ID        string     `json:"id"`
	Name      string     `json:"name"`
	Role      string     `json:"role"`
	CreatedAt time.Time  `json:"created_at"`
	ExpiresAt *time.Time `json:"expires_at"`
}

// NewTokenAnswer is the answer to creating a token: the only time its
// secret is shown.
type NewTokenAnswer struct {
	Token
	Secret string `json:"token"`
}

// TokenList is GET /v1/tokens.
type TokenList struct {
	Tokens []Token `json:"tokens"`
}

func tokenView(t store.APIToken) Token {
	return Token{ID: t.ID, Name: t.Name, Role: string(t.Role), CreatedAt: t.CreatedAt, ExpiresAt: timePtr(t.ExpiresAt)}
}

func (s *server) routeTokens() {
	s.handleRole("POST /v1/tokens", store.RoleAdmin, s.createToken)
	s.handleRole("GET /v1/tokens", store.RoleAdmin, s.listTokens)
	s.handleRole("DELETE /v1/tokens/{id}", store.RoleAdmin, s.deleteToken)
	s.handlePlatform("PUT /v1/tenants/{tenant}/accounts/{account}", s.grantAccount)
	s.handlePlatform("POST /v1/tenants/{tenant}/tokens", func(w http.ResponseWriter, r *http.Request) *Problem {
		tenant := r.PathValue("tenant")
		if msg := checkAccountID(tenant); msg != "" {
			return newProblem(http.StatusUnprocessableEntity, kindValidation, "the token was not created",
				submit.FieldError{Field: "tenant", Message: msg})
		}
		return s.createToken(w, r, tenant)
	})
}

func (s *server) createToken(w http.ResponseWriter, r *http.Request, tenant string) *Problem {
	body, p := readJSON(w, r, s.MaxBodyBytes)
	if p != nil {
		return p
	}
	var req TokenRequest
	if p := decodeStrict(body, &req); p != nil {
		return p
	}
	now := s.Clock.Now()
	var errs []submit.FieldError
	switch n := utf8.RuneCountInString(req.Name); {
	case strings.TrimSpace(req.Name) == "":
		errs = append(errs, submit.FieldError{Field: "name", Message: "is required"})
	case n > maxTokenNameChars || !utf8.ValidString(req.Name):
		errs = append(errs, submit.FieldError{Field: "name", Message: "must be valid UTF-8 of at most 100 characters"})
	}
	if !store.Role(req.Role).Valid() {
		errs = append(errs, submit.FieldError{Field: "role", Message: "must be read, operate or admin"})
	}
	var expires time.Time
	if req.ExpiresAt != nil {
		if expires = req.ExpiresAt.UTC(); !expires.After(now) {
			errs = append(errs, submit.FieldError{Field: "expires_at", Message: "must be in the future"})
		}
	}
	if len(errs) > 0 {
		return newProblem(http.StatusUnprocessableEntity, kindValidation, "the token was not created", errs...)
	}
	secret := NewToken()
	t := store.APIToken{ID: newTokenID(), Tenant: tenant, Name: req.Name, Role: store.Role(req.Role),
		Hash: HashToken(secret), CreatedAt: now, ExpiresAt: expires}
	if err := s.Tenants.CreateToken(r.Context(), t); err != nil {
		return s.storeProblem(r, "token", err)
	}
	writeJSON(w, http.StatusCreated, NewTokenAnswer{Token: tokenView(t), Secret: secret})
	return nil
}

func (s *server) listTokens(w http.ResponseWriter, r *http.Request, tenant string) *Problem {
	ts, err := s.Tenants.ListTokens(r.Context(), tenant)
	if err != nil {
		return s.storeProblem(r, "token", err)
	}
	out := TokenList{Tokens: make([]Token, 0, len(ts))}
	for _, t := range ts {
		out.Tokens = append(out.Tokens, tokenView(t))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *server) deleteToken(w http.ResponseWriter, r *http.Request, tenant string) *Problem {
	if err := s.Tenants.DeleteToken(r.Context(), tenant, r.PathValue("id")); err != nil {
		return s.storeProblem(r, "token", err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// Grant is the answer to PUT /v1/tenants/{tenant}/accounts/{account}.
type Grant struct {
	Tenant  string `json:"tenant"`
	Account string `json:"account"`
}

func (s *server) grantAccount(w http.ResponseWriter, r *http.Request) *Problem {
	tenant, account := r.PathValue("tenant"), r.PathValue("account")
	var errs []submit.FieldError
	if msg := checkAccountID(tenant); msg != "" {
		errs = append(errs, submit.FieldError{Field: "tenant", Message: msg})
	}
	if msg := checkAccountID(account); msg != "" {
		errs = append(errs, submit.FieldError{Field: "account", Message: msg})
	}
	if len(errs) > 0 {
		return newProblem(http.StatusUnprocessableEntity, kindValidation, "the account was not granted", errs...)
	}
	err := s.Tenants.GrantAccount(r.Context(), tenant, account, s.Clock.Now())
	if errors.Is(err, store.ErrConflict) {
		return newProblem(http.StatusConflict, kindConflict, "the account belongs to another tenant; an account has one owner")
	}
	if err != nil {
		return s.storeProblem(r, "account", err)
	}
	writeJSON(w, http.StatusOK, Grant{Tenant: tenant, Account: account})
	return nil
}

// handlePlatform registers a route of the platform operator: only the
// platform token (Deps.PlatformTokenHash) may call it.
func (s *server) handlePlatform(pattern string, h func(http.ResponseWriter, *http.Request) *Problem) {
	s.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		p := s.platformOnly(r)
		if p == nil {
			rec := &statusRecorder{ResponseWriter: w}
			if p = h(rec, r); p == nil {
				s.audit(r, pattern, store.APIToken{ID: "platform", Name: "platform operator", Role: store.RoleAdmin},
					r.PathValue("tenant"), rec.status, w.Header())
			}
		}
		if p != nil {
			writeAuthProblem(w, r, p)
		}
	})
}

func (s *server) platformOnly(r *http.Request) *Problem {
	token, p := bearer(r)
	if p != nil {
		return p
	}
	if s.PlatformTokenHash != "" && subtle.ConstantTimeCompare([]byte(HashToken(token)), []byte(s.PlatformTokenHash)) == 1 {
		return nil
	}
	if _, p := s.authenticate(r); p == nil {
		return newProblem(http.StatusForbidden, kindForbidden, "only the platform token may grant accounts, set quotas and create tenants' first tokens")
	}
	return newProblem(http.StatusUnauthorized, kindUnauthorized, "the platform token is not known")
}

// accountGranted answers nil when tenant may configure and send through
// a provider account: it owns it, or nobody does and GrantOnPut grants it
// now (grant true); otherwise 403.
func (s *server) accountGranted(r *http.Request, tenant, account string, grant bool) *Problem {
	owner, err := s.Tenants.AccountOwner(r.Context(), account)
	switch {
	case err == nil && owner == tenant:
		return nil
	case errors.Is(err, store.ErrNotFound) && grant && s.GrantOnPut:
		err := s.Tenants.GrantAccount(r.Context(), tenant, account, s.Clock.Now())
		if err == nil {
			return nil
		}
		if !errors.Is(err, store.ErrConflict) {
			return s.storeProblem(r, "account", err)
		}
	case err != nil && !errors.Is(err, store.ErrNotFound):
		return s.storeProblem(r, "account", err)
	}
	return newProblem(http.StatusForbidden, kindForbidden,
		"the provider account "+account+" is not granted to this tenant; the platform operator grants accounts")
}
