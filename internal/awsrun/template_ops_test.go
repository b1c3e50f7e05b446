package awsrun_test

// The template's schedules, failure destinations, data lifecycle, parameters,
// outputs and alarms, dashboard, builds and cfn-lint; template_test.go holds
// the helpers, functions, policies, tracing and queues.

import (
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/qunfa/qunfa/internal/awsemu"
	"github.com/qunfa/qunfa/internal/awsrun"
	"github.com/qunfa/qunfa/internal/metrics"
	"github.com/qunfa/qunfa/internal/store/dynamostore"
)

// TestTemplateCampaignRules: the api function names campaign rules with a
// prefix and targets the submit function; EventBridge may invoke submit
// from exactly the rules with that prefix, which are the rules the api
// role may manage.
func TestTemplateCampaignRules(t *testing.T) {
	tp := loadTemplate(t)
	env := functionEnv(tp, awsrun.API)
	if env[awsrun.EnvCampaignTarget] != "getatt:SubmitFunction.Arn" {
		t.Errorf("%s = %q, want the submit function's ARN", awsrun.EnvCampaignTarget, env[awsrun.EnvCampaignTarget])
	}
	prefix := strings.TrimPrefix(env[awsrun.EnvCampaignRulePrefix], "sub:")
	if prefix == "" || !strings.HasSuffix(campaignRuleARN, ":rule/"+prefix+"*") {
		t.Errorf("rule prefix %q does not match the api role's rule resource %s", prefix, campaignRuleARN)
	}
	var perms int
	for name, r := range tp.raw["Resources"].(map[string]any) {
		if at(r, "Type") != "AWS::Lambda::Permission" {
			continue
		}
		perms++
		p := at(r, "Properties")
		if at(p, "FunctionName") != "getatt:SubmitFunction.Arn" || at(p, "Principal") != "events.amazonaws.com" ||
			at(p, "Action") != "lambda:InvokeFunction" || at(p, "SourceArn") != campaignRuleARN || at(p, "SourceAccount") == nil {
			t.Errorf("permission %s: %v", name, p)
		}
	}
	if perms != 1 {
		t.Errorf("%d Lambda permissions, want the one for campaign rules", perms)
	}
	// The schedules: in the stack's group, invoking submit with a role
	// only the scheduler of this account may assume, which may invoke the
	// scheduled functions and write the failed-invocations queue, nothing
	// else.
	if env[awsrun.EnvCampaignScheduleGroup] != "ref:ScheduleGroup" || env[awsrun.EnvSchedulerRole] != "getatt:SchedulerRole.Arn" ||
		env[awsrun.EnvCampaignTimeZone] != "UTC" {
		t.Errorf("campaign schedule settings: group %q, role %q, time zone %q", env[awsrun.EnvCampaignScheduleGroup],
			env[awsrun.EnvSchedulerRole], env[awsrun.EnvCampaignTimeZone])
	}
	role := at(tp.raw, "Resources", "SchedulerRole", "Properties")
	trust := fmt.Sprint(at(role, "AssumeRolePolicyDocument"))
	if !strings.Contains(trust, "scheduler.amazonaws.com") || !strings.Contains(trust, "aws:SourceAccount") {
		t.Errorf("SchedulerRole trust: %s", trust)
	}
	granted := map[string]string{}
	for _, p := range at(role, "Policies").([]any) {
		stmts, _ := at(p, "PolicyDocument", "Statement").([]any)
		for _, s := range stmts {
			for _, a := range strs(at(s, "Action")) {
				granted[a] = strings.Join(strs(at(s, "Resource")), ",")
			}
		}
	}
	want := map[string]string{
		"lambda:InvokeFunction": "getatt:SubmitFunction.Arn,getatt:ReconcilerFunction.Arn,getatt:BreakerFunction.Arn,getatt:WebhooksFunction.Arn",
		"sqs:SendMessage":       "getatt:FailedInvocationsQueue.Arn",
	}
	if !maps.Equal(granted, want) {
		t.Errorf("SchedulerRole grants %v, want %v", granted, want)
	}
}

