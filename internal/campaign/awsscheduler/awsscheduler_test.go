package awsscheduler_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/scheduler"
	"github.com/aws/aws-sdk-go-v2/service/scheduler/types"

	"github.com/qunfa/qunfa/internal/awsemu"
	"github.com/qunfa/qunfa/internal/campaign/awsscheduler"
	"github.com/qunfa/qunfa/internal/store"
)

func TestMain(m *testing.M) {
	code := m.Run()
	awsemu.StopAll()
	os.Exit(code)
}

const (
	target = "arn:aws:lambda:us-east-1:123456789012:function:qunfa-dev-SubmitFunction"
	role   = "arn:aws:iam::123456789012:role/qunfa-dev-SchedulerRole"
	dlq    = "arn:aws:sqs:us-east-1:123456789012:qunfa-dev-FailedInvocationsQueue"
)

// TestSchedulesOnMoto manages a campaign's schedule on moto's EventBridge
// Scheduler through the real SDK client: created in the stack's group
// with the campaign's expression, the time zone, no flexible window, the
// submit function as target with {"tenant", "campaign", "time"} as input,
// a retry policy and a dead-letter queue; disabled with the campaign;
// deleted (twice: the second is no error).
func TestSchedulesOnMoto(t *testing.T) {
	endpoint := awsemu.Moto(t)
	ctx := context.Background()
	client := scheduler.New(scheduler.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(endpoint),
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
	})
	const group = "qunfa-test"
	if _, err := client.CreateScheduleGroup(ctx, &scheduler.CreateScheduleGroupInput{Name: aws.String(group)}); err != nil {
		t.Fatal(err)
	}
	s, err := awsscheduler.New(client, awsscheduler.Config{Group: group, TargetARN: target, RoleARN: role, DeadLetterARN: dlq, TimeZone: "Asia/Shanghai"})
	if err != nil {
		t.Fatal(err)
	}
	c := store.Campaign{Tenant: `ten"ant<a>`, ID: "weekly", Schedule: "cron(0 9 ? * MON *)", Enabled: true}
	name := awsscheduler.ScheduleName(c.Tenant, c.ID)
	if len(name) > 64 || name == awsscheduler.ScheduleName("tenant-b", c.ID) {
		t.Fatalf("schedule name %q", name)
	}
	if err := s.Upsert(ctx, c); err != nil {
		t.Fatal(err)
	}
	get := func() *scheduler.GetScheduleOutput {
		t.Helper()
		out, err := client.GetSchedule(ctx, &scheduler.GetScheduleInput{Name: aws.String(name), GroupName: aws.String(group)})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	got := get()
	if aws.ToString(got.ScheduleExpression) != c.Schedule || got.State != types.ScheduleStateEnabled ||
		aws.ToString(got.ScheduleExpressionTimezone) != "Asia/Shanghai" || got.FlexibleTimeWindow == nil ||
		got.FlexibleTimeWindow.Mode != types.FlexibleTimeWindowModeOff {
		t.Errorf("schedule %+v", got)
	}
	tg := got.Target
	if tg == nil || aws.ToString(tg.Arn) != target || aws.ToString(tg.RoleArn) != role ||
		tg.DeadLetterConfig == nil || aws.ToString(tg.DeadLetterConfig.Arn) != dlq ||
		tg.RetryPolicy == nil || aws.ToInt32(tg.RetryPolicy.MaximumEventAgeInSeconds) != 3600 {
		t.Fatalf("target %+v", tg)
	}
	// The input, with the scheduled time filled in as the scheduler fills
	// it, is the JSON the submit handler reads.
	filled := strings.Replace(aws.ToString(tg.Input), "<aws.scheduler.scheduled-time>", "2025-03-03T01:00:00Z", 1)
	var firing struct{ Tenant, Campaign, Time string }
	if err := json.Unmarshal([]byte(filled), &firing); err != nil || firing.Tenant != c.Tenant || firing.Campaign != "weekly" || firing.Time != "2025-03-03T01:00:00Z" {
		t.Errorf("input %s → %+v %v", filled, firing, err)
	}

	// A campaign's own time zone replaces the stack's.
	c.Timezone = "America/New_York"
	if err := s.Upsert(ctx, c); err != nil {
		t.Fatal(err)
	}
	if got := get(); aws.ToString(got.ScheduleExpressionTimezone) != "America/New_York" || aws.ToString(got.ScheduleExpression) != c.Schedule {
		t.Errorf("schedule in the campaign's zone: %s %s", aws.ToString(got.ScheduleExpression), aws.ToString(got.ScheduleExpressionTimezone))
	}

	c.Enabled, c.Schedule, c.Timezone = false, "rate(1 day)", ""
	if err := s.Upsert(ctx, c); err != nil {
		t.Fatal(err)
	}
	if got := get(); got.State != types.ScheduleStateDisabled || aws.ToString(got.ScheduleExpression) != "rate(1 day)" ||
		aws.ToString(got.ScheduleExpressionTimezone) != "Asia/Shanghai" {
		t.Errorf("updated schedule %+v (zone %s)", got, aws.ToString(got.ScheduleExpressionTimezone))
	}

	for range 2 {
		if err := s.Delete(ctx, c.Tenant, c.ID); err != nil {
			t.Fatalf("Delete: %v", err)
		}
	}
	var nf *types.ResourceNotFoundException
	if _, err := client.GetSchedule(ctx, &scheduler.GetScheduleInput{Name: aws.String(name), GroupName: aws.String(group)}); !errors.As(err, &nf) {
		t.Errorf("schedule after Delete: %v", err)
	}
}

func TestNewValidates(t *testing.T) {
	for _, cfg := range []awsscheduler.Config{
		{Group: "", TargetARN: target, RoleARN: role},
		{Group: "g", RoleARN: role},
		{Group: "g", TargetARN: target},
		{Group: "g", TargetARN: target, RoleARN: role, TimeZone: "Mars/Olympus"},
	} {
		if _, err := awsscheduler.New(nil, cfg); err == nil {
			t.Errorf("%+v accepted", cfg)
		}
	}
}
