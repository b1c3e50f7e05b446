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
	"strconv"
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
}

var _ JobSubmitter = (*submit.Submitter)(nil)

// Recipient is one addressee delivered by a RecipientSource.
type Recipient struct {
	Account string            `json:"account"`
	To      string            `json:"to"`
	Vars    map[string]string `json:"vars,omitempty"`
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

// SourceLimits bound what a requery firing takes from its source.
type SourceLimits struct {
	// MaxPages per firing (default 1,000).
	MaxPages int
	// MaxRecipients per firing (default 100,000).
	MaxRecipients int
	// Timeout bounds the whole fetch (default 2 min).
	Timeout time.Duration
}

func (l SourceLimits) withDefaults() SourceLimits {
	if l.MaxPages <= 0 {
		l.MaxPages = 1000
	}
	if l.MaxRecipients <= 0 {
		l.MaxRecipients = 100_000
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
	MetaQuery       = "query"  // requery: the source URL
	MetaCursor      = "cursor" // requery: the cursor of the last page fetched
	MetaPages       = "pages"  // requery: pages fetched
)

// Fire handles one firing of a campaign, scheduled for scheduledAt:
// skipped when the campaign is disabled or the firing starts more than
// MaxDelaySec late (a CampaignSkipped alert), otherwise the job request is
// built (the stored request, or the source's recipients) and submitted
// with IdempotencyKey, so a firing delivered twice makes one job. The
// campaign's LastFiredAt records the handled firing. A campaign that does
// not exist is store.ErrNotFound. A failure (bad source data, invalid
// request) stores nothing and may be retried.
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

	req, meta, err := c.buildRequest(ctx, cmp)
	if err != nil {
		return res, fmt.Errorf("fire campaign %q: %w", id, err)
	}
	meta[MetaCampaign] = id
	meta[MetaScheduledAt] = scheduledAt.Format(time.RFC3339)
	meta[MetaMode] = cmp.Mode
	params := submit.Params{Tenant: tenant, CreatedBy: "campaign:" + id, IdempotencyKey: key, Request: req, Meta: meta}
	sub, err := c.Submitter.Submit(ctx, params)
	// A concurrent delivery of the same firing may be writing the
	// snapshot; submitting again finishes or finds the job.
	for try := 0; try < 3 && errors.Is(err, store.ErrInvalidTransition); try++ {
		sub, err = c.Submitter.Submit(ctx, params)
	}
	switch {
	case errors.Is(err, submit.ErrIdempotencyConflict):
		// The firing's job exists, made from another request (the
		// campaign was edited, or its source answered differently since).
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

func (c *Campaigns) buildRequest(ctx context.Context, cmp store.Campaign) (submit.Request, map[string]string, error) {
	req, err := DecodeRequest(cmp.Request)
	if err != nil {
		return req, nil, err
	}
	if req.Name == "" {
		req.Name = cmp.Name
	}
	meta := map[string]string{}
	switch cmp.Mode {
	case ModeSnapshot:
		return req, meta, nil
	case ModeRequery:
	default:
		return req, nil, fmt.Errorf("unknown mode %q", cmp.Mode)
	}
	if c.Source == nil {
		return req, nil, errors.New("requery campaign, but no recipient source is configured")
	}
	lim := c.Limits.withDefaults()
	ctx, cancel := context.WithTimeout(ctx, lim.Timeout)
	defer cancel()
	req.Recipients = nil
	cursor, pages := "", 0
	seen := map[string]bool{}
	for {
		if pages == lim.MaxPages {
			return req, nil, fmt.Errorf("source %s: more than %d pages", RedactQuery(cmp.Source), lim.MaxPages)
		}
		page, err := c.Source.FetchPage(ctx, FetchParams{Source: cmp.Source, Cursor: cursor})
		if err != nil {
			return req, nil, fmt.Errorf("source page %d (cursor %q): %w", pages+1, cursor, err)
		}
		pages++
		if len(req.Recipients)+len(page.Recipients) > lim.MaxRecipients {
			return req, nil, fmt.Errorf("source %s: more than %d recipients", RedactQuery(cmp.Source), lim.MaxRecipients)
		}
		for i, r := range page.Recipients {
			if r.Account == "" || r.To == "" {
				return req, nil, fmt.Errorf("source page %d (cursor %q): recipient %d has no account or to", pages, cursor, i)
			}
			req.Recipients = append(req.Recipients, submit.Recipient{Account: r.Account, To: r.To, Vars: r.Vars})
		}
		if page.NextCursor == "" {
			break
		}
		if seen[page.NextCursor] {
			return req, nil, fmt.Errorf("source page %d: next_cursor %q was given before (the source loops)", pages, page.NextCursor)
		}
		seen[page.NextCursor] = true
		cursor = page.NextCursor
	}
	meta[MetaQuery] = RedactQuery(cmp.Source) // its query may hold the tenant's credentials
	meta[MetaCursor] = cursor
	meta[MetaPages] = strconv.Itoa(pages)
	return req, meta, nil
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
