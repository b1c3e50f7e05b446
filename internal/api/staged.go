package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/submit"
)

// Staged submission routes (DESIGN.md, "Staged submission").

// PartResponse is the answer to PUT /v1/jobs/{id}/recipients/{part}.
type PartResponse struct {
	Part       int   `json:"part"`
	Recipients int   `json:"recipients"`
	Bytes      int64 `json:"bytes"`
}

// PartList is the answer to GET /v1/jobs/{id}/recipients: the parts
// stored so far, by number, so an uploader can resume with the missing
// ones.
type PartList struct {
	Parts []PartListEntry `json:"parts"`
}

// PartListEntry is one stored part.
type PartListEntry struct {
	Part       int   `json:"part"`
	Recipients int   `json:"recipients"`
	Bytes      int64 `json:"bytes"`
	// Digest is the hex SHA-256 of the part's media type, a newline and
	// its body: an uploader that computes the same knows the stored part
	// is its own without uploading it again.
	Digest string `json:"digest"`
}

// StartRequest is the body of POST /v1/jobs/{id}/start.
type StartRequest struct {
	Parts int `json:"parts"`
}

// partMediaTypes is what a part upload takes, for the Accept header of a
// 415 answer.
const partMediaTypes = submit.MediaJSON + ", " + submit.MediaNDJSON + ", " + submit.MediaCSV

func (s *server) createStaged(w http.ResponseWriter, r *http.Request, params submit.Params) *Problem {
	res, err := s.Submitter.CreateStaged(r.Context(), params)
	var verr *submit.ValidationError
	switch {
	case errors.As(err, &verr):
		return newProblem(http.StatusUnprocessableEntity, kindValidation, "the job was not created", verr.Errors...)
	case errors.Is(err, submit.ErrIdempotencyConflict):
		return newProblem(http.StatusConflict, kindIdempotency,
			"Idempotency-Key "+strconv.Quote(params.IdempotencyKey)+" was already used for a job with a different body; use a new key for a new job")
	case err != nil:
		return s.storeProblem(r, "job", err)
	}
	if !res.Created {
		w.Header().Set(replayedHeader, "true")
	}
	w.Header().Set("Location", "/v1/jobs/"+url.PathEscape(res.Job.Job.ID))
	writeJSON(w, http.StatusCreated, jobView(res.Job))
	return nil
}

func (s *server) putPart(w http.ResponseWriter, r *http.Request, tenant string) *Problem {
	raw := r.PathValue("part")
	n, err := strconv.Atoi(raw)
	if err != nil || n < 1 || n > store.MaxPartNumber || strconv.Itoa(n) != raw {
		return newProblem(http.StatusBadRequest, kindBadRequest, "invalid part number",
			submit.FieldError{Field: "part", Message: fmt.Sprintf("must be an integer from 1 to %d", store.MaxPartNumber)})
	}
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || (mt != submit.MediaJSON && mt != submit.MediaNDJSON && mt != submit.MediaCSV) {
		p := newProblem(http.StatusUnsupportedMediaType, kindMediaType,
			fmt.Sprintf("the Content-Type %q is not supported here; send one of %s", r.Header.Get("Content-Type"), partMediaTypes))
		p.accept = partMediaTypes
		return p
	}
	body, err := readPart(w, r)
	if err != nil {
		return newProblem(http.StatusRequestEntityTooLarge, kindTooLarge,
			fmt.Sprintf("the part is larger than the limit of %d bytes (5 MiB; through API Gateway at most 4 MiB): split it into more parts", submit.MaxPartBytes))
	}
	v, p := s.tenantJob(r.Context(), r, tenant)
	if p != nil {
		return p
	}
	res, err := s.Submitter.PutPart(r.Context(), submit.PutPartParams{Job: v.Job, Number: n, MediaType: mt, Body: body})
	var verr *submit.ValidationError
	switch {
	case errors.As(err, &verr):
		return newProblem(http.StatusUnprocessableEntity, kindValidation, fmt.Sprintf("part %d was not stored", n), verr.Errors...)
	case errors.Is(err, submit.ErrPartConflict):
		return newProblem(http.StatusConflict, kindConflict,
			fmt.Sprintf("part %d of job %s was already uploaded with a different body; parts cannot be replaced", n, v.Job.ID))
	case errors.Is(err, submit.ErrNotStaging):
		return newProblem(http.StatusConflict, kindConflict, fmt.Sprintf("cannot upload parts of job %s: it is %s, not staging", v.Job.ID, v.Job.Status))
	case err != nil:
		return s.storeProblem(r, "job "+strconv.Quote(v.Job.ID), err)
	}
	writeJSON(w, http.StatusOK, PartResponse{Part: res.Part.Number, Recipients: res.Part.Recipients, Bytes: res.Part.Bytes})
	return nil
}

// readPart reads a part body of at most submit.MaxPartBytes (err: over).
func readPart(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	body, p := readBody(w, r, submit.MaxPartBytes)
	if p != nil {
		return nil, errors.New(p.Detail)
	}
	return body, nil
}

func (s *server) listParts(w http.ResponseWriter, r *http.Request, tenant string) *Problem {
	v, p := s.tenantJob(r.Context(), r, tenant)
	if p != nil {
		return p
	}
	parts, err := s.Submitter.ListParts(r.Context(), v.Job)
	if err != nil {
		return s.storeProblem(r, "job "+strconv.Quote(v.Job.ID), err)
	}
	out := PartList{Parts: make([]PartListEntry, 0, len(parts))}
	for _, pi := range parts {
		out.Parts = append(out.Parts, PartListEntry{Part: pi.Number, Recipients: pi.Recipients, Bytes: pi.Bytes, Digest: pi.Hash})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *server) startJob(w http.ResponseWriter, r *http.Request, tenant string) *Problem {
	body, p := readJSON(w, r, s.MaxBodyBytes)
	if p != nil {
		return p
	}
	var req StartRequest
	if p := decodeStrict(body, &req); p != nil {
		return p
	}
	v, p := s.tenantJob(r.Context(), r, tenant)
	if p != nil {
		return p
	}
	after, err := s.Submitter.Start(r.Context(), v.Job, req.Parts)
	if p := quotaProblem(w, err); p != nil {
		return p
	}
	var verr *submit.ValidationError
	switch {
	case errors.As(err, &verr):
		return newProblem(http.StatusUnprocessableEntity, kindValidation, "the job was not started", verr.Errors...)
	case errors.Is(err, submit.ErrNotStaging), errors.Is(err, store.ErrInvalidTransition):
		return newProblem(http.StatusConflict, kindConflict, fmt.Sprintf("cannot start job %s: it is %s", v.Job.ID, v.Job.Status))
	case err != nil:
		return s.storeProblem(r, "job "+strconv.Quote(v.Job.ID), err)
	}
	writeJSON(w, http.StatusAccepted, jobView(after))
	return nil
}

// cancelJob cancels a job; a staging job's parts are discarded with it (a
// starting job's by its planner, which sees the cancel).
func (s *server) cancelJob(ctx context.Context, jobID string) (store.JobView, error) {
	v, err := s.Control.Cancel(ctx, jobID)
	if err == nil && len(v.Shards) == 0 {
		if derr := s.Submitter.Discard(ctx, jobID); derr != nil && !strings.Contains(derr.Error(), "keeps no staged parts") {
			s.Logger.Warn("discard the parts of a cancelled job", slog.String("job", jobID), slog.Any("err", derr))
		}
	}
	return v, err
}
