package api

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/qunfa/qunfa/internal/control"
	"github.com/qunfa/qunfa/internal/submit"
)

// RedriveRequest is the body of POST /v1/jobs/{id}/redrive.
type RedriveRequest struct {
	Category string `json:"category"`
}

// RedriveResponse says how many items were re-pended.
type RedriveResponse struct {
	Redriven int `json:"redriven"`
}

// ResolveRequest is the body of POST /v1/jobs/{id}/items/{seq}/resolve.
type ResolveRequest struct {
	Outcome string `json:"outcome"`
}

func (s *server) redrive(w http.ResponseWriter, r *http.Request, tenant string) *Problem {
	v, p := s.tenantJob(r.Context(), r, tenant)
	if p != nil {
		return p
	}
	body, p := readJSON(w, r, s.MaxBodyBytes)
	if p != nil {
		return p
	}
	var req RedriveRequest
	if p := decodeStrict(body, &req); p != nil {
		return p
	}
	if !control.Redrivable(req.Category) {
		return newProblem(http.StatusUnprocessableEntity, kindValidation, "nothing was redriven",
			submit.FieldError{Field: "category", Message: "must be exhausted or permanent (failed items); cancelled and suppressed items are never sent"})
	}
	n, err := s.Control.Redrive(r.Context(), v.Job.ID, req.Category)
	if errors.Is(err, control.ErrNotAllowed) {
		return newProblem(http.StatusConflict, kindConflict, fmt.Sprintf("cannot redrive job %s: it is %s", v.Job.ID, v.Job.Status))
	}
	if err != nil {
		return s.storeProblem(r, "job "+strconv.Quote(v.Job.ID), err)
	}
	writeJSON(w, http.StatusOK, RedriveResponse{Redriven: n})
	return nil
}

func (s *server) resolve(w http.ResponseWriter, r *http.Request, tenant string) *Problem {
	v, p := s.tenantJob(r.Context(), r, tenant)
	if p != nil {
		return p
	}
	seq, err := strconv.ParseInt(r.PathValue("seq"), 10, 64)
	if err != nil || seq < 0 {
		return newProblem(http.StatusBadRequest, kindBadRequest, "item seq must be a non-negative integer")
	}
	if seq >= v.Job.Total {
		// Items are numbered 0 … total−1.
		return newProblem(http.StatusNotFound, kindNotFound, fmt.Sprintf("job %s has no item %d", v.Job.ID, seq))
	}
	body, p := readJSON(w, r, s.MaxBodyBytes)
	if p != nil {
		return p
	}
	var req ResolveRequest
	if p := decodeStrict(body, &req); p != nil {
		return p
	}
	out := control.Resolution(req.Outcome)
	if out != control.Delivered && out != control.Resend {
		return newProblem(http.StatusUnprocessableEntity, kindValidation, "the item was not changed",
			submit.FieldError{Field: "outcome", Message: `must be "delivered" or "resend"`})
	}
	it, err := s.Control.Resolve(r.Context(), v.Job.ID, seq, out)
	if errors.Is(err, control.ErrNotUnderReview) {
		return newProblem(http.StatusConflict, kindConflict,
			fmt.Sprintf("item %d of job %s is not under review (only items sent without a confirmed answer are)", seq, v.Job.ID))
	}
	if err != nil {
		return s.storeProblem(r, "item", err)
	}
	writeJSON(w, http.StatusOK, itemView(it))
	return nil
}
