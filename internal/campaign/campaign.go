// Package campaign runs scheduled campaigns: a stored campaign
// (store.Campaign) names a schedule in EventBridge syntax and a job
// request; each firing of the schedule becomes one job, however often the
// firing is delivered (DESIGN.md rule 7: the idempotency key is
// "campaign:<id>:<scheduled time>").
//
// In AWS an EventBridge rule per campaign (see Scheduler) invokes the
// submit function, which calls Fire. Locally the runtime asks Due every
// second and fires what is due (FireDue).
//
// A campaign is either a snapshot (its request holds the recipients) or a
// requery: at each firing the recipients are fetched from the business
// system's HTTPS source page by page through a RecipientSource.
package campaign

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"sync"
	"time"

	"github.com/qunfa/qunfa/internal/alert"
	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/submit"
)

// Modes of a campaign.
const (
	// ModeSnapshot: the stored request holds the recipients.
	ModeSnapshot = "snapshot"
	// ModeRequery: the recipients are fetched from Source at each firing.
	ModeRequery = "requery"
)

// JobSubmitter creates jobs; *submit.Submitter is one.
type JobSubmitter interface {
	Submit(ctx context.Context, p submit.Params) (submit.Result, error)
	Validate(ctx context.Context, p submit.Params) error
	// The staged path, which requery firings stream their pages into.
	CreateStaged(ctx context.Context, p submit.Params) (submit.Result, error)
	PutPart(ctx context.Context, p submit.PutPartParams) (submit.PutPartResult, error)
	Start(ctx context.Context, job store.Job, parts int) (store.JobView, error)
}

var _ JobSubmitter = (*submit.Submitter)(nil)

// Recipient is one addressee delivered by a RecipientSource.
type Recipient struct {
	Account string            `json:"account"`
	To      string            `json:"to"`
	Vars    map[string]string `json:"vars,omitempty"`
	Ref     string            `json:"ref,omitempty"`
}

// FetchParams asks a source for one page of recipients.
type FetchParams struct {
	// Source is the campaign's HTTPS URL.
	Source string
	// Cursor is "" for the first page, then the previous page's NextCursor.
	Cursor string
}

// Page is one page of recipients; NextCursor is "" after the last page.
type Page struct {
	Recipients []Recipient
	NextCursor string
}

// RecipientSource fetches the recipients of a requery campaign from the
// business system (httpsource is the HTTP adapter).
type RecipientSource interface {
	FetchPage(ctx context.Context, p FetchParams) (Page, error)
}

// Scheduler arranges for a campaign's firings to reach Fire: in AWS an
// EventBridge rule per campaign (ebscheduler); locally nothing (the local
// runtime polls Due instead, see NoScheduler).
type Scheduler interface {
	// Upsert creates or replaces the campaign's schedule (disabled when the
	// campaign is).
	Upsert(ctx context.Context, c store.Campaign) error
	// Delete removes it; an absent schedule is no error.
	Delete(ctx context.Context, tenant, id string) error
}

// NoScheduler is the local runtime's Scheduler: it does nothing, because
// the runtime fires due campaigns itself.
type NoScheduler struct{}

var _ Scheduler = NoScheduler{}

// Upsert does nothing.
func (NoScheduler) Upsert(context.Context, store.Campaign) error { return nil }

// Delete does nothing.
func (NoScheduler) Delete(context.Context, string, string) error { return nil }

// SourceLimits bound what a requery firing takes from its source. There
// is no cap on recipients: each page becomes a part of a staged job, so a
// firing holds one page in memory whatever the campaign's size (the
// tenant's daily recipients quota applies when the job starts).
type SourceLimits struct {
	// MaxPages per firing (default and at most store.MaxPartNumber).
	MaxPages int
	// Timeout bounds the whole fetch (default 2 min).
	Timeout time.Duration
}

func (l SourceLimits) withDefaults() SourceLimits {
	if l.MaxPages <= 0 || l.MaxPages > store.MaxPartNumber {
		l.MaxPages = store.MaxPartNumber
	}
	if l.Timeout <= 0 {
		l.Timeout = 2 * time.Minute
	}
	return l
}

// Campaigns fires stored campaigns.
type Campaigns struct {
	Store     store.Store
	Submitter JobSubmitter
	// Source fetches requery recipients (nil: requery firings fail).
	Source RecipientSource
	Clock  clock.Clock
	// Alerts receives CampaignSkipped (nil: none).
	Alerts alert.Publisher
	Log    *slog.Logger
	Limits SourceLimits
	// Zone is the time zone of the cron schedules of campaigns that name
	// none: the stack's default (nil: UTC).
	Zone *time.Location

	mu      sync.Mutex
	retryAt map[string]time.Time // FireDue: failed firings, when to try again
}

