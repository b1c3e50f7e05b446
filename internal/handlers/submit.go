package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/qunfa/qunfa/internal/campaign"
	"github.com/qunfa/qunfa/internal/store"
)

// CampaignFiring is what a campaign's EventBridge rule delivers to the
// submit function: its target's InputTransformer (campaign/ebscheduler)
// turns the scheduled event into this JSON. Time is the scheduled event's
// time, the firing's scheduled minute.
type CampaignFiring struct {
	Tenant   string `json:"tenant"`
	Campaign string `json:"campaign"`
	Time     string `json:"time"`
}

// CampaignResult is what the submit function answers to a firing.
type CampaignResult struct {
	// Outcome is campaign.Outcome: fired, duplicate, superseded,
	// skipped_late, skipped_disabled, or not_found (the campaign was
	// deleted; its rule should be gone too).
	Outcome string `json:"outcome"`
	JobID   string `json:"job_id,omitempty"`
	Status  string `json:"status,omitempty"`
	Total   int64  `json:"total,omitempty"`
	Created bool   `json:"created"`
	Key     string `json:"idempotency_key"`
}

// OutcomeNotFound: the firing's campaign does not exist (any more).
const OutcomeNotFound = "not_found"

// Submit is the submit function's handler. It takes both of its triggers:
// API Gateway HTTP API requests (POST /v1/jobs, served by apiHandler — the
// HTTP API v1 — like the api function serves the other routes) and
// campaign firings from the campaigns' EventBridge rules (see Campaigns).
// Any other event is an error.
func Submit(apiHandler http.Handler, camps *campaign.Campaigns, log *slog.Logger) func(context.Context, json.RawMessage) (any, error) {
	viaAPI := API(apiHandler)
	firings := Campaigns(camps, log)
	return func(ctx context.Context, raw json.RawMessage) (any, error) {
		var probe struct {
			RouteKey       string          `json:"routeKey"`
			RequestContext json.RawMessage `json:"requestContext"`
			Campaign       *string         `json:"campaign"`
			DetailType     string          `json:"detail-type"`
		}
		if err := json.Unmarshal(raw, &probe); err != nil {
			return nil, fmt.Errorf("submit: event is not a JSON object: %w", err)
		}
		switch {
		case len(probe.RequestContext) > 0 && probe.RouteKey != "":
			var ev events.APIGatewayV2HTTPRequest
			if err := json.Unmarshal(raw, &ev); err != nil {
				return nil, fmt.Errorf("submit: API Gateway event: %w", err)
			}
			return viaAPI(ctx, ev)
		case probe.Campaign != nil && probe.DetailType == "":
			var f CampaignFiring
			dec := json.NewDecoder(strings.NewReader(string(raw)))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&f); err != nil {
				return nil, fmt.Errorf("submit: campaign firing: %w", err)
			}
			return firings(ctx, f)
		}
		return nil, errors.New(`submit: neither an API Gateway HTTP API (payload 2.0) request nor a campaign firing {"tenant", "campaign", "time"}`)
	}
}

// Campaigns fires the campaign of a firing (campaign.Campaigns.Fire). A
// firing that fails (a bad source answer, an invalid request, a store
// failure) fails the invocation with the reason logged, so EventBridge
// retries it and the function's error alarm fires; it stored nothing. A
// firing of a deleted campaign is logged and answered not_found.
func Campaigns(c *campaign.Campaigns, log *slog.Logger) func(context.Context, CampaignFiring) (CampaignResult, error) {
	return func(ctx context.Context, f CampaignFiring) (CampaignResult, error) {
		var errs []error
		if strings.TrimSpace(f.Tenant) == "" {
			errs = append(errs, errors.New("tenant is required"))
		}
		if !campaign.ValidID(f.Campaign) {
			errs = append(errs, fmt.Errorf("campaign %q is not a campaign id", f.Campaign))
		}
		at, err := time.Parse(time.RFC3339, f.Time)
		if err != nil {
			errs = append(errs, fmt.Errorf("time %q is not RFC 3339", f.Time))
		}
		if err := errors.Join(errs...); err != nil {
			log.Error("campaign firing refused", slog.Any("err", err))
			return CampaignResult{}, fmt.Errorf("campaign firing: %w", err)
		}
		res, err := c.Fire(ctx, f.Tenant, f.Campaign, at)
		out := CampaignResult{Outcome: string(res.Outcome), Key: res.Key, Created: res.Created}
		switch {
		case errors.Is(err, store.ErrNotFound):
			log.Warn("campaign firing for an unknown campaign", slog.String("tenant", f.Tenant), slog.String("campaign", f.Campaign))
			out.Outcome = OutcomeNotFound
			return out, nil
		case err != nil:
			log.Error("campaign firing failed", slog.String("tenant", f.Tenant), slog.String("campaign", f.Campaign),
				slog.String("time", f.Time), slog.Any("err", err))
			return CampaignResult{}, err
		}
		if res.Outcome == campaign.Fired {
			out.JobID, out.Status, out.Total = res.Job.ID, string(res.Job.Status), res.Job.Total
		}
		return out, nil
	}
}