// checkSchedule: a function's schedule is an EventBridge Scheduler
// schedule in the stack's group, at an exact minute (no flexible window),
// never retried (the next firing does the same work, and the reconciler
// and breaker hold leases so firings never overlap), with firings that
// cannot be delivered kept in the failed-invocations queue.
func checkSchedule(t *testing.T, fn awsrun.Function, p any) {
	t.Helper()
	if at(p, "RoleArn") != "getatt:SchedulerRole.Arn" {
		t.Errorf("%s schedule does not use SchedulerRole (which may write the dead-letter queue): %v", fn.Name, at(p, "RoleArn"))
	}
	if at(p, "GroupName") != "ref:ScheduleGroup" {
		t.Errorf("%s schedule not in the stack's schedule group: %v", fn.Name, at(p, "GroupName"))
	}
	if at(p, "FlexibleTimeWindow", "Mode") != "OFF" {
		t.Errorf("%s schedule has a flexible window: %v", fn.Name, at(p, "FlexibleTimeWindow"))
	}
	if at(p, "RetryPolicy", "MaximumRetryAttempts") != float64(0) {
		t.Errorf("%s schedule retries a firing: %v", fn.Name, at(p, "RetryPolicy"))
	}
	if at(p, "DeadLetterConfig", "Arn") != "getatt:FailedInvocationsQueue.Arn" {
		t.Errorf("%s schedule has no dead-letter queue: %v", fn.Name, at(p, "DeadLetterConfig"))
	}
	if e := fmt.Sprint(at(p, "ScheduleExpression")); !strings.HasPrefix(e, "rate(") && !strings.HasPrefix(e, "cron(") {
		t.Errorf("%s schedule expression %s", fn.Name, e)
	}
	if !fn.Async {
		t.Errorf("%s is scheduled but not declared Async in awsrun.Functions()", fn.Name)
	}
	// The input, filled as the scheduler fills it, is the EventBridge
	// event the handler reads.
	in := strings.NewReplacer("<aws.scheduler.execution-id>", "c5f5d0a2-1b7e-4e0c-9d8a-0e1f2a3b4c5d",
		"<aws.scheduler.scheduled-time>", "2025-03-03T09:00:00Z").Replace(fmt.Sprint(at(p, "Input")))
	var ev events.EventBridgeEvent
	if err := json.Unmarshal([]byte(in), &ev); err != nil || ev.ID == "" || ev.Time.IsZero() {
		t.Errorf("%s schedule input %q is not an EventBridge event: %v", fn.Name, in, err)
	}
}

// TestTemplateFailureDestinations: every function invoked asynchronously
// (schedules, rules, campaign firings) sends the invocations that failed
// every retry to the failed-invocations queue, which an alarm watches;
// the others are not invoked asynchronously at all.
func TestTemplateFailureDestinations(t *testing.T) {
	tp := loadTemplate(t)
	if at(tp.raw, "Resources", "ScheduleGroup", "Type") != "AWS::Scheduler::ScheduleGroup" {
		t.Errorf("no schedule group for the stack")
	}
	for _, fn := range awsrun.Functions() {
		cfg := at(tp.raw, "Resources", fn.LogicalID, "Properties", "EventInvokeConfig")
		var async bool
		evs, _ := at(tp.raw, "Resources", fn.LogicalID, "Properties", "Events").(map[string]any)
		for _, e := range evs {
			switch at(e, "Type") {
			case "ScheduleV2", "Schedule", "EventBridgeRule":
				async = true
			}
		}
		async = async || fn.Name == "submit" // campaign firings (TestTemplateCampaignRules)
		if async != fn.Async {
			t.Errorf("%s: invoked asynchronously %v, declared Async %v", fn.Name, async, fn.Async)
		}
		if !async {
			if cfg != nil {
				t.Errorf("%s has an EventInvokeConfig but no asynchronous trigger", fn.Name)
			}
			continue
		}
		if at(cfg, "DestinationConfig", "OnFailure", "Type") != "SQS" ||
			at(cfg, "DestinationConfig", "OnFailure", "Destination") != "getatt:FailedInvocationsQueue.Arn" {
			t.Errorf("%s: no OnFailure destination to FailedInvocationsQueue: %v", fn.Name, cfg)
		}
		if n, ok := at(cfg, "MaximumEventAgeInSeconds").(float64); !ok || n < 60 {
			t.Errorf("%s: MaximumEventAgeInSeconds %v", fn.Name, at(cfg, "MaximumEventAgeInSeconds"))
		}
	}
	// EventBridge may put the rules' undeliverable events in the queue,
	// and the api function points the campaign rules at it.
	pol := at(tp.raw, "Resources", "FailedInvocationsQueuePolicy", "Properties")
	if !slices.Contains(strs(at(pol, "Queues")), "ref:FailedInvocationsQueue") ||
		!strings.Contains(fmt.Sprint(at(pol, "PolicyDocument")), "events.amazonaws.com") {
		t.Errorf("FailedInvocationsQueue does not let EventBridge send to it: %v", pol)
	}
	if got := functionEnv(tp, awsrun.API)[awsrun.EnvCampaignDeadLetter]; got != "getatt:FailedInvocationsQueue.Arn" {
		t.Errorf("%s = %q, want the failed-invocations queue", awsrun.EnvCampaignDeadLetter, got)
	}
}