func (c *Campaigns) log() *slog.Logger {
	if c.Log == nil {
		return slog.Default()
	}
	return c.Log
}

// Outcome says what a firing did.
type Outcome string

// Outcomes of Fire.
const (
	// Fired: the firing's job was created, or found (the same firing
	// submitted again: Created is false).
	Fired Outcome = "fired"
	// Duplicate: this firing was already handled; nothing was done.
	Duplicate Outcome = "duplicate"
	// Superseded: a later firing was already handled; this older one is
	// dropped.
	Superseded Outcome = "superseded"
	// SkippedLate: the firing started more than MaxDelaySec after its
	// scheduled time; a CampaignSkipped alert was published, no job made.
	SkippedLate Outcome = "skipped_late"
	// SkippedDisabled: the campaign is disabled.
	SkippedDisabled Outcome = "skipped_disabled"
)

// FireResult is what one firing did.
type FireResult struct {
	Outcome Outcome
	// Key is the firing's idempotency key.
	Key string
	// Job is the firing's job (Outcome Fired only).
	Job     store.Job
	Created bool
}

// IdempotencyKey is the key of a campaign's firing: one job per campaign
// and scheduled time.
func IdempotencyKey(id string, scheduledAt time.Time) string {
	return "campaign:" + id + ":" + scheduledAt.UTC().Format(time.RFC3339)
}

// Meta keys Fire sets on a campaign's jobs.
const (
	MetaCampaign    = "campaign"
	MetaScheduledAt = "scheduled_at"
	MetaMode        = "mode"
	MetaQuery       = "query" // requery: the source URL, without its query string
)

// Fire handles one firing of a campaign, scheduled for scheduledAt:
// skipped when the campaign is disabled or the firing starts more than
// MaxDelaySec late (a CampaignSkipped alert), otherwise a job is made with
// IdempotencyKey, so a firing delivered twice makes one job: a snapshot
// campaign submits its stored request; a requery campaign streams its
// source into a staged job (submitRequery). The campaign's LastFiredAt
// records the handled firing. A campaign that does not exist is
// store.ErrNotFound. A failure (bad source data, invalid request) starts
// no job and may be retried: a snapshot firing stores nothing, a requery
// firing keeps its staging job for the retry to go on with.
func (c *Campaigns) Fire(ctx context.Context, tenant, id string, scheduledAt time.Time) (FireResult, error) {
	if scheduledAt.IsZero() {
		return FireResult{}, errors.New("fire campaign: no scheduled time")
	}
	scheduledAt = scheduledAt.UTC()
	key := IdempotencyKey(id, scheduledAt)
	res := FireResult{Key: key}
	cmp, err := c.Store.GetCampaign(ctx, tenant, id)
	if err != nil {
		return res, fmt.Errorf("fire campaign %q: %w", id, err)
	}
	now := c.Clock.Now()
	late := cmp.MaxDelaySec > 0 && now.Sub(scheduledAt) > time.Duration(cmp.MaxDelaySec)*time.Second
	log := c.log().With(slog.String("tenant", tenant), slog.String("campaign", id), slog.Time("scheduled_at", scheduledAt))
	switch {
	case !cmp.Enabled:
		res.Outcome = SkippedDisabled
		log.Info("campaign firing skipped: campaign disabled")
		return res, nil
	case scheduledAt.Before(cmp.LastFiredAt):
		res.Outcome = Superseded
		log.Warn("campaign firing dropped: a later firing was handled", slog.Time("last_fired_at", cmp.LastFiredAt))
		return res, nil
	case scheduledAt.Equal(cmp.LastFiredAt) && (late || cmp.Mode == ModeRequery):
		// Handled before: a redelivery. (A snapshot firing not yet late is
		// submitted again below, which finds its job.)
		res.Outcome = Duplicate
		log.Info("campaign firing already handled")
		return res, nil
	case late:
		res.Outcome = SkippedLate
		log.Warn("campaign firing skipped: too late", slog.Time("started_at", now), slog.Int("max_delay_sec", cmp.MaxDelaySec))
		alert.Emit(ctx, c.Alerts, c.log(), alert.Event{Type: alert.CampaignSkipped, Tenant: tenant, Time: now,
			Detail: alert.CampaignSkippedDetail{CampaignID: id, ScheduledAt: scheduledAt, StartedAt: now, MaxDelaySec: cmp.MaxDelaySec}})
		return res, c.recordFired(ctx, tenant, id, scheduledAt)
	}

	params := submit.Params{Tenant: tenant, CreatedBy: "campaign:" + id, IdempotencyKey: key,
		Meta: map[string]string{MetaCampaign: id, MetaScheduledAt: scheduledAt.Format(time.RFC3339), MetaMode: cmp.Mode}}
	var sub submit.Result
	switch cmp.Mode {
	case ModeSnapshot:
		sub, err = c.submitSnapshot(ctx, cmp, params)
	case ModeRequery:
		sub, err = c.submitRequery(ctx, cmp, params, log)
	default:
		err = fmt.Errorf("unknown mode %q", cmp.Mode)
	}
	switch {
	case errors.Is(err, submit.ErrIdempotencyConflict):
		// The firing's job exists, made from another request (the
		// campaign was edited since).
		res.Outcome = Duplicate
		log.Info("campaign firing already made its job")
		return res, c.recordFired(ctx, tenant, id, scheduledAt)
	case err != nil:
		return res, fmt.Errorf("fire campaign %q: %w", id, err)
	}
	res.Outcome, res.Job, res.Created = Fired, sub.Job.Job, sub.Created
	log.Info("campaign fired", slog.String("job", sub.Job.Job.ID), slog.Bool("created", sub.Created), slog.Int64("total", sub.Job.Job.Total))
	return res, c.recordFired(ctx, tenant, id, scheduledAt)
}

