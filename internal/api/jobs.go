package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/qunfa/qunfa/internal/control"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/submit"
)

// replayedHeader marks the answer to a repeated submission (same
// Idempotency-Key and body): the earlier submission's job.
const replayedHeader = "Idempotent-Replayed"

// maxIdempotencyKeyBytes bounds the Idempotency-Key header.
const maxIdempotencyKeyBytes = 255

// Page sizes of the listings: the default and the largest a "limit"
// parameter may ask for.
const (
	defaultJobPage  = 20
	maxJobPage      = 100
	defaultItemPage = 100
	maxItemPage     = 1000
)

func (s *server) submitJob(w http.ResponseWriter, r *http.Request, tenant string) *Problem {
	key := r.Header.Get("Idempotency-Key")
	if msg := checkIdempotencyKey(key); msg != "" {
		return newProblem(http.StatusBadRequest, kindBadRequest, "the Idempotency-Key header "+msg,
			submit.FieldError{Field: "Idempotency-Key", Message: msg})
	}
	body, p := readJSON(w, r, s.MaxBodyBytes)
	if p != nil {
		return p
	}
	var req submit.Request
	if p := decodeStrict(body, &req); p != nil {
		return p
	}
	if key != "" {
		// One submission per tenant and key at a time in this process, so
		// concurrent repeats wait for the first and get its job (a replay) —
		// across processes the store's idempotency record decides.
		unlock := s.keyLocks.lock(tenant + "\x00" + key)
		defer unlock()
	}
	params := submit.Params{Tenant: tenant, CreatedBy: tenant, IdempotencyKey: key, Request: req}
	if req.Staged {
		return s.createStaged(w, r, params)
	}
	res, err := s.Submitter.Submit(r.Context(), params)
	// Concurrent submissions with one key: a loser may find the job released
	// by the winner while it rewrites the snapshot. Submitting again is how
	// submit finishes or finds a job, and then sees it running.
	for try := 0; try < 3 && errors.Is(err, store.ErrInvalidTransition); try++ {
		res, err = s.Submitter.Submit(r.Context(), params)
	}
	if p := quotaProblem(w, err); p != nil {
		return p
	}
	var verr *submit.ValidationError
	switch {
	case errors.As(err, &verr):
		return newProblem(http.StatusUnprocessableEntity, kindValidation, "the job was not created", verr.Errors...)
	case errors.Is(err, submit.ErrIdempotencyConflict):
		return newProblem(http.StatusConflict, kindIdempotency,
			"Idempotency-Key "+strconv.Quote(key)+" was already used for a job with a different body; use a new key for a new job")
	case err != nil:
		return s.storeProblem(r, "job", err)
	}
	// A replay answers with the first answer's status (every submission
	// that returns a job was accepted: 202) and says it is a replay, as
	// Stripe does; v1 answered 200.
	if !res.Created {
		w.Header().Set(replayedHeader, "true")
	}
	w.Header().Set("Location", "/v1/jobs/"+url.PathEscape(res.Job.Job.ID))
	writeJSON(w, http.StatusAccepted, jobView(res.Job))
	return nil
}

// checkIdempotencyKey says what is wrong with an idempotency key, or "".
// An absent key is allowed: the job is then not idempotent.
func checkIdempotencyKey(key string) string {
	if len(key) > maxIdempotencyKeyBytes {
		return fmt.Sprintf("is longer than %d bytes", maxIdempotencyKeyBytes)
	}
	for _, c := range key {
		if c > unicode.MaxASCII || !unicode.IsPrint(c) {
			return "must be printable ASCII"
		}
	}
	return ""
}

// tenantJob reads a job of the caller's tenant; another tenant's job is
// not found, like a job that does not exist.
func (s *server) tenantJob(ctx context.Context, r *http.Request, tenant string) (store.JobView, *Problem) {
	id := r.PathValue("id")
	v, err := s.Store.GetJob(ctx, id)
	if err == nil && v.Job.Tenant != tenant {
		err = store.ErrNotFound
	}
	if err != nil {
		return store.JobView{}, s.storeProblem(r, "job "+strconv.Quote(id), err)
	}
	return v, nil
}

