package api

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/qunfa/qunfa/internal/submit"
)

// Preview routes (DESIGN.md, "Preview, canary, frequency caps, warm-up"):
// what a job would send, with nothing sent and nothing stored.

// JobPreview is the answer to POST /v1/jobs/preview and POST
// /v1/jobs/{id}/preview.
type JobPreview struct {
	Total           int64               `json:"total"`
	Dropped         JobPreviewDropped   `json:"dropped"`
	ByAccount       []JobPreviewAccount `json:"by_account"`
	Samples         []JobPreviewSample  `json:"samples"`
	MaxContentBytes int                 `json:"max_content_bytes"`
}

// JobPreviewDropped counts the recipients the job would drop.
type JobPreviewDropped struct {
	Duplicate       int64 `json:"duplicate"`
	Suppressed      int64 `json:"suppressed"`
	FrequencyCapped int64 `json:"frequency_capped"`
}

// JobPreviewAccount is one account's share: recipients, the batch rate
// its shards would send at and the estimated duration.
type JobPreviewAccount struct {
	Account         string  `json:"account"`
	Recipients      int64   `json:"recipients"`
	BatchRatePerSec float64 `json:"batch_rate_per_sec"`
	EstSeconds      int64   `json:"est_seconds"`
}

// JobPreviewSample is one rendered message.
type JobPreviewSample struct {
	Account string `json:"account"`
	To      string `json:"to"`
	Content string `json:"content"`
}

func previewView(p submit.Preview) JobPreview {
	out := JobPreview{
		Total: p.Total,
		Dropped: JobPreviewDropped{Duplicate: p.Dropped.Duplicate, Suppressed: p.Dropped.Suppressed,
			FrequencyCapped: p.Dropped.FrequencyCapped},
		ByAccount:       make([]JobPreviewAccount, 0, len(p.ByAccount)),
		Samples:         make([]JobPreviewSample, 0, len(p.Samples)),
		MaxContentBytes: p.MaxContentBytes,
	}
	for _, a := range p.ByAccount {
		out.ByAccount = append(out.ByAccount, JobPreviewAccount{Account: a.Account, Recipients: a.Recipients,
			BatchRatePerSec: a.BatchRatePerSec, EstSeconds: a.EstSeconds})
	}
	for _, s := range p.Samples {
		out.Samples = append(out.Samples, JobPreviewSample{Account: s.Account, To: s.To, Content: s.Content})
	}
	return out
}

// previewJob answers POST /v1/jobs/preview: the body of POST /v1/jobs,
// validated the same way (422), nothing stored.
func (s *server) previewJob(w http.ResponseWriter, r *http.Request, tenant string) *Problem {
	body, p := readJSON(w, r, s.MaxBodyBytes)
	if p != nil {
		return p
	}
	var req submit.Request
	if p := decodeStrict(body, &req); p != nil {
		return p
	}
	pv, err := s.Submitter.Preview(r.Context(), submit.Params{Tenant: tenant, CreatedBy: tenant, Request: req})
	var verr *submit.ValidationError
	switch {
	case errors.As(err, &verr):
		return newProblem(http.StatusUnprocessableEntity, kindValidation, "the job cannot be previewed", verr.Errors...)
	case err != nil:
		return s.storeProblem(r, "preview", err)
	}
	writeJSON(w, http.StatusOK, previewView(pv))
	return nil
}

// previewStaged answers POST /v1/jobs/{id}/preview for a staging job,
// over the parts uploaded so far.
func (s *server) previewStaged(w http.ResponseWriter, r *http.Request, tenant string) *Problem {
	v, p := s.tenantJob(r.Context(), r, tenant)
	if p != nil {
		return p
	}
	pv, err := s.Submitter.PreviewStaged(r.Context(), v.Job)
	switch {
	case errors.Is(err, submit.ErrNotStaging):
		return newProblem(http.StatusConflict, kindConflict, fmt.Sprintf("cannot preview job %s: it is %s, not staging", v.Job.ID, v.Job.Status))
	case err != nil:
		return s.storeProblem(r, "job "+strconv.Quote(v.Job.ID), err)
	}
	writeJSON(w, http.StatusOK, previewView(pv))
	return nil
}
