// Package awsscheduler is the AWS adapter of campaign.Scheduler on
// EventBridge Scheduler: one schedule per campaign in the stack's schedule
// group (not a rule on the account's default bus, whose rule quota the
// account shares), named "c-" + a hash of tenant and campaign id, firing
// at the exact time (no flexible window) in the configured time zone, with
// one target — the submit function — whose input is
//
//	{"tenant": "<tenant>", "campaign": "<id>", "time": "<scheduled time>"}
//
// The scheduled time is the same in every retry, so the firing's
// idempotency key is stable. A firing the scheduler cannot deliver is
// retried for an hour, then put in the dead-letter queue.
package awsscheduler

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/scheduler"
	"github.com/aws/aws-sdk-go-v2/service/scheduler/types"

	"github.com/qunfa/qunfa/internal/campaign"
	"github.com/qunfa/qunfa/internal/store"
)

// API is the part of the EventBridge Scheduler client the Scheduler uses;
// *scheduler.Client satisfies it.
type API interface {
	CreateSchedule(ctx context.Context, in *scheduler.CreateScheduleInput, optFns ...func(*scheduler.Options)) (*scheduler.CreateScheduleOutput, error)
	UpdateSchedule(ctx context.Context, in *scheduler.UpdateScheduleInput, optFns ...func(*scheduler.Options)) (*scheduler.UpdateScheduleOutput, error)
	DeleteSchedule(ctx context.Context, in *scheduler.DeleteScheduleInput, optFns ...func(*scheduler.Options)) (*scheduler.DeleteScheduleOutput, error)
}

var _ API = (*scheduler.Client)(nil)

// Config configures a Scheduler.
type Config struct {
	// Group is the stack's schedule group; the api function's policy
	// allows schedule actions in it only.
	Group string
	// TargetARN is the submit function's ARN.
	TargetARN string
	// RoleARN is the role the scheduler assumes to invoke the target and
	// to write the dead-letter queue.
	RoleARN string
	// DeadLetterARN is the SQS queue of firings that could not be
	// delivered (empty: none).
	DeadLetterARN string
	// TimeZone of the cron expressions of campaigns that name no zone of
	// their own, an IANA name (default "UTC").
	TimeZone string
	// Legacy removes a campaign's EventBridge rule of before (nil: none):
	// a campaign made when campaigns were rules keeps firing from its rule
	// until it is changed or deleted, then its schedule replaces it.
	Legacy LegacyRules
}

// LegacyRules deletes the rule a campaign had before (ebscheduler).
type LegacyRules interface {
	Delete(ctx context.Context, tenant, id string) error
}

// Scheduler manages campaign schedules.
type Scheduler struct {
	client API
	cfg    Config
}

var _ campaign.Scheduler = (*Scheduler)(nil)

