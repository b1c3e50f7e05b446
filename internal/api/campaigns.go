package api

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"github.com/qunfa/qunfa/internal/netguard"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/qunfa/qunfa/internal/campaign"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/submit"
)

// CampaignRequest is the body of POST /v1/campaigns: a campaign created,
// or replaced when id names an existing one.
type CampaignRequest struct {
	// ID names the campaign; empty: a new id is made up.
	ID       string `json:"id"`
	Name     string `json:"name"`
	Schedule string `json:"schedule"`
	// Timezone is the IANA zone the cron schedule is read in (empty: the
	// stack's default).
	Timezone string `json:"timezone"`
	// Mode is "snapshot" or "requery".
	Mode string `json:"mode"`
	// Request is the job request (recipients for snapshot only).
	Request *submit.Request `json:"request"`
	// Source is the https URL of the recipients for requery.
	Source      string `json:"source"`
	MaxDelaySec int    `json:"max_delay_sec"`
	// Enabled defaults to true.
	Enabled *bool `json:"enabled"`
}

// Campaign is a scheduled campaign as the API shows it.
type Campaign struct {
	ID       string `json:"id"`
	Name     string `json:"name"`
	Schedule string `json:"schedule"`
	Timezone string `json:"timezone"`
	// EffectiveTimezone is the zone the schedule is read in: Timezone, or
	// the stack's default when the campaign names none (read-only).
	EffectiveTimezone string          `json:"effective_timezone"`
	Mode              string          `json:"mode"`
	Request           json.RawMessage `json:"request"`
	Source            string          `json:"source"`
	MaxDelaySec       int             `json:"max_delay_sec"`
	Enabled           bool            `json:"enabled"`
	// NextFireAt is the next firing as the local runtime counts it, in the
	// campaign's time zone (null when disabled or never again).
	NextFireAt  *time.Time `json:"next_fire_at"`
	LastFiredAt *time.Time `json:"last_fired_at"`
	CreatedBy   string     `json:"created_by"`
	CreatedAt   time.Time  `json:"created_at"`
	UpdatedAt   time.Time  `json:"updated_at"`
}

// CampaignList is a tenant's campaigns, ordered by id.
type CampaignList struct {
	Campaigns []Campaign `json:"campaigns"`
	// DefaultTimezone is the stack's default zone, the one a campaign
	// without a timezone of its own is read in (read-only).
	DefaultTimezone string `json:"default_timezone"`
}

// defaultZone is the IANA name of the stack's default campaign zone.
func (s *server) defaultZone() string {
	if s.CampaignZone == nil {
		return time.UTC.String()
	}
	return s.CampaignZone.String()
}

func (s *server) campaignView(c store.Campaign) Campaign {
	v := Campaign{ID: c.ID, Name: c.Name, Schedule: c.Schedule, Timezone: c.Timezone, EffectiveTimezone: cmp.Or(c.Timezone, s.defaultZone()),
		Mode: c.Mode, Request: json.RawMessage(c.Request),
		Source: c.Source, MaxDelaySec: c.MaxDelaySec, Enabled: c.Enabled, LastFiredAt: timePtr(c.LastFiredAt),
		CreatedBy: c.CreatedBy, CreatedAt: c.CreatedAt.UTC(), UpdatedAt: c.UpdatedAt.UTC()}
	if !json.Valid(v.Request) {
		v.Request = json.RawMessage("{}")
	}
	if sched, err := campaign.ScheduleOf(c, s.CampaignZone); err == nil && c.Enabled {
		v.NextFireAt = timePtr(sched.Next(s.Clock.Now()))
	}
	return v
}

func newCampaignID(now time.Time) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "c" + strconv.FormatInt(now.UnixMilli(), 36) + hex.EncodeToString(b[:])
}