// TestTemplateDataLifecycle: the table expires records by expires_at
// (dynamostore.TTLAttribute), is protected against deletion and kept
// with the stack unless its creation failed; the reconciler gets the
// operator's retention; the HTTP API writes access logs; every function
// is traced; api and submit have concurrency of their own.
func TestTemplateDataLifecycle(t *testing.T) {
	tp := loadTemplate(t)
	table := at(tp.raw, "Resources", "Table")
	if at(table, "DeletionPolicy") != "RetainExceptOnCreate" || at(table, "UpdateReplacePolicy") != "Retain" {
		t.Errorf("table DeletionPolicy %v, UpdateReplacePolicy %v; want RetainExceptOnCreate and Retain",
			at(table, "DeletionPolicy"), at(table, "UpdateReplacePolicy"))
	}
	if at(table, "Properties", "DeletionProtectionEnabled") != true {
		t.Errorf("table deletion protection is off")
	}
	ttl := at(table, "Properties", "TimeToLiveSpecification")
	if at(ttl, "AttributeName") != dynamostore.TTLAttribute || at(ttl, "Enabled") != true {
		t.Errorf("table TTL %v, want %s enabled", ttl, dynamostore.TTLAttribute)
	}
	if got := functionEnv(tp, awsrun.Reconciler)[awsrun.EnvItemRetention]; got != "sub:${ItemRetentionDays}d" {
		t.Errorf("%s = %q, want the ItemRetentionDays parameter", awsrun.EnvItemRetention, got)
	}
	if d := at(tp.raw, "Parameters", "ItemRetentionDays", "Default"); d != float64(30) {
		t.Errorf("ItemRetentionDays default %v, want 30", d)
	}
	logs := at(tp.raw, "Resources", "HttpApi", "Properties", "AccessLogSettings")
	if at(logs, "DestinationArn") != "getatt:HttpApiAccessLogGroup.Arn" || !strings.Contains(fmt.Sprint(at(logs, "Format")), "$context.requestId") {
		t.Errorf("HTTP API access logs: %v", logs)
	}
	if at(tp.raw, "Resources", "HttpApiAccessLogGroup", "Properties", "RetentionInDays") == nil {
		t.Errorf("the access log group keeps logs forever")
	}
	// Reserved unless the operator sets 0 (an account whose quota is
	// still 10 cannot reserve any).
	for _, r := range []struct {
		fn   awsrun.Function
		cond string
	}{{awsrun.API, "ReserveApi"}, {awsrun.Submit, "ReserveSubmit"}} {
		fn, cond := r.fn, r.cond
		if got := functionProp(tp, fn, "ReservedConcurrentExecutions"); got != "if:"+cond {
			t.Errorf("%s ReservedConcurrentExecutions %v, want !If [%s, ...]: a busy sender could starve it", fn.Name, got, cond)
		}
		if at(tp.raw, "Conditions", cond) != true {
			t.Errorf("condition %s is not true with the default parameters", cond)
		}
	}
	if functionProp(tp, awsrun.Sender, "ReservedConcurrentExecutions") != nil {
		t.Errorf("the sender's concurrency is bounded by its event source's MaximumConcurrency, not a reservation")
	}
}