func (s *server) getJob(w http.ResponseWriter, r *http.Request, tenant string) *Problem {
	v, p := s.tenantJob(r.Context(), r, tenant)
	if p != nil {
		return p
	}
	writeJSON(w, http.StatusOK, jobView(v))
	return nil
}

func (s *server) listJobs(w http.ResponseWriter, r *http.Request, tenant string) *Problem {
	q := r.URL.Query()
	limit, p := pageLimit(q, defaultJobPage, maxJobPage)
	if p != nil {
		return p
	}
	page, err := s.Store.ListJobs(r.Context(), store.ListJobsParams{Tenant: tenant, Cursor: q.Get("cursor"), Limit: limit})
	if err != nil {
		return s.listProblem(r, "jobs", err)
	}
	out := JobList{Jobs: make([]Job, 0, len(page.Jobs)), NextCursor: page.NextCursor}
	for _, j := range page.Jobs {
		// Listings show the same view as GET /v1/jobs/{id}: counts live in
		// the shards, so read them.
		v, err := s.Store.GetJob(r.Context(), j.ID)
		if err != nil {
			return s.storeProblem(r, "jobs", err)
		}
		out.Jobs = append(out.Jobs, jobView(v))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

var (
	itemStatuses = []string{
		string(store.ItemPending), string(store.ItemSubmitted), string(store.ItemConfirmed),
		string(store.ItemFailed), string(store.ItemAbandoned),
	}
	itemCategories = []string{
		store.CategoryRetryable, store.CategoryRateLimited, store.CategoryAccountDown, store.CategoryPermanent, store.CategoryUncertain,
		store.CategoryExhausted, store.CategoryCancelled, store.CategorySuppressed,
		store.CategoryFrequencyCapped,
	}
)

func (s *server) listItems(w http.ResponseWriter, r *http.Request, tenant string) *Problem {
	q := r.URL.Query()
	var errs []submit.FieldError
	status, category, ref := q.Get("status"), q.Get("category"), q.Get("ref")
	review := q.Get("review")
	if review != "" && review != "true" && review != "false" {
		errs = append(errs, submit.FieldError{Field: "review", Message: "must be true or false"})
	}
	if review == "true" {
		// Items under review are submitted and uncertain; the page keeps
		// only those the reconciler marked (it may come back short).
		if status == "" {
			status = string(store.ItemSubmitted)
		}
		if category == "" {
			category = store.CategoryUncertain
		}
	}
	if status != "" && !slices.Contains(itemStatuses, status) {
		errs = append(errs, submit.FieldError{Field: "status", Message: fmt.Sprintf("must be one of %v", itemStatuses)})
	}
	if category != "" && !slices.Contains(itemCategories, category) {
		errs = append(errs, submit.FieldError{Field: "category", Message: fmt.Sprintf("must be one of %v", itemCategories)})
	}
	if utf8.RuneCountInString(ref) > submit.MaxRefChars || !utf8.ValidString(ref) {
		errs = append(errs, submit.FieldError{Field: "ref", Message: fmt.Sprintf("must be a reference of at most %d characters", submit.MaxRefChars)})
	}
	limit, p := pageLimit(q, defaultItemPage, maxItemPage)
	if p != nil {
		errs = append(errs, p.Errors...)
	}
	if len(errs) > 0 {
		return newProblem(http.StatusBadRequest, kindBadRequest, "invalid query parameters", errs...)
	}
	v, p := s.tenantJob(r.Context(), r, tenant)
	if p != nil {
		return p
	}
	page, err := s.Store.ListItems(r.Context(), store.ListItemsParams{
		JobID: v.Job.ID, Status: store.ItemStatus(status), Category: category, Ref: ref, Cursor: q.Get("cursor"), Limit: limit,
	})
	if err != nil {
		return s.listProblem(r, "items", err)
	}
	out := ItemList{Items: make([]Item, 0, len(page.Items)), NextCursor: page.NextCursor}
	for _, it := range page.Items {
		if review == "true" && !store.UnderReview(it) {
			continue
		}
		out.Items = append(out.Items, itemView(it))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// listProblem maps the error of a listing: a cursor the store cannot read
// is the caller's mistake, told without the store's words.
func (s *server) listProblem(r *http.Request, what string, err error) *Problem {
	if errors.Is(err, store.ErrInvalidArgument) && r.URL.Query().Get("cursor") != "" {
		return newProblem(http.StatusBadRequest, kindBadRequest, "invalid cursor",
			submit.FieldError{Field: "cursor", Message: "is not a next_cursor of this listing"})
	}
	return s.storeProblem(r, what, err)
}

// pageLimit reads the optional "limit" query parameter.
func pageLimit(q url.Values, def, most int) (int, *Problem) {
	raw := q.Get("limit")
	if raw == "" {
		return def, nil
	}
	n, err := strconv.Atoi(raw)
	if err != nil || n < 1 || n > most {
		msg := fmt.Sprintf("must be an integer from 1 to %d", most)
		return 0, newProblem(http.StatusBadRequest, kindBadRequest, "invalid query parameters",
			submit.FieldError{Field: "limit", Message: msg})
	}
	return n, nil
}

// command wraps a Controller method (pause, resume, cancel) as a route.
func (s *server) command(verb string, run func(ctx context.Context, jobID string) (store.JobView, error)) tenantHandler {
	return func(w http.ResponseWriter, r *http.Request, tenant string) *Problem {
		v, p := s.tenantJob(r.Context(), r, tenant)
		if p != nil {
			return p
		}
		after, err := run(r.Context(), v.Job.ID)
		if errors.Is(err, control.ErrNotAllowed) {
			return newProblem(http.StatusConflict, kindConflict,
				fmt.Sprintf("cannot %s job %s: it is %s", verb, v.Job.ID, v.Job.Status))
		}
		if err != nil {
			return s.storeProblem(r, "job "+strconv.Quote(v.Job.ID), err)
		}
		writeJSON(w, http.StatusOK, jobView(after))
		return nil
	}
}

func (s *server) updateLimits(w http.ResponseWriter, r *http.Request, tenant string) *Problem {
	body, p := readJSON(w, r, s.MaxBodyBytes)
	if p != nil {
		return p
	}
	var req LimitsRequest
	if p := decodeStrict(body, &req); p != nil {
		return p
	}
	var errs []submit.FieldError
	if req.RatePerSec == nil && req.Budget == nil {
		errs = append(errs, submit.FieldError{Field: "(body)", Message: "give rate_per_sec and/or budget"})
	}
	if req.RatePerSec != nil && *req.RatePerSec < 0 {
		errs = append(errs, submit.FieldError{Field: "rate_per_sec", Message: "must be 0 (none) or positive"})
	}
	if req.Budget != nil && *req.Budget < 0 {
		errs = append(errs, submit.FieldError{Field: "budget", Message: "must be 0 (none) or positive"})
	}
	if len(errs) > 0 {
		return newProblem(http.StatusUnprocessableEntity, kindValidation, "the job was not changed", errs...)
	}
	v, p := s.tenantJob(r.Context(), r, tenant)
	if p != nil {
		return p
	}
	after, err := s.Control.UpdateLimits(r.Context(), v.Job.ID, req.RatePerSec, req.Budget)
	if errors.Is(err, control.ErrNotAllowed) {
		return newProblem(http.StatusConflict, kindConflict,
			fmt.Sprintf("cannot change the limits of job %s: it is %s", v.Job.ID, v.Job.Status))
	}
	if err != nil {
		return s.storeProblem(r, "job "+strconv.Quote(v.Job.ID), err)
	}
	writeJSON(w, http.StatusOK, jobView(after))
	return nil
}

// keyLocks serialises work per key.
type keyLocks struct {
	mu    sync.Mutex
	locks map[string]*keyLock
}

type keyLock struct {
	mu   sync.Mutex
	refs int
}

// lock takes the lock of key and returns its release.
func (k *keyLocks) lock(key string) (unlock func()) {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = map[string]*keyLock{}
	}
	l := k.locks[key]
	if l == nil {
		l = &keyLock{}
		k.locks[key] = l
	}
	l.refs++
	k.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		k.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(k.locks, key)
		}
		k.mu.Unlock()
	}
}
