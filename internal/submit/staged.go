package submit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/qunfa/qunfa/internal/content"
	"github.com/qunfa/qunfa/internal/dispatch"
	"github.com/qunfa/qunfa/internal/store"
)

// Staged submission (DESIGN.md, "Staged submission"): CreateStaged makes a
// job in status staging, PutPart stores its recipients part by part, Start
// checks the parts and hands planning to the work queue (Plan), and the
// job runs once planned. A staging job never sends.

// Errors of the staged path.
var (
	// ErrNotStaging: the job is not (or no longer) staging.
	ErrNotStaging = errors.New("the job is not staging")
	// ErrPartConflict: the part was uploaded before with another body.
	ErrPartConflict = errors.New("the part was already uploaded with a different body")
)

// staging returns the staged-submission aggregate of the store.
func (s *Submitter) staging() (store.StagingStore, error) {
	if s.Staging != nil {
		return s.Staging, nil
	}
	if ss, ok := s.Store.(store.StagingStore); ok {
		return ss, nil
	}
	return nil, fmt.Errorf("staged submission: %T keeps no staged parts", s.Store)
}

// CreateStaged creates a job in status staging: the request without
// recipients (they come in parts). Idempotent like Submit.
func (s *Submitter) CreateStaged(ctx context.Context, p Params) (Result, error) {
	lim := s.Limits.withDefaults()
	if len(p.Request.Recipients) > 0 {
		return Result{}, &ValidationError{Errors: []FieldError{{Field: "recipients",
			Message: "must be absent for a staged job: upload them with PUT /v1/jobs/{id}/recipients/{part}"}}}
	}
	if err := s.checkJobFields(p.Request, lim); err != nil {
		return Result{}, err
	}
	now := s.Clock.Now()
	key := p.IdempotencyKey
	if key == "" {
		key = "auto-" + newID(now)
	}
	created, err := s.Store.CreateJob(ctx, store.CreateJobParams{Job: store.Job{
		ID: newID(now), Tenant: p.Tenant, Name: p.Request.Name, Template: p.Request.Template,
		IdempotencyKey: key, RequestHash: RequestHash(p.Request), Status: store.JobStaging,
		Budget: p.Request.Budget, RatePerSec: p.Request.RatePerSec, CreatedBy: p.CreatedBy, CreatedAt: now,
		Meta: p.Meta, Metadata: p.Request.Metadata, Canary: p.Request.Canary.canaryCount(math.MaxInt64),
	}})
	if errors.Is(err, store.ErrConflict) {
		return Result{}, ErrIdempotencyConflict
	}
	if err != nil {
		return Result{}, fmt.Errorf("create staged job: %w", err)
	}
	view, err := s.Store.GetJob(ctx, created.Job.ID)
	if err != nil {
		return Result{}, fmt.Errorf("read job %s: %w", created.Job.ID, err)
	}
	return Result{Job: view, Created: created.Created}, nil
}

// checkJobFields validates the fields of a request other than its
// recipients.
func (s *Submitter) checkJobFields(r Request, lim Limits) error {
	var errs []FieldError
	add := func(field, format string, args ...any) {
		errs = append(errs, FieldError{Field: field, Message: fmt.Sprintf(format, args...)})
	}
	if strings.TrimSpace(r.Template) == "" {
		add("template", "is required")
	} else if len(r.Template) > lim.MaxTemplateBytes {
		add("template", "is longer than %d bytes", lim.MaxTemplateBytes)
	} else if _, err := content.Parse(r.Template); err != nil {
		add("template", "%v", err)
	}
	if len(r.Name) > lim.MaxFieldBytes {
		add("name", "is longer than %d bytes", lim.MaxFieldBytes)
	}
	if r.Budget < 0 {
		add("budget", "must be 0 (none) or positive")
	}
	if r.RatePerSec < 0 {
		add("rate_per_sec", "must be 0 (none) or positive")
	}
	checkMetadata(r.Metadata, add)
	checkCanary(r.Canary, true, add)
	if len(errs) > 0 {
		return &ValidationError{Errors: errs}
	}
	return nil
}

// PutPartParams is one uploaded part.
type PutPartParams struct {
	Job       store.Job // the staging job (the caller checked its tenant)
	Number    int
	MediaType string // MediaJSON, MediaNDJSON or MediaCSV
	Body      []byte
}