// New returns a Scheduler.
func New(client API, cfg Config) (*Scheduler, error) {
	if cfg.TimeZone == "" {
		cfg.TimeZone = "UTC"
	}
	var errs []error
	if cfg.Group == "" || len(cfg.Group) > 64 {
		errs = append(errs, fmt.Errorf("awsscheduler: schedule group %q must have 1 to 64 characters", cfg.Group))
	}
	if cfg.TargetARN == "" {
		errs = append(errs, errors.New("awsscheduler: no target ARN (the submit function)"))
	}
	if cfg.RoleARN == "" {
		errs = append(errs, errors.New("awsscheduler: no role ARN (the role the scheduler invokes the target with)"))
	}
	if _, err := time.LoadLocation(cfg.TimeZone); err != nil {
		errs = append(errs, fmt.Errorf("awsscheduler: time zone %q: %w", cfg.TimeZone, err))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return &Scheduler{client: client, cfg: cfg}, nil
}

// hashChars is how many hex characters of the hash name a schedule.
const hashChars = 32

// ScheduleName is the name of a campaign's schedule in the group.
func ScheduleName(tenant, id string) string {
	sum := sha256.Sum256([]byte(tenant + "\x00" + id))
	return "c-" + hex.EncodeToString(sum[:])[:hashChars]
}

// Input is the target's input for a campaign: the scheduler fills in the
// scheduled time.
func Input(tenant, id string) string {
	t, _ := json.Marshal(tenant)
	c, _ := json.Marshal(id)
	return `{"tenant": ` + string(t) + `, "campaign": ` + string(c) + `, "time": "<aws.scheduler.scheduled-time>"}`
}

// Upsert creates or updates the campaign's schedule (DISABLED for a
// disabled campaign), in the campaign's time zone or, when it names none,
// the stack's (Config.TimeZone).
func (s *Scheduler) Upsert(ctx context.Context, c store.Campaign) error {
	name := ScheduleName(c.Tenant, c.ID)
	zone := aws.String(s.cfg.TimeZone)
	if c.Timezone != "" {
		zone = aws.String(c.Timezone)
	}
	state := types.ScheduleStateEnabled
	if !c.Enabled {
		state = types.ScheduleStateDisabled
	}
	target := &types.Target{
		Arn:     aws.String(s.cfg.TargetARN),
		RoleArn: aws.String(s.cfg.RoleARN),
		Input:   aws.String(Input(c.Tenant, c.ID)),
		// Submit makes one job per campaign and scheduled time, so a late
		// delivery is harmless; an hour of retries, then the dead letters.
		RetryPolicy: &types.RetryPolicy{MaximumEventAgeInSeconds: aws.Int32(3600), MaximumRetryAttempts: aws.Int32(185)},
	}
	if s.cfg.DeadLetterARN != "" {
		target.DeadLetterConfig = &types.DeadLetterConfig{Arn: aws.String(s.cfg.DeadLetterARN)}
	}
	window := &types.FlexibleTimeWindow{Mode: types.FlexibleTimeWindowModeOff}
	desc := clip("qunfa campaign " + c.Tenant + "/" + c.ID)
	for range 3 {
		_, err := s.client.UpdateSchedule(ctx, &scheduler.UpdateScheduleInput{
			Name: aws.String(name), GroupName: aws.String(s.cfg.Group), ScheduleExpression: aws.String(c.Schedule),
			ScheduleExpressionTimezone: zone, FlexibleTimeWindow: window, Target: target,
			State: state, Description: aws.String(desc),
		})
		var nf *types.ResourceNotFoundException
		if !errors.As(err, &nf) {
			if err != nil {
				return fmt.Errorf("update schedule %s for campaign %q: %w", name, c.ID, err)
			}
			return s.dropLegacy(ctx, c)
		}
		_, err = s.client.CreateSchedule(ctx, &scheduler.CreateScheduleInput{
			Name: aws.String(name), GroupName: aws.String(s.cfg.Group), ScheduleExpression: aws.String(c.Schedule),
			ScheduleExpressionTimezone: zone, FlexibleTimeWindow: window, Target: target,
			State: state, Description: aws.String(desc),
		})
		var conflict *types.ConflictException
		if errors.As(err, &conflict) {
			continue // created meanwhile: update it
		}
		if err != nil {
			return fmt.Errorf("create schedule %s for campaign %q: %w", name, c.ID, err)
		}
		return s.dropLegacy(ctx, c)
	}
	return fmt.Errorf("schedule %s for campaign %q: created and deleted concurrently", name, c.ID)
}

// Delete removes the campaign's schedule; an absent one is no error.
func (s *Scheduler) Delete(ctx context.Context, tenant, id string) error {
	name := ScheduleName(tenant, id)
	_, err := s.client.DeleteSchedule(ctx, &scheduler.DeleteScheduleInput{Name: aws.String(name), GroupName: aws.String(s.cfg.Group)})
	var nf *types.ResourceNotFoundException
	if err != nil && !errors.As(err, &nf) {
		return fmt.Errorf("delete schedule %s of campaign %q: %w", name, id, err)
	}
	return s.dropLegacy(ctx, store.Campaign{Tenant: tenant, ID: id})
}

// dropLegacy deletes the campaign's rule of before, once its schedule is
// in place (a firing from both makes one job: the idempotency key is the
// campaign and the scheduled time).
func (s *Scheduler) dropLegacy(ctx context.Context, c store.Campaign) error {
	if s.cfg.Legacy == nil {
		return nil
	}
	if err := s.cfg.Legacy.Delete(ctx, c.Tenant, c.ID); err != nil {
		return fmt.Errorf("delete the former rule of campaign %q: %w", c.ID, err)
	}
	return nil
}

func clip(s string) string {
	if len(s) > 512 {
		return s[:512]
	}
	return s
}
