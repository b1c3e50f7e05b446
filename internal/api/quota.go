package api

import (
	"errors"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/submit"
)

// QuotaRequest is the body of PUT /v1/tenants/{tenant}/quota: both limits,
// 0 meaning unlimited.
type QuotaRequest struct {
	MaxRunningJobs      *int64 `json:"max_running_jobs"`
	MaxRecipientsPerDay *int64 `json:"max_recipients_per_day"`
}

// Quota is a tenant's quota as the platform operator set it. Active jobs
// (starting, running, paused) count against max_running_jobs; the
// recipients accepted into jobs in a UTC day against
// max_recipients_per_day. 0 is unlimited.
type Quota struct {
	Tenant              string     `json:"tenant"`
	MaxRunningJobs      int64      `json:"max_running_jobs"`
	MaxRecipientsPerDay int64      `json:"max_recipients_per_day"`
	UpdatedAt           *time.Time `json:"updated_at"`
}

func quotaView(q store.Quota) Quota {
	return Quota{Tenant: q.Tenant, MaxRunningJobs: q.MaxRunningJobs, MaxRecipientsPerDay: q.MaxRecipientsPerDay, UpdatedAt: timePtr(q.UpdatedAt)}
}

func (s *server) routeQuotas() {
	s.handlePlatform("PUT /v1/tenants/{tenant}/quota", s.putQuota)
	s.handlePlatform("GET /v1/tenants/{tenant}/quota", s.getQuota)
}

// quotaStore is the store's QuotaStore, or a 500 problem when it has none.
func (s *server) quotaStore() (store.QuotaStore, *Problem) {
	if qs, ok := s.Store.(store.QuotaStore); ok {
		return qs, nil
	}
	return nil, newProblem(http.StatusInternalServerError, kindInternal, "this store keeps no quotas")
}

func (s *server) putQuota(w http.ResponseWriter, r *http.Request) *Problem {
	tenant := r.PathValue("tenant")
	body, p := readJSON(w, r, s.MaxBodyBytes)
	if p != nil {
		return p
	}
	var req QuotaRequest
	if p := decodeStrict(body, &req); p != nil {
		return p
	}
	var errs []submit.FieldError
	if msg := checkAccountID(tenant); msg != "" {
		errs = append(errs, submit.FieldError{Field: "tenant", Message: msg})
	}
	for _, f := range []struct {
		name string
		v    *int64
	}{{submit.QuotaRunningJobs, req.MaxRunningJobs}, {submit.QuotaRecipientsPerDay, req.MaxRecipientsPerDay}} {
		switch {
		case f.v == nil:
			errs = append(errs, submit.FieldError{Field: f.name, Message: "is required (0: unlimited)"})
		case *f.v < 0 || *f.v > math.MaxInt32:
			errs = append(errs, submit.FieldError{Field: f.name, Message: "must be from 0 (unlimited) to 2147483647"})
		}
	}
	if len(errs) > 0 {
		return newProblem(http.StatusUnprocessableEntity, kindValidation, "the quota was not set", errs...)
	}
	qs, p := s.quotaStore()
	if p != nil {
		return p
	}
	q := store.Quota{Tenant: tenant, MaxRunningJobs: *req.MaxRunningJobs, MaxRecipientsPerDay: *req.MaxRecipientsPerDay, UpdatedAt: s.Clock.Now()}
	if err := qs.PutQuota(r.Context(), q); err != nil {
		return s.storeProblem(r, "quota", err)
	}
	writeJSON(w, http.StatusOK, quotaView(q))
	return nil
}

func (s *server) getQuota(w http.ResponseWriter, r *http.Request) *Problem {
	tenant := r.PathValue("tenant")
	if msg := checkAccountID(tenant); msg != "" {
		return newProblem(http.StatusBadRequest, kindBadRequest, "invalid tenant", submit.FieldError{Field: "tenant", Message: msg})
	}
	qs, p := s.quotaStore()
	if p != nil {
		return p
	}
	q, err := qs.GetQuota(r.Context(), tenant)
	if err != nil {
		return s.storeProblem(r, "quota", err)
	}
	writeJSON(w, http.StatusOK, quotaView(q))
	return nil
}

// quotaProblem answers a job refused for its tenant's quota: 429 with
// Retry-After in whole seconds (nil when err is no quota error).
func quotaProblem(w http.ResponseWriter, err error) *Problem {
	var qerr *submit.QuotaError
	if !errors.As(err, &qerr) {
		return nil
	}
	secs := int64(math.Ceil(qerr.RetryAfter.Seconds()))
	w.Header().Set("Retry-After", strconv.FormatInt(max(secs, 1), 10))
	return newProblem(http.StatusTooManyRequests, kindQuota, qerr.Error()+"; nothing was stored",
		submit.FieldError{Field: qerr.Quota, Message: "over the tenant's quota"})
}