// PutPartResult is the stored part.
type PutPartResult struct {
	Part    store.PartInfo
	Created bool
}

// PutPart validates and stores one part of a staging job: every recipient
// checked as Submit checks them (errors by line for NDJSON and CSV), and
// nothing of the part kept when one is wrong. The same part with the same
// body again is harmless; with another body, ErrPartConflict.
func (s *Submitter) PutPart(ctx context.Context, p PutPartParams) (PutPartResult, error) {
	ss, err := s.staging()
	if err != nil {
		return PutPartResult{}, err
	}
	if p.Job.Status != store.JobStaging {
		return PutPartResult{}, fmt.Errorf("%w: job %s is %s", ErrNotStaging, p.Job.ID, p.Job.Status)
	}
	if p.Number < 1 || p.Number > store.MaxPartNumber {
		return PutPartResult{}, &ValidationError{Errors: []FieldError{{Field: "part", Message: fmt.Sprintf("must be from 1 to %d", store.MaxPartNumber)}}}
	}
	hash := partHash(p.MediaType, p.Body)
	// A repeated upload is answered without parsing again.
	if parts, err := ss.ListParts(ctx, p.Job.ID); err == nil {
		for _, pi := range parts {
			if pi.Number == p.Number && pi.Hash == hash {
				return PutPartResult{Part: pi}, nil
			} else if pi.Number == p.Number {
				return PutPartResult{}, ErrPartConflict
			}
		}
	}
	rcs, lines, errs := ParsePart(p.MediaType, p.Body)
	if len(errs) > 0 {
		return PutPartResult{}, &ValidationError{Errors: errs}
	}
	lim := s.Limits.withDefaults()
	tmpl, err := content.Parse(p.Job.Template)
	if err != nil {
		return PutPartResult{}, fmt.Errorf("job %s template: %w", p.Job.ID, err)
	}
	add := func(field, format string, args ...any) {
		if len(errs) < maxPartErrors {
			errs = append(errs, FieldError{Field: field, Message: fmt.Sprintf(format, args...)})
		}
	}
	accounts := map[string]store.Account{}
	data := make([]byte, 0, len(p.Body))
	for i, rc := range rcs {
		f := "recipients[" + strconv.Itoa(i) + "]"
		if lines != nil {
			f = "line " + strconv.Itoa(lines[i])
		}
		if err := s.checkRecipient(ctx, p.Job.Tenant, lim, tmpl, accounts, rc, f, i, add); err != nil {
			return PutPartResult{}, err
		}
		data = encodeRecipient(data, rc)
	}
	if len(errs) > 0 {
		return PutPartResult{}, &ValidationError{Errors: errs}
	}
	res, err := ss.PutPart(ctx, store.Part{
		JobID: p.Job.ID, Number: p.Number, Hash: hash, Recipients: len(rcs), Bytes: int64(len(p.Body)),
		Data: data, CreatedAt: s.Clock.Now(),
	})
	if errors.Is(err, store.ErrConflict) {
		return PutPartResult{}, ErrPartConflict
	}
	if err != nil {
		return PutPartResult{}, fmt.Errorf("store part %d of job %s: %w", p.Number, p.Job.ID, err)
	}
	return PutPartResult{Part: res.Part, Created: res.Created}, nil
}

// ListParts lists the stored parts of a job by number (none once the job
// is planned or discarded). Hash is PartDigest of the part's media type
// and body.
func (s *Submitter) ListParts(ctx context.Context, job store.Job) ([]store.PartInfo, error) {
	ss, err := s.staging()
	if err != nil {
		return nil, err
	}
	parts, err := ss.ListParts(ctx, job.ID)
	if err != nil {
		return nil, fmt.Errorf("list parts of job %s: %w", job.ID, err)
	}
	sort.Slice(parts, func(i, j int) bool { return parts[i].Number < parts[j].Number })
	return parts, nil
}

// PartDigest is the hex SHA-256 of a part's media type, a newline and
// its body: what identifies a stored part (GET /v1/jobs/{id}/recipients
// shows it as digest).
func PartDigest(mediaType string, body []byte) string { return partHash(mediaType, body) }

// partHash identifies a part's body.
func partHash(mediaType string, body []byte) string {
	h := sha256.New()
	h.Write([]byte(mediaType + "\n"))
	h.Write(body)
	return hex.EncodeToString(h.Sum(nil))
}

