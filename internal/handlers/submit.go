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

	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/submit"
)

// Campaign events: what a scheduler or a business system puts on qunfa's
// EventBridge bus to submit a job without the HTTP API.
const (
	// CampaignSource is the event source of campaign events.
	CampaignSource = "qunfa.campaigns"
	// CampaignDetailType is their detail-type.
	CampaignDetailType = "qunfa.campaign"
)

// Campaign is the detail of a campaign event.
type Campaign struct {
	// Tenant owns the job (and its accounts).
	Tenant string `json:"tenant"`
	// Campaign names the campaign; with the firing time it makes the
	// idempotency key, so a campaign fired twice for the same time (or an
	// event delivered twice) creates one job.
	Campaign string `json:"campaign"`
	// ScheduledTime, when set (RFC 3339), is the firing time used in the
	// key instead of the event's time — EventBridge Scheduler's
	// <aws.scheduler.scheduled-time>, stable across its retries.
	ScheduledTime string `json:"scheduled_time,omitempty"`
	// IdempotencyKey, when set, replaces the derived key.
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	// Job is the submission, as the body of POST /v1/jobs.
	Job submit.Request `json:"job"`
}

// CampaignResult is what the submit function answers to a campaign event.
type CampaignResult struct {
	JobID   string `json:"job_id"`
	Status  string `json:"status"`
	Total   int64  `json:"total"`
	Created bool   `json:"created"`
	Key     string `json:"idempotency_key"`
}

// maxCampaignKeyBytes is the HTTP API's bound on Idempotency-Key.
const maxCampaignKeyBytes = 255

// Submit is the submit function's handler. It takes both of its triggers:
// API Gateway HTTP API requests (POST /v1/jobs, served by apiHandler — the
// HTTP API v1 — like the api function serves the other routes) and campaign
// events from EventBridge (see Campaigns). Any other event is an error.
func Submit(apiHandler http.Handler, sub *submit.Submitter, log *slog.Logger) func(context.Context, json.RawMessage) (any, error) {
	viaAPI := API(apiHandler)
	campaigns := Campaigns(sub, log)
	return func(ctx context.Context, raw json.RawMessage) (any, error) {
		var probe struct {
			RouteKey       string          `json:"routeKey"`
			RequestContext json.RawMessage `json:"requestContext"`
			DetailType     string          `json:"detail-type"`
			Source         string          `json:"source"`
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
		case probe.DetailType != "":
			var ev events.EventBridgeEvent
			if err := json.Unmarshal(raw, &ev); err != nil {
				return nil, fmt.Errorf("submit: EventBridge event: %w", err)
			}
			return campaigns(ctx, ev)
		}
		return nil, errors.New("submit: neither an API Gateway HTTP API (payload 2.0) request nor an EventBridge event")
	}
}

// Campaigns submits the job of a campaign event. A campaign that cannot be
// submitted (invalid, its key reused with another job, a store failure)
// fails the invocation with the reason logged, so the function's error
// alarm fires; a refused campaign has stored nothing.
func Campaigns(sub *submit.Submitter, log *slog.Logger) func(context.Context, events.EventBridgeEvent) (CampaignResult, error) {
	return func(ctx context.Context, ev events.EventBridgeEvent) (CampaignResult, error) {
		res, err := submitCampaign(ctx, sub, ev)
		if err != nil {
			log.Error("campaign not submitted", slog.String("event", ev.ID), slog.String("source", ev.Source), slog.Any("err", err))
			return CampaignResult{}, err
		}
		log.Info("campaign submitted", slog.String("event", ev.ID), slog.String("job", res.JobID),
			slog.Bool("created", res.Created), slog.Int64("total", res.Total))
		return res, nil
	}
}

func submitCampaign(ctx context.Context, sub *submit.Submitter, ev events.EventBridgeEvent) (CampaignResult, error) {
	if ev.DetailType != CampaignDetailType {
		return CampaignResult{}, fmt.Errorf("event detail-type %q is not %q", ev.DetailType, CampaignDetailType)
	}
	var c Campaign
	dec := json.NewDecoder(strings.NewReader(string(ev.Detail)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return CampaignResult{}, fmt.Errorf("campaign detail: %w", err)
	}
	key, err := campaignKey(c, ev)
	if err != nil {
		return CampaignResult{}, err
	}
	params := submit.Params{
		Tenant: c.Tenant, CreatedBy: "campaign:" + c.Campaign, IdempotencyKey: key, Request: c.Job,
		Meta: map[string]string{"campaign": c.Campaign, "event": ev.ID},
	}
	res, err := sub.Submit(ctx, params)
	// As the HTTP API does: a concurrent submission with the same key may
	// be rewriting the snapshot; submitting again finishes or finds it.
	for try := 0; try < 3 && errors.Is(err, store.ErrInvalidTransition); try++ {
		res, err = sub.Submit(ctx, params)
	}
	var verr *submit.ValidationError
	switch {
	case errors.As(err, &verr):
		return CampaignResult{}, fmt.Errorf("campaign %q refused, nothing stored: %w", c.Campaign, err)
	case errors.Is(err, submit.ErrIdempotencyConflict):
		return CampaignResult{}, fmt.Errorf("campaign %q: key %q: %w", c.Campaign, key, err)
	case err != nil:
		return CampaignResult{}, fmt.Errorf("campaign %q: %w", c.Campaign, err)
	}
	return CampaignResult{
		JobID: res.Job.Job.ID, Status: string(res.Job.Job.Status), Total: res.Job.Job.Total,
		Created: res.Created, Key: key,
	}, nil
}

// campaignKey is the campaign's idempotency key: the explicit one, or
// "campaign:<name>@<firing time>".
func campaignKey(c Campaign, ev events.EventBridgeEvent) (string, error) {
	var errs []error
	if strings.TrimSpace(c.Tenant) == "" {
		errs = append(errs, errors.New("campaign detail: tenant is required"))
	}
	if strings.TrimSpace(c.Campaign) == "" {
		errs = append(errs, errors.New("campaign detail: campaign is required"))
	}
	key := c.IdempotencyKey
	if key == "" {
		at := ev.Time
		if c.ScheduledTime != "" {
			t, err := time.Parse(time.RFC3339, c.ScheduledTime)
			if err != nil {
				errs = append(errs, fmt.Errorf("campaign detail: scheduled_time %q is not RFC 3339", c.ScheduledTime))
			}
			at = t
		}
		if at.IsZero() && c.ScheduledTime == "" {
			errs = append(errs, errors.New("campaign event has no time: give detail.scheduled_time or detail.idempotency_key"))
		}
		key = "campaign:" + c.Campaign + "@" + at.UTC().Format(time.RFC3339)
	}
	if len(key) > maxCampaignKeyBytes {
		errs = append(errs, fmt.Errorf("campaign idempotency key is longer than %d bytes", maxCampaignKeyBytes))
	}
	for _, r := range key {
		if r < 0x20 || r > 0x7e {
			errs = append(errs, errors.New("campaign idempotency key must be printable ASCII (campaign name included)"))
			break
		}
	}
	return key, errors.Join(errs...)
}
