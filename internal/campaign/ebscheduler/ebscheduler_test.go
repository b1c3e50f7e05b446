package ebscheduler_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge/types"

	"github.com/qunfa/qunfa/internal/awsemu"
	"github.com/qunfa/qunfa/internal/campaign/ebscheduler"
	"github.com/qunfa/qunfa/internal/store"
)

func TestMain(m *testing.M) {
	code := m.Run()
	awsemu.StopAll()
	os.Exit(code)
}

const target = "arn:aws:lambda:us-east-1:123456789012:function:qunfa-dev-SubmitFunction"

// TestRulesOnMoto manages a campaign's rule on moto's EventBridge through
// the real SDK client: created with the schedule and a target whose input
// transformer gives {"tenant", "campaign", "time"}, disabled with the
// campaign, deleted (twice: the second is no error).
func TestRulesOnMoto(t *testing.T) {
	endpoint := awsemu.Moto(t)
	ctx := context.Background()
	eb := eventbridge.New(eventbridge.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(endpoint),
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
	})
	const dlq = "arn:aws:sqs:us-east-1:123456789012:qunfa-test-FailedInvocationsQueue"
	s, err := ebscheduler.New(eb, ebscheduler.Config{RulePrefix: "qunfa-test-c-", TargetARN: target, DeadLetterARN: dlq})
	if err != nil {
		t.Fatal(err)
	}
	c := store.Campaign{Tenant: `ten"ant<a>`, ID: "weekly", Schedule: "cron(0 9 ? * MON *)", Enabled: true}
	name := s.RuleName(c.Tenant, c.ID)
	if !strings.HasPrefix(name, "qunfa-test-c-") || len(name) > 64 || name == s.RuleName("tenant-b", c.ID) {
		t.Fatalf("rule name %q", name)
	}
	if err := s.Upsert(ctx, c); err != nil {
		t.Fatal(err)
	}
	rule, err := eb.DescribeRule(ctx, &eventbridge.DescribeRuleInput{Name: aws.String(name)})
	if err != nil {
		t.Fatal(err)
	}
	if aws.ToString(rule.ScheduleExpression) != c.Schedule || rule.State != types.RuleStateEnabled {
		t.Errorf("rule %+v", rule)
	}
	targets, err := eb.ListTargetsByRule(ctx, &eventbridge.ListTargetsByRuleInput{Rule: aws.String(name)})
	if err != nil || len(targets.Targets) != 1 {
		t.Fatalf("targets: %v %+v", err, targets)
	}
	tg := targets.Targets[0]
	if aws.ToString(tg.Arn) != target || aws.ToString(tg.Id) != ebscheduler.TargetID || tg.InputTransformer == nil ||
		tg.InputTransformer.InputPathsMap["time"] != "$.time" {
		t.Fatalf("target %+v", tg)
	}
	// A firing EventBridge cannot deliver goes to the dead-letter queue
	// after an hour of retries, instead of being dropped.
	if tg.DeadLetterConfig == nil || aws.ToString(tg.DeadLetterConfig.Arn) != dlq ||
		tg.RetryPolicy == nil || aws.ToInt32(tg.RetryPolicy.MaximumEventAgeInSeconds) != 3600 {
		t.Errorf("target dead-letter config %+v, retry policy %+v", tg.DeadLetterConfig, tg.RetryPolicy)
	}
	// The template, with the placeholder filled as EventBridge fills it,
	// is the JSON the submit handler reads.
	filled := strings.Replace(aws.ToString(tg.InputTransformer.InputTemplate), "<time>", `"2025-03-03T09:00:00Z"`, 1)
	var firing struct{ Tenant, Campaign, Time string }
	if err := json.Unmarshal([]byte(filled), &firing); err != nil || firing.Tenant != c.Tenant || firing.Campaign != "weekly" || firing.Time != "2025-03-03T09:00:00Z" {
		t.Errorf("input %s → %+v %v", filled, firing, err)
	}

	c.Enabled, c.Schedule = false, "rate(1 day)"
	if err := s.Upsert(ctx, c); err != nil {
		t.Fatal(err)
	}
	rule, err = eb.DescribeRule(ctx, &eventbridge.DescribeRuleInput{Name: aws.String(name)})
	if err != nil || rule.State != types.RuleStateDisabled || aws.ToString(rule.ScheduleExpression) != "rate(1 day)" {
		t.Errorf("updated rule %+v %v", rule, err)
	}

	for range 2 {
		if err := s.Delete(ctx, c.Tenant, c.ID); err != nil {
			t.Fatalf("Delete: %v", err)
		}
	}
	var nf *types.ResourceNotFoundException
	if _, err := eb.DescribeRule(ctx, &eventbridge.DescribeRuleInput{Name: aws.String(name)}); !errors.As(err, &nf) {
		t.Errorf("rule after Delete: %v", err)
	}
}

func TestNewValidates(t *testing.T) {
	for _, cfg := range []ebscheduler.Config{
		{RulePrefix: "", TargetARN: target},
		{RulePrefix: strings.Repeat("p", ebscheduler.MaxPrefixLen+1), TargetARN: target},
		{RulePrefix: "bad/prefix", TargetARN: target},
		{RulePrefix: "ok-"},
	} {
		if _, err := ebscheduler.New(nil, cfg); err == nil {
			t.Errorf("%+v accepted", cfg)
		}
	}
}