// Start checks that parts 1..parts of a staging job are all there, records
// the planning checkpoint, moves the job to starting and enqueues its
// planning (Plan). It answers at once whatever the job's size. Starting a
// job that is starting or running already with the same number of parts
// returns it (and repairs a lost planning message).
func (s *Submitter) Start(ctx context.Context, job store.Job, parts int) (store.JobView, error) {
	ss, err := s.staging()
	if err != nil {
		return store.JobView{}, err
	}
	if parts < 1 || parts > store.MaxPartNumber {
		return store.JobView{}, &ValidationError{Errors: []FieldError{{Field: "parts", Message: fmt.Sprintf("must be from 1 to %d", store.MaxPartNumber)}}}
	}
	switch job.Status {
	case store.JobStaging:
	case store.JobStarting:
		st, err := s.loadPlan(ctx, ss, job.ID)
		if err != nil {
			return store.JobView{}, err
		}
		if st.state.Parts != parts {
			return store.JobView{}, fmt.Errorf("%w: job %s was started with %d parts", ErrNotStaging, job.ID, st.state.Parts)
		}
		if err := dispatch.SendPlan(ctx, s.Queue, job.ID, st.version); err != nil {
			return store.JobView{}, err
		}
		return s.Store.GetJob(ctx, job.ID)
	default:
		return store.JobView{}, fmt.Errorf("%w: job %s is %s", ErrNotStaging, job.ID, job.Status)
	}
	stored, err := ss.ListParts(ctx, job.ID)
	if err != nil {
		return store.JobView{}, fmt.Errorf("list parts of job %s: %w", job.ID, err)
	}
	have := make(map[int]bool, len(stored))
	for _, pi := range stored {
		have[pi.Number] = true
	}
	var missing []string
	for n := 1; n <= parts; n++ {
		if !have[n] {
			missing = append(missing, strconv.Itoa(n))
		}
	}
	if len(missing) > 0 {
		shown := missing[:min(len(missing), 20)]
		msg := "parts " + strings.Join(shown, ", ")
		if len(missing) > len(shown) {
			msg += fmt.Sprintf(" (and %d more)", len(missing)-len(shown))
		}
		return store.JobView{}, &ValidationError{Errors: []FieldError{{Field: "parts", Message: msg + " have not been uploaded"}}}
	}
	// The quota counts the recipients as uploaded, before duplicates and
	// suppressions are dropped (the planner has not read them yet).
	var recipients int64
	for _, pi := range stored {
		if pi.Number <= parts {
			recipients += int64(pi.Recipients)
		}
	}
	release, err := s.reserveQuota(ctx, job.Tenant, recipients)
	if err != nil {
		return store.JobView{}, err
	}
	started := false
	defer func() {
		if !started {
			release(ctx)
		}
	}()
	state, _ := json.Marshal(planState{Parts: parts, Attempted: -1, SavedAt: s.Clock.Now().UnixNano()})
	prev, err := ss.GetPlanState(ctx, job.ID)
	switch {
	case errors.Is(err, store.ErrNotFound):
		prev = store.PlanState{JobID: job.ID}
	case err != nil:
		return store.JobView{}, fmt.Errorf("read plan of job %s: %w", job.ID, err)
	}
	saved, err := ss.SavePlanState(ctx, store.PlanState{JobID: job.ID, Version: prev.Version, State: state})
	if err != nil {
		return store.JobView{}, fmt.Errorf("save plan of job %s: %w", job.ID, err)
	}
	if _, err := s.Store.TransitionJob(ctx, store.TransitionJobParams{
		JobID: job.ID, From: []store.JobStatus{store.JobStaging}, To: store.JobStarting, At: s.Clock.Now(),
	}); err != nil {
		return store.JobView{}, fmt.Errorf("start job %s: %w", job.ID, err)
	}
	started = true
	if err := dispatch.SendPlan(ctx, s.Queue, job.ID, saved.Version); err != nil {
		return store.JobView{}, err
	}
	return s.Store.GetJob(ctx, job.ID)
}

// Discard removes the parts and planning checkpoint of a job that will
// never be planned (cancelled or expired).
func (s *Submitter) Discard(ctx context.Context, jobID string) error {
	ss, err := s.staging()
	if err != nil {
		return err
	}
	return ss.DeleteParts(ctx, jobID)
}