func TestTemplateParametersOutputsAlarms(t *testing.T) {
	tp := loadTemplate(t)
	for _, p := range []string{"Stage", "ProviderURL", "ProviderSecretName"} {
		if _, ok := tp.typed.Parameters[p]; !ok {
			t.Errorf("parameter %s missing", p)
		}
	}
	// AlarmEmail may stay empty: the subscription is conditional.
	if d := at(tp.raw, "Parameters", "AlarmEmail", "Default"); d != "" {
		t.Errorf("AlarmEmail default %v, want empty (optional)", d)
	}
	if at(tp.raw, "Resources", "AlarmEmailSubscription", "Condition") != "HasAlarmEmail" {
		t.Errorf("the e-mail subscription is not conditional on AlarmEmail")
	}
	for _, o := range []string{"ApiUrl", "BusName", "QueueUrl", "TableName"} {
		if _, ok := tp.typed.Outputs[o]; !ok {
			t.Errorf("output %s missing", o)
		}
	}
	// Every alarm notifies the topic; collect "<metric> <dimension values>"
	// of each, metric math alarms included.
	alarms := map[string]bool{}
	for name, r := range tp.raw["Resources"].(map[string]any) {
		if at(r, "Type") != "AWS::CloudWatch::Alarm" {
			continue
		}
		p := at(r, "Properties")
		if !slices.Contains(strs(at(p, "AlarmActions")), "ref:AlarmTopic") {
			t.Errorf("alarm %s notifies nobody", name)
		}
		if at(p, "TreatMissingData") != "notBreaching" {
			t.Errorf("alarm %s: TreatMissingData %v, want notBreaching", name, at(p, "TreatMissingData"))
		}
		metrics := []any{map[string]any{"MetricStat": map[string]any{"Metric": p}}}
		if m, ok := at(p, "Metrics").([]any); ok {
			metrics = m
		}
		for _, m := range metrics {
			metric := at(m, "MetricStat", "Metric")
			var vals []string
			dims, _ := at(metric, "Dimensions").([]any)
			for _, d := range dims {
				vals = append(vals, fmt.Sprint(at(d, "Value")))
			}
			if at(metric, "MetricName") != nil {
				alarms[fmt.Sprint(at(metric, "Namespace"), " ", at(metric, "MetricName"), " ", strings.Join(vals, " "))] = true
			}
		}
	}
	want := []string{
		"AWS/SQS ApproximateNumberOfMessagesVisible getatt:DeadLetterQueue.QueueName",
		"AWS/SQS ApproximateNumberOfMessagesVisible getatt:FailedInvocationsQueue.QueueName",
		"AWS/SQS ApproximateAgeOfOldestMessage getatt:WorkQueue.QueueName",
		"AWS/ApiGateway 5xx ref:HttpApi",
		"AWS/ApiGateway Latency ref:HttpApi",
		"qunfa qunfa_oldest_submitted_age_seconds reconciler",
		"qunfa qunfa_oldest_stuck_shard_age_seconds reconciler",
	}
	for _, fn := range awsrun.Functions() {
		want = append(want, "AWS/Lambda Errors ref:"+fn.LogicalID, "AWS/Lambda Throttles ref:"+fn.LogicalID)
	}
	// DynamoDB reports throttles and system errors per operation: every
	// operation any function calls is summed.
	ops := map[string]bool{}
	for _, fn := range awsrun.Functions() {
		for _, op := range fn.DynamoDB {
			ops[op] = true
		}
	}
	for op := range ops {
		want = append(want, "AWS/DynamoDB ThrottledRequests ref:Table "+op, "AWS/DynamoDB SystemErrors ref:Table "+op)
	}
	for _, w := range want {
		if !alarms[w] {
			t.Errorf("no alarm on %s", w)
		}
	}
	// The metrics the reconciler publishes for those alarms.
	if metrics.OldestSubmitted != "qunfa_oldest_submitted_age_seconds" || metrics.OldestStuckShard != "qunfa_oldest_stuck_shard_age_seconds" {
		t.Errorf("the reconciler's metric names changed: update the alarms")
	}
}

// TestTemplateDashboard: the CloudWatch dashboard shows what the local
// dashboard shows (sent, failed, rate limited, latency, shards, queues,
// the reconciler's ages) and the platform's health.
func TestTemplateDashboard(t *testing.T) {
	tp := loadTemplate(t)
	body := strings.TrimPrefix(fmt.Sprint(at(tp.raw, "Resources", "Dashboard", "Properties", "DashboardBody")), "sub:")
	// Fill the ${...} references as CloudFormation does, then parse.
	filled := regexpRefs.ReplaceAllString(body, "x")
	var dash struct {
		Widgets []struct {
			Properties struct {
				Title   string `json:"title"`
				Metrics []any  `json:"metrics"`
			} `json:"properties"`
		} `json:"widgets"`
	}
	if err := json.Unmarshal([]byte(filled), &dash); err != nil {
		t.Fatalf("dashboard body is not JSON: %v", err)
	}
	for _, m := range []string{metrics.MessagesSent, metrics.MessagesFailed, metrics.RateLimited, metrics.ProviderLatency,
		metrics.ActiveShards, metrics.Handbacks, metrics.OldestSubmitted, metrics.OldestStuckShard,
		"ApproximateNumberOfMessagesVisible", "5xx", "Throttles", "Errors", "ConsumedWriteCapacityUnits", "ThrottledRequests"} {
		if !strings.Contains(body, m) {
			t.Errorf("the dashboard does not show %s", m)
		}
	}
	if len(dash.Widgets) < 6 {
		t.Errorf("%d widgets", len(dash.Widgets))
	}
}