// submitSnapshot submits the campaign's stored request.
func (c *Campaigns) submitSnapshot(ctx context.Context, cmp store.Campaign, params submit.Params) (submit.Result, error) {
	req, err := campaignRequest(cmp)
	if err != nil {
		return submit.Result{}, err
	}
	params.Request = req
	sub, err := c.Submitter.Submit(ctx, params)
	// A concurrent delivery of the same firing may be writing the
	// snapshot; submitting again finishes or finds the job.
	for try := 0; try < 3 && errors.Is(err, store.ErrInvalidTransition); try++ {
		sub, err = c.Submitter.Submit(ctx, params)
	}
	return sub, err
}

// recordFired moves the campaign's LastFiredAt forward to scheduledAt. The
// campaign is read again just before, so an edit made during the firing
// is kept.
func (c *Campaigns) recordFired(ctx context.Context, tenant, id string, scheduledAt time.Time) error {
	cmp, err := c.Store.GetCampaign(ctx, tenant, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil // deleted meanwhile
	}
	if err != nil {
		return fmt.Errorf("record firing of campaign %q: %w", id, err)
	}
	if !scheduledAt.After(cmp.LastFiredAt) {
		return nil
	}
	cmp.LastFiredAt = scheduledAt
	if _, err := c.Store.PutCampaign(ctx, cmp); err != nil {
		return fmt.Errorf("record firing of campaign %q: %w", id, err)
	}
	return nil
}

// DecodeRequest reads a campaign's stored job request.
func DecodeRequest(raw []byte) (submit.Request, error) {
	var req submit.Request
	if len(raw) == 0 {
		return req, errors.New("the campaign has no request")
	}
	if err := json.Unmarshal(raw, &req); err != nil {
		return req, fmt.Errorf("the campaign's request: %w", err)
	}
	return req, nil
}

// campaignRequest is the campaign's stored job request, named after the
// campaign when it has no name of its own.
func campaignRequest(cmp store.Campaign) (submit.Request, error) {
	req, err := DecodeRequest(cmp.Request)
	if err != nil {
		return req, err
	}
	if req.Name == "" {
		req.Name = cmp.Name
	}
	return req, nil
}