func (s *server) putCampaign(w http.ResponseWriter, r *http.Request, tenant string) *Problem {
	body, p := readJSON(w, r, s.MaxBodyBytes)
	if p != nil {
		return p
	}
	var req CampaignRequest
	if p := decodeStrict(body, &req); p != nil {
		return p
	}
	now := s.Clock.Now()
	c := store.Campaign{Tenant: tenant, ID: req.ID, Name: req.Name, Schedule: req.Schedule, Timezone: req.Timezone, Mode: req.Mode,
		Source: req.Source, MaxDelaySec: req.MaxDelaySec, Enabled: req.Enabled == nil || *req.Enabled,
		CreatedBy: tenant, CreatedAt: now, UpdatedAt: now}
	if c.ID == "" {
		c.ID = newCampaignID(now)
	}
	if req.Request == nil {
		return newProblem(http.StatusUnprocessableEntity, kindValidation, "the campaign was not stored",
			submit.FieldError{Field: "request", Message: "is required: the job request (template, recipients for snapshot, budget, rate_per_sec)"})
	}
	if req.Request.Recipients == nil {
		req.Request.Recipients = []submit.Recipient{} // shown as [], not null
	}
	c.Request, _ = json.Marshal(req.Request)
	err := campaign.Validate(r.Context(), s.Submitter, c)
	if err == nil && c.Source != "" {
		// The source is dialled only to public addresses (httpsource checks
		// every connection); a source that names a private one now is
		// refused now.
		var res netguard.Resolver = net.DefaultResolver
		if s.Resolver != nil {
			res = s.Resolver
		}
		if gerr := netguard.CheckURL(r.Context(), c.Source, res, s.AllowPrivateURLs); gerr != nil {
			err = &submit.ValidationError{Errors: []submit.FieldError{{Field: "source", Message: gerr.Error()}}}
		}
	}
	var verr *submit.ValidationError
	switch {
	case errors.As(err, &verr):
		return newProblem(http.StatusUnprocessableEntity, kindValidation, "the campaign was not stored", verr.Errors...)
	case err != nil:
		return s.storeProblem(r, "campaign", err)
	}
	old, err := s.Store.GetCampaign(r.Context(), tenant, c.ID)
	exists := err == nil
	switch {
	case exists: // replaced: its history stays
		c.CreatedBy, c.CreatedAt, c.LastFiredAt = old.CreatedBy, old.CreatedAt, old.LastFiredAt
	case !errors.Is(err, store.ErrNotFound):
		return s.storeProblem(r, "campaign", err)
	}
	stored, err := s.Store.PutCampaign(r.Context(), c)
	if err != nil {
		return s.storeProblem(r, "campaign", err)
	}
	if err := s.Scheduler.Upsert(r.Context(), stored); err != nil {
		if !exists { // a refused request changes nothing
			_ = s.Store.DeleteCampaign(r.Context(), tenant, c.ID)
		}
		return s.internal(r, "schedule the campaign", err)
	}
	status := http.StatusCreated
	if exists {
		status = http.StatusOK
	}
	w.Header().Set("Location", "/v1/campaigns/"+url.PathEscape(stored.ID))
	writeJSON(w, status, s.campaignView(stored))
	return nil
}

func (s *server) getCampaign(w http.ResponseWriter, r *http.Request, tenant string) *Problem {
	c, err := s.Store.GetCampaign(r.Context(), tenant, r.PathValue("id"))
	if err != nil {
		return s.storeProblem(r, "campaign", err)
	}
	writeJSON(w, http.StatusOK, s.campaignView(c))
	return nil
}

func (s *server) listCampaigns(w http.ResponseWriter, r *http.Request, tenant string) *Problem {
	all, err := s.Store.ListCampaigns(r.Context(), tenant)
	if err != nil {
		return s.storeProblem(r, "campaigns", err)
	}
	out := CampaignList{Campaigns: make([]Campaign, 0, len(all)), DefaultTimezone: s.defaultZone()}
	for _, c := range all {
		out.Campaigns = append(out.Campaigns, s.campaignView(c))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// deleteCampaign removes the schedule first, then the campaign: a failure
// in between leaves a campaign without a schedule, and deleting again
// finishes.
func (s *server) deleteCampaign(w http.ResponseWriter, r *http.Request, tenant string) *Problem {
	id := r.PathValue("id")
	if _, err := s.Store.GetCampaign(r.Context(), tenant, id); err != nil {
		return s.storeProblem(r, "campaign", err)
	}
	if err := s.Scheduler.Delete(r.Context(), tenant, id); err != nil {
		return s.internal(r, "remove the campaign's schedule", err)
	}
	if err := s.Store.DeleteCampaign(r.Context(), tenant, id); err != nil {
		return s.storeProblem(r, "campaign", err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