// TestTemplateBuildsEveryFunction runs what `sam build` runs for each
// function — the build-<LogicalId> target of its Makefile, from another
// directory, as SAM does — and checks the bootstrap is a linux/arm64
// executable.
func TestTemplateBuildsEveryFunction(t *testing.T) {
	if testing.Short() {
		t.Skip("cross-compiles four binaries")
	}
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make not on PATH")
	}
	root := repoRoot(t)
	for _, fn := range awsrun.Functions() {
		t.Run(fn.Name, func(t *testing.T) {
			makefile := filepath.Join(root, "functions", fn.Name, "Makefile")
			out := t.TempDir()
			cmd := exec.Command("make", "--no-print-directory", "-f", makefile, "build-"+fn.LogicalID, "ARTIFACTS_DIR="+out)
			cmd.Dir = t.TempDir()
			if b, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("make build-%s: %v\n%s", fn.LogicalID, err, b)
			}
			f, err := elf.Open(filepath.Join(out, "bootstrap"))
			if err != nil {
				t.Fatalf("bootstrap: %v", err)
			}
			defer f.Close()
			if f.Machine != elf.EM_AARCH64 || f.OSABI != elf.ELFOSABI_NONE && f.OSABI != elf.ELFOSABI_LINUX {
				t.Errorf("bootstrap is %v/%v, want linux arm64", f.Machine, f.OSABI)
			}
		})
	}
}

// TestTemplateCfnLint runs cfn-lint (SAM transform included) on the template.
func TestTemplateCfnLint(t *testing.T) {
	lint, err := exec.LookPath("cfn-lint")
	if err != nil {
		if awsemu.Required() {
			t.Fatalf("cfn-lint not on PATH (QUNFA_REQUIRE_EMULATORS=1)")
		}
		t.Skip("cfn-lint not on PATH (pip install cfn-lint); QUNFA_REQUIRE_EMULATORS=1 makes this a failure")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, lint, "template.yaml")
	cmd.Dir = repoRoot(t)
	if out, err := cmd.CombinedOutput(); err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			t.Fatalf("cfn-lint template.yaml (exit %d):\n%s", exit.ExitCode(), out)
		}
		t.Fatalf("cfn-lint: %v\n%s", err, out)
	}
}

// TestLocalInvokeEnvironment: events/env.json, the variables `sam local
// invoke` gives each function (SAM resolves no !Ref of a resource, so the
// template's own values would leave the table and queue unset), sets for
// every function exactly the QUNFA_ variables the template sets, and
// they pass the function's configuration validation.
func TestLocalInvokeEnvironment(t *testing.T) {
	tp := loadTemplate(t)
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "events", "env.json"))
	if err != nil {
		t.Fatal(err)
	}
	var env map[string]map[string]string
	if err := json.Unmarshal(data, &env); err != nil {
		t.Fatalf("events/env.json: %v", err)
	}
	for _, fn := range awsrun.Functions() {
		vars, ok := env[fn.LogicalID]
		if !ok {
			t.Errorf("events/env.json has no %s", fn.LogicalID)
			continue
		}
		for name := range functionEnv(tp, fn) {
			if _, ok := vars[name]; !ok {
				t.Errorf("events/env.json: %s lacks %s, which the template sets", fn.LogicalID, name)
			}
		}
		for name := range vars {
			if _, ok := functionEnv(tp, fn)[name]; !ok {
				t.Errorf("events/env.json: %s sets %s, which the template does not declare (sam local invoke would ignore it)", fn.LogicalID, name)
			}
		}
		if _, err := awsrun.Load(fn, func(k string) string { return vars[k] }); err != nil {
			t.Errorf("events/env.json: %s does not start: %v", fn.LogicalID, err)
		}
	}
}
