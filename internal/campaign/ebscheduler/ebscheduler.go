// Package ebscheduler is the AWS adapter of campaign.Scheduler: one
// EventBridge rule per campaign on the account's default bus (the only bus
// that runs schedule expressions), named RulePrefix + a hash of tenant and
// campaign id, with one target — the submit function — whose
// InputTransformer delivers
//
//	{"tenant": "<tenant>", "campaign": "<id>", "time": "<the event's time>"}
//
// The event time of a scheduled event is its scheduled minute, the same
// in every retry, so the firing's idempotency key is stable.
package ebscheduler

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge/types"

	"github.com/qunfa/qunfa/internal/campaign"
	"github.com/qunfa/qunfa/internal/store"
)

// API is the part of the EventBridge client the Scheduler uses;
// *eventbridge.Client satisfies it.
type API interface {
	PutRule(ctx context.Context, in *eventbridge.PutRuleInput, optFns ...func(*eventbridge.Options)) (*eventbridge.PutRuleOutput, error)
	PutTargets(ctx context.Context, in *eventbridge.PutTargetsInput, optFns ...func(*eventbridge.Options)) (*eventbridge.PutTargetsOutput, error)
	RemoveTargets(ctx context.Context, in *eventbridge.RemoveTargetsInput, optFns ...func(*eventbridge.Options)) (*eventbridge.RemoveTargetsOutput, error)
	DeleteRule(ctx context.Context, in *eventbridge.DeleteRuleInput, optFns ...func(*eventbridge.Options)) (*eventbridge.DeleteRuleOutput, error)
}

var _ API = (*eventbridge.Client)(nil)

// TargetID is the id of the rule's one target.
const TargetID = "submit"

// hashChars is how many hex characters of the hash name a rule.
const hashChars = 24

// MaxPrefixLen is the longest RulePrefix: rule names have at most 64
// characters.
const MaxPrefixLen = 64 - hashChars

// Config configures a Scheduler.
type Config struct {
	// RulePrefix starts every campaign rule's name; the IAM policy of the
	// api function allows rule actions on names with this prefix only.
	RulePrefix string
	// TargetARN is the submit function's ARN.
	TargetARN string
	// DeadLetterARN is the SQS queue a firing EventBridge could not
	// deliver to the submit function goes to, with a retry policy of an
	// hour (empty: none; EventBridge then drops it after its retries).
	DeadLetterARN string
}

// Scheduler manages campaign rules.
type Scheduler struct {
	client API
	cfg    Config
}

var _ campaign.Scheduler = (*Scheduler)(nil)

// New returns a Scheduler.
func New(client API, cfg Config) (*Scheduler, error) {
	var errs []error
	if cfg.RulePrefix == "" || len(cfg.RulePrefix) > MaxPrefixLen {
		errs = append(errs, fmt.Errorf("ebscheduler: rule prefix %q must have 1 to %d characters", cfg.RulePrefix, MaxPrefixLen))
	}
	for _, r := range cfg.RulePrefix {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_') {
			errs = append(errs, fmt.Errorf("ebscheduler: rule prefix %q may contain only letters, digits, '.', '-' and '_'", cfg.RulePrefix))
			break
		}
	}
	if cfg.TargetARN == "" {
		errs = append(errs, errors.New("ebscheduler: no target ARN (the submit function)"))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return &Scheduler{client: client, cfg: cfg}, nil
}

func (s *Scheduler) deadLetter() *types.DeadLetterConfig {
	if s.cfg.DeadLetterARN == "" {
		return nil
	}
	return &types.DeadLetterConfig{Arn: aws.String(s.cfg.DeadLetterARN)}
}

// retryPolicy: a firing is worth delivering for an hour (submit makes one
// job per campaign and firing time, so a late delivery is harmless).
func (s *Scheduler) retryPolicy() *types.RetryPolicy {
	if s.cfg.DeadLetterARN == "" {
		return nil
	}
	return &types.RetryPolicy{MaximumEventAgeInSeconds: aws.Int32(3600), MaximumRetryAttempts: aws.Int32(185)}
}

// RuleName is the name of a campaign's rule.
func (s *Scheduler) RuleName(tenant, id string) string {
	sum := sha256.Sum256([]byte(tenant + "\x00" + id))
	return s.cfg.RulePrefix + hex.EncodeToString(sum[:])[:hashChars]
}

// InputTemplate is the target's input template for a campaign.
func InputTemplate(tenant, id string) string {
	t, _ := json.Marshal(tenant) // escapes < and >, which would read as placeholders
	c, _ := json.Marshal(id)
	return `{"tenant": ` + string(t) + `, "campaign": ` + string(c) + `, "time": <time>}`
}

// Upsert creates or updates the campaign's rule (DISABLED for a disabled
// campaign) and points it at the submit function.
func (s *Scheduler) Upsert(ctx context.Context, c store.Campaign) error {
	name := s.RuleName(c.Tenant, c.ID)
	state := types.RuleStateEnabled
	if !c.Enabled {
		state = types.RuleStateDisabled
	}
	if _, err := s.client.PutRule(ctx, &eventbridge.PutRuleInput{
		Name:               aws.String(name),
		ScheduleExpression: aws.String(c.Schedule),
		State:              state,
		Description:        aws.String(clip("qunfa campaign " + c.Tenant + "/" + c.ID)),
	}); err != nil {
		return fmt.Errorf("put rule %s for campaign %q: %w", name, c.ID, err)
	}
	out, err := s.client.PutTargets(ctx, &eventbridge.PutTargetsInput{
		Rule: aws.String(name),
		Targets: []types.Target{{
			Id:  aws.String(TargetID),
			Arn: aws.String(s.cfg.TargetARN),
			InputTransformer: &types.InputTransformer{
				InputPathsMap: map[string]string{"time": "$.time"},
				InputTemplate: aws.String(InputTemplate(c.Tenant, c.ID)),
			},
			DeadLetterConfig: s.deadLetter(),
			RetryPolicy:      s.retryPolicy(),
		}},
	})
	if err != nil {
		return fmt.Errorf("put target of rule %s: %w", name, err)
	}
	if out.FailedEntryCount > 0 {
		msg := ""
		for _, f := range out.FailedEntries {
			msg += " " + aws.ToString(f.ErrorCode) + ": " + aws.ToString(f.ErrorMessage)
		}
		return fmt.Errorf("put target of rule %s:%s", name, msg)
	}
	return nil
}

// Delete removes the campaign's rule and its target; an absent rule is no
// error.
func (s *Scheduler) Delete(ctx context.Context, tenant, id string) error {
	name := s.RuleName(tenant, id)
	var nf *types.ResourceNotFoundException
	if _, err := s.client.RemoveTargets(ctx, &eventbridge.RemoveTargetsInput{
		Rule: aws.String(name), Ids: []string{TargetID},
	}); err != nil && !errors.As(err, &nf) {
		return fmt.Errorf("remove target of rule %s: %w", name, err)
	}
	if _, err := s.client.DeleteRule(ctx, &eventbridge.DeleteRuleInput{Name: aws.String(name)}); err != nil && !errors.As(err, &nf) {
		return fmt.Errorf("delete rule %s: %w", name, err)
	}
	return nil
}

func clip(s string) string {
	if len(s) > 512 {
		return s[:512]
	}
	return s
}
