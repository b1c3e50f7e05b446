// Package alert is the port through which qunfa tells operators that
// something happened that they may need to act on: a job started, finished
// or paused, a breaker opened or closed, items need review, items ended as
// dead letters, counts do not add up, a campaign firing was skipped. In AWS
// the events go to the EventBridge bus (where rules route them to
// e-mail, chat or paging); locally to the log and the dashboard's feed.
//
// Every event has a Type and a typed Detail whose JSON schema is part of
// qunfa's contract (docs/alerts.md).
package alert

import (
	"context"
	"log/slog"
	"time"
)

// Type names an event; it is the EventBridge detail-type.
type Type string

// Event types.
const (
	JobStarted      Type = "JobStarted"
	JobFinished     Type = "JobFinished"
	JobPaused       Type = "JobPaused"
	BreakerOpened   Type = "BreakerOpened"
	BreakerClosed   Type = "BreakerClosed"
	ItemsNeedReview Type = "ItemsNeedReview"
	DeadLetters     Type = "DeadLetters"
	CountsMismatch  Type = "CountsMismatch"
	CampaignSkipped Type = "CampaignSkipped"
)

// Source is the EventBridge source of qunfa's events.
const Source = "qunfa"

// Event is one alert.
type Event struct {
	Type   Type
	Tenant string
	Time   time.Time
	// Detail is one of the *Detail types below.
	Detail any
}

// Publisher publishes events. Publishing is best effort for the caller's
// work: a failed publish is logged by the caller, never a reason to undo
// or repeat work.
type Publisher interface {
	Publish(ctx context.Context, events ...Event) error
}

// Counts mirrors the item counts of a job.
type Counts struct {
	Pending   int64 `json:"pending"`
	Submitted int64 `json:"submitted"`
	Confirmed int64 `json:"confirmed"`
	Failed    int64 `json:"failed"`
	Abandoned int64 `json:"abandoned"`
}

// JobStartedDetail: a job was created and released to the senders.
type JobStartedDetail struct {
	JobID  string `json:"job_id"`
	Name   string `json:"name"`
	Total  int64  `json:"total"`
	Shards int    `json:"shards"`
}

// JobFinishedDetail: a job reached a final status.
type JobFinishedDetail struct {
	JobID    string           `json:"job_id"`
	Name     string           `json:"name"`
	Status   string           `json:"status"`
	Counts   Counts           `json:"counts"`
	Failures map[string]int64 `json:"failures"`
}

// JobPausedDetail: a job paused (reason manual, budget or breaker).
type JobPausedDetail struct {
	JobID  string `json:"job_id"`
	Reason string `json:"reason"`
	// BudgetUsed and Budget are set for reason budget.
	Budget     int64 `json:"budget,omitempty"`
	BudgetUsed int64 `json:"budget_used,omitempty"`
}

// BreakerDetail: an account's breaker opened or closed.
type BreakerDetail struct {
	Account string    `json:"account"`
	Reason  string    `json:"reason"`
	Until   time.Time `json:"until,omitzero"`
	Opens   int       `json:"opens"`
}

// ItemsNeedReviewDetail: items were sent without a confirmed answer and
// the provider cannot say what happened; an operator must resolve them.
type ItemsNeedReviewDetail struct {
	JobID string `json:"job_id"`
	Count int    `json:"count"`
}

// DeadLettersDetail: items of a job ended failed (exhausted or permanent).
type DeadLettersDetail struct {
	JobID    string           `json:"job_id"`
	Failures map[string]int64 `json:"failures"`
}

// CountsMismatchDetail: a job's counts do not add up to its total.
type CountsMismatchDetail struct {
	JobID   string `json:"job_id"`
	Total   int64  `json:"total"`
	Counted int64  `json:"counted"`
	// Shard, Stored and Items, when set, name a shard whose stored counts
	// (Stored) differed from its items (Items), status by status; the
	// reconciler has recounted it.
	Shard  *int    `json:"shard,omitempty"`
	Stored *Counts `json:"stored,omitempty"`
	Items  *Counts `json:"items,omitempty"`
}

// CampaignSkippedDetail: a campaign firing started too late and was skipped.
type CampaignSkippedDetail struct {
	CampaignID  string    `json:"campaign_id"`
	ScheduledAt time.Time `json:"scheduled_at"`
	StartedAt   time.Time `json:"started_at"`
	MaxDelaySec int       `json:"max_delay_sec"`
}

// Emit publishes events on p (which may be nil: nothing is published),
// logging rather than returning a failure: alerts never stop or repeat work.
func Emit(ctx context.Context, p Publisher, log *slog.Logger, events ...Event) {
	if p == nil || len(events) == 0 {
		return
	}
	if err := p.Publish(context.WithoutCancel(ctx), events...); err != nil && log != nil {
		log.Error("publish alerts", slog.String("type", string(events[0].Type)), slog.Int("events", len(events)), slog.Any("err", err))
	}
}