// submitRequery streams the source into a staged job (DESIGN.md, "Staged
// submission"): the firing's key makes or finds a staging job, each
// non-empty page of the source becomes the next part, and the job is
// started once the last page is in; planning then runs as queue work. A
// firing that fails midway leaves its job staging, and the next delivery
// of the firing goes on with it: parts already stored are kept (a part
// the source now answers differently keeps its first body, as a source
// paged while it changes would give). Left alone, a staging job expires.
func (c *Campaigns) submitRequery(ctx context.Context, cmp store.Campaign, params submit.Params, log *slog.Logger) (submit.Result, error) {
	if c.Source == nil {
		return submit.Result{}, errors.New("requery campaign, but no recipient source is configured")
	}
	req, err := campaignRequest(cmp)
	if err != nil {
		return submit.Result{}, err
	}
	req.Recipients, req.Staged = nil, true
	params.Request = req
	params.Meta[MetaQuery] = RedactQuery(cmp.Source) // its query may hold the tenant's credentials
	lim := c.Limits.withDefaults()
	ctx, cancel := context.WithTimeout(ctx, lim.Timeout)
	defer cancel()
	// The first page before anything is stored: a source that is down
	// leaves no job behind.
	first, err := c.Source.FetchPage(ctx, FetchParams{Source: cmp.Source})
	if err != nil {
		return submit.Result{}, fmt.Errorf("source page 1 (cursor \"\"): %w", err)
	}
	sub, err := c.Submitter.CreateStaged(ctx, params)
	if err != nil || sub.Job.Job.Status != store.JobStaging {
		return sub, err // an error, or found started by an earlier delivery
	}
	job := sub.Job.Job
	parts, err := c.streamParts(ctx, cmp, job, first, lim.MaxPages, log)
	if err != nil {
		return sub, err
	}
	view, err := c.Submitter.Start(ctx, job, parts)
	if errors.Is(err, submit.ErrNotStaging) {
		// Started by a concurrent delivery of the same firing.
		if view, err = c.Store.GetJob(ctx, job.ID); err == nil && view.Job.Status == store.JobStaging {
			err = fmt.Errorf("start job %s: %w", job.ID, submit.ErrNotStaging)
		}
	}
	if err != nil {
		return sub, err
	}
	sub.Job = view
	return sub, nil
}

// streamParts stores the source's pages, from the first one (fetched
// already) to the last, as parts 1..n of the staging job, and returns n.
// Empty pages make no part.
func (c *Campaigns) streamParts(ctx context.Context, cmp store.Campaign, job store.Job, first Page, maxPages int, log *slog.Logger) (int, error) {
	page, cursor, pages, parts := first, "", 1, 0
	seen := map[string]bool{}
	for {
		if len(page.Recipients) > 0 {
			body, err := partBody(page.Recipients)
			if err != nil {
				return 0, fmt.Errorf("source page %d (cursor %q): %w", pages, cursor, err)
			}
			_, err = c.Submitter.PutPart(ctx, submit.PutPartParams{Job: job, Number: parts + 1, MediaType: submit.MediaJSON, Body: body})
			switch {
			case errors.Is(err, submit.ErrPartConflict):
				log.Info("requery firing: kept the part an earlier delivery stored", slog.String("job", job.ID), slog.Int("part", parts+1))
			case err != nil:
				return 0, fmt.Errorf("source page %d (cursor %q): %w", pages, cursor, err)
			}
			parts++
		}
		if page.NextCursor == "" {
			break
		}
		if seen[page.NextCursor] {
			return 0, fmt.Errorf("source page %d: next_cursor %q was given before (the source loops)", pages, page.NextCursor)
		}
		seen[page.NextCursor] = true
		cursor = page.NextCursor
		if pages == maxPages {
			return 0, fmt.Errorf("source %s: more than %d pages", RedactQuery(cmp.Source), maxPages)
		}
		var err error
		if page, err = c.Source.FetchPage(ctx, FetchParams{Source: cmp.Source, Cursor: cursor}); err != nil {
			return 0, fmt.Errorf("source page %d (cursor %q): %w", pages+1, cursor, err)
		}
		pages++
	}
	if parts == 0 {
		return 0, fmt.Errorf("source %s: no recipients", RedactQuery(cmp.Source))
	}
	return parts, nil
}

// partBody is a source page as the JSON body of a staged part.
func partBody(rcs []Recipient) ([]byte, error) {
	out := make([]submit.Recipient, len(rcs))
	for i, r := range rcs {
		if r.Account == "" || r.To == "" {
			return nil, fmt.Errorf("recipient %d has no account or to", i)
		}
		out[i] = submit.Recipient{Account: r.Account, To: r.To, Vars: r.Vars, Ref: r.Ref}
	}
	return json.Marshal(struct {
		Recipients []submit.Recipient `json:"recipients"`
	}{out})
}

// RedactQuery is a source URL without its query string, which may hold
// the tenant's credentials for its source: fit for logs and job meta.
func RedactQuery(src string) string {
	u, err := url.Parse(src)
	if err != nil {
		return "(unparsable source)"
	}
	if u.RawQuery != "" {
		u.RawQuery = "…"
	}
	u.User, u.Fragment = nil, ""
	return u.String()
}
