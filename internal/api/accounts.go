package api

import (
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/qunfa/qunfa/internal/netguard"
	"github.com/qunfa/qunfa/internal/provider"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/submit"
)

// maxAccountIDBytes bounds an account id.
const maxAccountIDBytes = 128

func (s *server) putAccount(w http.ResponseWriter, r *http.Request, tenant string) *Problem {
	id := r.PathValue("account")
	body, p := readJSON(w, r, s.MaxBodyBytes)
	if p != nil {
		return p
	}
	var req AccountRequest
	if p := decodeStrict(body, &req); p != nil {
		return p
	}
	a, errs := validateAccount(id, req)
	if a.HTTP != nil {
		// The provider is dialled only to public addresses; one that names
		// a private address is refused now.
		var res netguard.Resolver = net.DefaultResolver
		if s.Resolver != nil {
			res = s.Resolver
		}
		if err := netguard.CheckURL(r.Context(), a.HTTP.URL, res, s.AllowPrivateURLs); err != nil {
			errs = append(errs, submit.FieldError{Field: "http.url", Message: err.Error()})
		}
	}
	if len(errs) > 0 {
		return newProblem(http.StatusUnprocessableEntity, kindValidation, "the account was not saved", errs...)
	}
	if p := s.accountGranted(r, tenant, id, true); p != nil {
		return p
	}
	a.Tenant = tenant
	a.UpdatedAt = s.Clock.Now()
	saved, err := s.Store.PutAccount(r.Context(), a)
	if err != nil {
		return s.storeProblem(r, "account", err)
	}
	b, err := s.Store.GetBreaker(r.Context(), tenant, saved.ID)
	if err != nil {
		return s.storeProblem(r, "account", err)
	}
	writeJSON(w, http.StatusOK, s.accountView(saved, b))
	return nil
}

// validateAccount checks an account request and applies its defaults.
// maxWarmupSec bounds an account's warm-up: a day.
const maxWarmupSec = 86400

// maxFrequencyWindowSec bounds a frequency cap's window: 31 days.
const maxFrequencyWindowSec = store.MaxFrequencyWindowSec

func validateAccount(id string, req AccountRequest) (store.Account, []submit.FieldError) {
	var errs []submit.FieldError
	add := func(field, format string, args ...any) {
		errs = append(errs, submit.FieldError{Field: field, Message: fmt.Sprintf(format, args...)})
	}
	if msg := checkAccountID(id); msg != "" {
		add("account", "%s", msg)
	}
	a := store.Account{ID: id, MaxRecipientsPerCall: 1}
	switch {
	case req.RatePerSec == nil:
		add("rate_per_sec", "is required")
	case *req.RatePerSec <= 0:
		add("rate_per_sec", "must be greater than 0")
	default:
		a.RatePerSec = *req.RatePerSec
	}
	if req.OnlineReservePerSec != nil {
		v := *req.OnlineReservePerSec
		switch {
		case v < 0:
			add("online_reserve_per_sec", "must be 0 or more")
		case a.RatePerSec > 0 && v >= a.RatePerSec:
			add("online_reserve_per_sec", "must be less than rate_per_sec (%g), or nothing is left for bulk sending", a.RatePerSec)
		default:
			a.OnlineReservePerSec = v
		}
	}
	a.Burst = max(1, a.RatePerSec)
	if req.Burst != nil {
		if *req.Burst < 1 {
			add("burst", "must be at least 1")
		} else {
			a.Burst = *req.Burst
		}
	}
	kind := provider.KindWecomAPI
	if req.Provider != nil {
		kind = provider.Kind(*req.Provider)
		switch {
		case !kind.Known():
			add("provider", "must be one of %s", kindList())
		default:
			a.Provider = string(kind)
			if err := kind.CheckAccount(id); err != nil {
				add("account", "%s", err.Error())
			}
		}
	}
	switch {
	case kind == provider.KindHTTP:
		if err := req.HTTP.Validate(); err != nil {
			for _, e := range splitErrors(err) {
				add("http", "%s", e)
			}
		} else {
			a.HTTP = req.HTTP
		}
	case req.HTTP != nil:
		add("http", "is only for the http provider")
	}
	if v := req.StatusLookup; v != nil && *v != (kind == provider.KindWecomAPI) {
		if *v {
			add("status_lookup", "the %s provider has no status look-up by message key", kind)
		} else {
			a.NoStatusLookup = true
		}
	}
	if req.MaxRecipientsPerCall != nil {
		switch per := *req.MaxRecipientsPerCall; {
		case per < 1:
			add("max_recipients_per_call", "must be at least 1")
		case kind.Known() && per > kind.MaxPerCall():
			add("max_recipients_per_call", "the %s provider takes at most %d recipients per call", kind, kind.MaxPerCall())
		default:
			a.MaxRecipientsPerCall = per
		}
	} else if kind == provider.KindWechatMPMass {
		// A mass send is a list: one OpenID per call would go out as
		// customer-service messages. The sender's sizing still decides
		// how many a call carries.
		a.MaxRecipientsPerCall = kind.MaxPerCall()
	}
	if v := req.MaxContentBytes; v != nil {
		if *v < 1 || *v > submit.MaxContentBytesCeiling {
			add("max_content_bytes", "must be between 1 and %d", submit.MaxContentBytesCeiling)
		} else {
			a.MaxContentBytes = *v
		}
	}
	if v := req.WarmupSec; v != nil {
		if *v < 0 || *v > maxWarmupSec {
			add("warmup_sec", "must be between 0 (no warm-up) and %d", maxWarmupSec)
		} else {
			a.WarmupSec = *v
		}
	}
	if c := req.FrequencyCap; c != nil {
		if c.Max < 1 {
			add("frequency_cap.max", "must be 1 or more (leave frequency_cap out for no cap)")
		}
		if c.WindowSec < 1 || c.WindowSec > maxFrequencyWindowSec {
			add("frequency_cap.window_sec", "must be between 1 and %d (31 days)", maxFrequencyWindowSec)
		}
		if c.Max >= 1 && c.WindowSec >= 1 && c.WindowSec <= maxFrequencyWindowSec {
			a.FrequencyCap = *c
		}
	}
	if pc := req.Pacing; pc != nil {
		a.Pacing = validatePacing(*pc, a.BatchRate(), add)
	}
	if b := req.Breaker; b != nil {
		if b.ConsecutiveFailures < 0 {
			add("breaker.consecutive_failures", "must be 0 (disabled) or more")
		}
		if b.FailureRate < 0 || b.FailureRate > 1 {
			add("breaker.failure_rate", "must be between 0 (disabled) and 1")
		}
		if b.MinSamples < 0 {
			add("breaker.min_samples", "must be 0 or more")
		}
		if b.CooldownSec < 0 {
			add("breaker.cooldown_sec", "must be 0 or more")
		}
		a.Breaker = *b
	}
	return a, errs
}

// splitErrors lists the messages of a joined error.
func splitErrors(err error) []string {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []string
		for _, e := range j.Unwrap() {
			out = append(out, e.Error())
		}
		return out
	}
	return []string{err.Error()}
}

// kindList names the provider kinds for an error message.
func kindList() string {
	names := make([]string, len(provider.Kinds))
	for i, k := range provider.Kinds {
		names[i] = strconv.Quote(string(k))
	}
	return strings.Join(names, ", ")
}

// validatePacing checks an account's pacing option against its batch
// rate: random gaps need room between the min gap and the mean gap
// (1/batch rate), so the min gap must be below the mean gap.
func validatePacing(pc PacingRequest, batchRate float64, add func(field, format string, args ...any)) store.Pacing {
	ok := true
	if pc.Mode != store.PacingRandom {
		add("pacing.mode", "must be %q (leave pacing out or null for the token bucket)", store.PacingRandom)
		ok = false
	}
	gap := 0
	if pc.MinGapMs != nil {
		gap = *pc.MinGapMs
	}
	switch {
	case gap < 0 || gap > store.MaxMinGapMs:
		add("pacing.min_gap_ms", "must be between 0 and %d", store.MaxMinGapMs)
		ok = false
	case batchRate > 0 && float64(gap) >= 1000/batchRate:
		add("pacing.min_gap_ms", "must be less than the mean gap 1/batch rate (%.6g ms at %g/s), or the gaps cannot vary", 1000/batchRate, batchRate)
		ok = false
	}
	if !ok {
		return store.Pacing{}
	}
	return store.Pacing{Mode: store.PacingRandom, MinGapMs: gap}
}

// checkAccountID says what is wrong with an account id, or "".
func checkAccountID(id string) string {
	switch {
	case id == "":
		return "is required"
	case len(id) > maxAccountIDBytes:
		return fmt.Sprintf("is longer than %d bytes", maxAccountIDBytes)
	case !utf8.ValidString(id):
		return "is not valid UTF-8"
	}
	for _, c := range id {
		if unicode.IsSpace(c) || !unicode.IsPrint(c) || c == '/' {
			return "must not contain spaces, slashes or control characters"
		}
	}
	return ""
}

func (s *server) getAccount(w http.ResponseWriter, r *http.Request, tenant string) *Problem {
	a, err := s.Store.GetAccount(r.Context(), tenant, r.PathValue("account"))
	if err != nil {
		return s.storeProblem(r, "account", err)
	}
	b, err := s.Store.GetBreaker(r.Context(), tenant, a.ID)
	if err != nil {
		return s.storeProblem(r, "account", err)
	}
	writeJSON(w, http.StatusOK, s.accountView(a, b))
	return nil
}

// breakerHistory answers GET /v1/accounts/{account}/breaker/history.
func (s *server) breakerHistory(w http.ResponseWriter, r *http.Request, tenant string) *Problem {
	a, err := s.Store.GetAccount(r.Context(), tenant, r.PathValue("account"))
	if err != nil {
		return s.storeProblem(r, "account", err)
	}
	h, err := s.Store.ListBreakerHistory(r.Context(), tenant, a.ID)
	if err != nil {
		return s.storeProblem(r, "breaker history", err)
	}
	out := BreakerHistory{Account: a.ID, Transitions: make([]BreakerTransition, 0, len(h))}
	for _, tr := range h {
		out.Transitions = append(out.Transitions, BreakerTransition{
			Seq: tr.Seq, From: string(tr.From), To: string(tr.To), At: tr.At.UTC(), Reason: tr.Reason,
			FailureRate: tr.FailureRate, Attempts: tr.Attempts, ConsecutiveFailures: tr.ConsecutiveFailures,
			Opens: tr.Opens, Until: timePtr(tr.Until),
		})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *server) listAccounts(w http.ResponseWriter, r *http.Request, tenant string) *Problem {
	as, err := s.Store.ListAccounts(r.Context(), tenant)
	if err != nil {
		return s.storeProblem(r, "accounts", err)
	}
	out := AccountList{Accounts: make([]Account, 0, len(as))}
	for _, a := range as {
		b, err := s.Store.GetBreaker(r.Context(), tenant, a.ID)
		if err != nil {
			return s.storeProblem(r, "account", err)
		}
		out.Accounts = append(out.Accounts, s.accountView(a, b))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
