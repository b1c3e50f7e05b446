package awsrun_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/awslabs/goformation/v7"
	"github.com/awslabs/goformation/v7/cloudformation"
	"github.com/awslabs/goformation/v7/intrinsics"

	"github.com/qunfa/qunfa/internal/awsrun"
)

// The template's intrinsic functions are processed once (goformation's
// intrinsics package); the result is read twice: by goformation into typed
// resources (functions, roles, queues, table, alarms), and as generic JSON
// for what goformation's SAM schema (v7.14.9) does not model — SQS event
// FunctionResponseTypes and ScalingConfig, LoggingConfig, Metadata and the
// HttpApi event properties (its Function_Properties union picks the first
// event type that unmarshals, so event properties are not reliable there).
// goformation refuses unknown properties, so LoggingConfig (and
// ReservedConcurrentExecutions, an !If) is removed from the functions, and
// AccessLogSettings from the HTTP API, before the typed parse (they are
// checked on the generic one).
//
// The handlers keep every reference visible instead of resolving it:
// !Ref X → "ref:X", !GetAtt X.Y → "getatt:X.Y", !Sub "s" → "sub:s",
// !If [C, a, b] → "if:C".
var intrinsicOptions = &intrinsics.ProcessorOptions{IntrinsicHandlerOverrides: map[string]intrinsics.IntrinsicHandler{
	"Ref": func(_ string, in, tmpl any) any {
		// A parameter with a default resolves to it (typed fields such as
		// RetentionInDays need a value); anything else stays a reference.
		if d := at(tmpl, "Parameters", fmt.Sprint(in), "Default"); d != nil {
			return d
		}
		return fmt.Sprint("ref:", in)
	},
	"Fn::GetAtt": func(_ string, in, _ any) any {
		if parts, ok := in.([]any); ok {
			s := make([]string, len(parts))
			for i, p := range parts {
				s[i] = fmt.Sprint(p)
			}
			return "getatt:" + strings.Join(s, ".")
		}
		return fmt.Sprint("getatt:", in)
	},
	// !If [Cond, a, b] → "if:Cond" (the condition is checked on its own).
	"Fn::If": func(_ string, in, _ any) any {
		if parts, ok := in.([]any); ok && len(parts) == 3 {
			return fmt.Sprint("if:", parts[0])
		}
		return fmt.Sprint("if:", in)
	},
	"Fn::Sub": func(_ string, in, _ any) any {
		if parts, ok := in.([]any); ok && len(parts) > 0 {
			return fmt.Sprint("sub:", parts[0])
		}
		return fmt.Sprint("sub:", in)
	},
}}

type parsedTemplate struct {
	typed *cloudformation.Template
	raw   map[string]any
}

func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		t.Fatalf("module root not at %s: %v", dir, err)
	}
	return dir
}

func loadTemplate(t *testing.T) parsedTemplate {
	t.Helper()
	path := filepath.Join(repoRoot(t), "template.yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	js, err := intrinsics.ProcessYAML(data, intrinsicOptions)
	if err != nil {
		t.Fatalf("process template: %v", err)
	}
	var raw map[string]any
	if err := json.Unmarshal(js, &raw); err != nil {
		t.Fatal(err)
	}
	var forTyped map[string]any
	_ = json.Unmarshal(js, &forTyped)
	for _, r := range forTyped["Resources"].(map[string]any) {
		switch at(r, "Type") {
		case "AWS::Serverless::Function":
			delete(at(r, "Properties").(map[string]any), "LoggingConfig")
			delete(at(r, "Properties").(map[string]any), "ReservedConcurrentExecutions") // "if:…"
		case "AWS::Serverless::HttpApi":
			delete(at(r, "Properties").(map[string]any), "AccessLogSettings")
		}
	}
	js, _ = json.Marshal(forTyped)
	typed, err := goformation.ParseJSONWithOptions(js, &intrinsics.ProcessorOptions{NoProcess: true})
	if err != nil {
		t.Fatalf("goformation: %v", err)
	}
	return parsedTemplate{typed: typed, raw: raw}
}

// at walks the generic template: at(m, "Resources", "X", "Properties").
func at(v any, path ...string) any {
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[p]
	}
	return v
}

func strs(v any) []string {
	switch v := v.(type) {
	case string:
		return []string{v}
	case []any:
		out := make([]string, 0, len(v))
		for _, e := range v {
			out = append(out, fmt.Sprint(e))
		}
		return out
	}
	return nil
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	sort.Strings(s)
	return slices.Compact(s)
}

func roleOf(fn awsrun.Function) string { return strings.TrimSuffix(fn.LogicalID, "Function") + "Role" }
func logGroupOf(fn awsrun.Function) string {
	return strings.TrimSuffix(fn.LogicalID, "Function") + "LogGroup"
}

// functionEnv is a function's environment as SAM deploys it: Globals
// merged with the function's own variables.
func functionEnv(tp parsedTemplate, fn awsrun.Function) map[string]string {
	env := map[string]string{}
	for k, v := range at(tp.raw, "Globals", "Function", "Environment", "Variables").(map[string]any) {
		env[k] = fmt.Sprint(v)
	}
	if own, ok := at(tp.raw, "Resources", fn.LogicalID, "Properties", "Environment", "Variables").(map[string]any); ok {
		for k, v := range own {
			env[k] = fmt.Sprint(v)
		}
	}
	return env
}

func functionProp(tp parsedTemplate, fn awsrun.Function, name string) any {
	if v := at(tp.raw, "Resources", fn.LogicalID, "Properties", name); v != nil {
		return v
	}
	return at(tp.raw, "Globals", "Function", name)
}

func TestTemplateFunctions(t *testing.T) {
	tp := loadTemplate(t)
	if tp.typed.Transform == nil || !slices.Contains(transforms(tp), "AWS::Serverless-2016-10-31") {
		t.Fatalf("template has no SAM transform")
	}
	declared := map[string]bool{}
	for _, fn := range awsrun.Functions() {
		declared[fn.LogicalID] = true
		t.Run(fn.Name, func(t *testing.T) {
			f, err := tp.typed.GetServerlessFunctionWithName(fn.LogicalID)
			if err != nil {
				t.Fatalf("template: %v", err)
			}
			if got := fmt.Sprint(functionProp(tp, fn, "Runtime")); got != "provided.al2023" {
				t.Errorf("Runtime = %s, want provided.al2023", got)
			}
			if got := strs(functionProp(tp, fn, "Architectures")); !slices.Equal(got, []string{"arm64"}) {
				t.Errorf("Architectures = %v, want [arm64]", got)
			}
			if got := fmt.Sprint(functionProp(tp, fn, "Handler")); got != "bootstrap" {
				t.Errorf("Handler = %s, want bootstrap", got)
			}
			if got := at(tp.raw, "Resources", fn.LogicalID, "Metadata", "BuildMethod"); got != "makefile" {
				t.Errorf("Metadata.BuildMethod = %v, want makefile", got)
			}
			if want := "functions/" + fn.Name + "/"; at(tp.raw, "Resources", fn.LogicalID, "Properties", "CodeUri") != want {
				t.Errorf("CodeUri = %v, want %s", at(tp.raw, "Resources", fn.LogicalID, "Properties", "CodeUri"), want)
			}
			if f.Policies != nil {
				t.Errorf("the function has SAM Policies: its permissions must come from its role only")
			}
			if want := "getatt:" + roleOf(fn) + ".Arn"; f.Role == nil || *f.Role != want {
				t.Errorf("Role = %v, want %s", f.Role, want)
			}
			if want := "ref:" + logGroupOf(fn); at(tp.raw, "Resources", fn.LogicalID, "Properties", "LoggingConfig", "LogGroup") != want {
				t.Errorf("LoggingConfig.LogGroup is not %s (the role may write only there)", want)
			}
			checkEnv(t, tp, fn)
			checkPolicy(t, tp, fn)
		})
	}
	for name, r := range tp.typed.Resources {
		if r.AWSCloudFormationType() == "AWS::Serverless::Function" && !declared[name] {
			t.Errorf("template function %s is not declared in awsrun.Functions()", name)
		}
	}
}

func transforms(tp parsedTemplate) []string {
	var out []string
	if tp.typed.Transform.String != nil {
		out = append(out, *tp.typed.Transform.String)
	}
	if tp.typed.Transform.StringArray != nil {
		out = append(out, *tp.typed.Transform.StringArray...)
	}
	return out
}

// checkEnv: the template sets every variable the function reads and no
// other QUNFA_ variable; the provider token comes from Secrets Manager; and
// the values, with references filled in, pass the function's own
// configuration validation.
func checkEnv(t *testing.T, tp parsedTemplate, fn awsrun.Function) {
	t.Helper()
	env := functionEnv(tp, fn)
	for _, name := range fn.Env {
		if _, ok := env[name]; !ok {
			t.Errorf("%s reads %s, which the template does not set", fn.Name, name)
		}
	}
	for name := range env {
		if strings.HasPrefix(name, "QUNFA_") && !slices.Contains(fn.Env, name) {
			t.Errorf("template sets %s for %s, which does not read it", name, fn.Name)
		}
	}
	// No secret in a function's environment: no dynamic reference to
	// Secrets Manager (CloudFormation would copy the value in, readable by
	// GetFunctionConfiguration), no provider token variable.
	for name, v := range env {
		if strings.Contains(v, "{{resolve:") || strings.Contains(name, "TOKEN") && !strings.HasSuffix(name, "_SHA256") {
			t.Errorf("%s=%q: a secret (or a dynamic reference to one) in %s's environment", name, v, fn.Name)
		}
		// Nor a parameter given as a secret (NoEcho), nor a secret's value
		// under another name: only names and ARNs of secrets.
		if p, ok := strings.CutPrefix(v, "ref:"); ok && at(tp.raw, "Parameters", p, "NoEcho") == true {
			t.Errorf("%s=%q: %s's environment holds the NoEcho parameter %s", name, v, fn.Name, p)
		}
		if strings.Contains(name, "SECRET") && !strings.HasSuffix(name, "_SECRET") && !strings.HasSuffix(name, "_PREFIX") {
			t.Errorf("%s: a secret-looking variable in %s's environment (only secret names are allowed)", name, fn.Name)
		}
	}
	if fn.Provider && (env[awsrun.EnvProviderSecret] != "ref:ProviderSecretName" || env[awsrun.EnvTenantSecretPrefix] != "sub:"+tenantSecretPrefix) {
		t.Errorf("%s: %s=%q, %s=%q; want the secret's name and the tenants' prefix", fn.Name,
			awsrun.EnvProviderSecret, env[awsrun.EnvProviderSecret], awsrun.EnvTenantSecretPrefix, env[awsrun.EnvTenantSecretPrefix])
	}
	resolved := map[string]string{
		"ref:Table":                         "qunfa-table",
		"ref:WorkQueue":                     "https://sqs.ap-east-1.amazonaws.com/123456789012/qunfa-WorkQueue.fifo",
		"ref:ProviderURL":                   "https://provider.example",
		"ref:EventBus":                      "qunfa-dev-alerts",
		"sub:${AWS::StackName}-c-":          "qunfa-dev-c-",
		"getatt:SubmitFunction.Arn":         "arn:aws:lambda:ap-east-1:123456789012:function:qunfa-dev-SubmitFunction-X",
		"ref:ProviderSecretName":            "qunfa/dev/provider",
		"sub:" + tenantSecretPrefix:         "qunfa-dev/tenants/",
		"getatt:FailedInvocationsQueue.Arn": "arn:aws:sqs:ap-east-1:123456789012:qunfa-dev-FailedInvocationsQueue-X",
		"sub:${ItemRetentionDays}d":         "30d",
		"ref:ScheduleGroup":                 "qunfa-dev",
		"getatt:SchedulerRole.Arn":          "arn:aws:iam::123456789012:role/qunfa-dev-SchedulerRole-X",
	}
	_, err := awsrun.Load(fn, func(name string) string {
		v := env[name]
		if r, ok := resolved[v]; ok {
			return r
		}
		return v
	})
	if err != nil {
		t.Errorf("the template's environment does not pass %s's validation: %v", fn.Name, err)
	}
}

// campaignRuleARN is the resource of the api function's campaign rule
// actions: the rules named with its rule prefix. It is the only wildcard
// resource the policies may hold.
const campaignRuleARN = "sub:arn:${AWS::Partition}:events:${AWS::Region}:${AWS::AccountId}:rule/${AWS::StackName}-c-*"

// campaignScheduleARN is the resource of the api function's schedule
// actions: the campaign schedules (named c-…) of the stack's group.
const campaignScheduleARN = "sub:arn:${AWS::Partition}:scheduler:${AWS::Region}:${AWS::AccountId}:schedule/${ScheduleGroup}/c-*"

// passRole: a function that makes schedules passes them the campaign
// scheduler role, and no other.
func passRole(fn awsrun.Function) []string {
	if len(fn.CampaignSchedules) > 0 {
		return []string{"PassRole"}
	}
	return nil
}

// tenantSecretPrefix starts the names of the tenants' provider secrets.
const tenantSecretPrefix = "${AWS::StackName}/tenants/"

// providerSecretARNs are the resources of GetSecretValue: the default
// provider secret and the tenants' ones (Secrets Manager appends "-" and
// six characters to a name). The only other wildcard resources allowed.
var providerSecretARNs = []string{
	"sub:arn:${AWS::Partition}:secretsmanager:${AWS::Region}:${AWS::AccountId}:secret:${ProviderSecretName}-??????",
	"sub:arn:${AWS::Partition}:secretsmanager:${AWS::Region}:${AWS::AccountId}:secret:" + tenantSecretPrefix + "*/provider-??????",
}

// callbackSecretARNs are the resources of the api function's
// GetSecretValue: the WeChat and WeCom callback secrets, not the provider
// secrets.
var callbackSecretARNs = []string{
	"sub:arn:${AWS::Partition}:secretsmanager:${AWS::Region}:${AWS::AccountId}:secret:" + tenantSecretPrefix + "wechat-mp-callback/*/provider-??????",
	"sub:arn:${AWS::Partition}:secretsmanager:${AWS::Region}:${AWS::AccountId}:secret:" + tenantSecretPrefix + "wecom-app-callback/*/provider-??????",
}

// checkPolicy: the function's role has one inline policy granting exactly
// the declared actions: logs on its own log group, DynamoDB on the table
// and the indexes it queries, SQS on the work queue, PutEvents on the
// alert bus, and rule actions on the campaign rules (statement
// CampaignRules).
func checkPolicy(t *testing.T, tp parsedTemplate, fn awsrun.Function) {
	t.Helper()
	role, err := tp.typed.GetIAMRoleWithName(roleOf(fn))
	if err != nil {
		t.Fatalf("role: %v", err)
	}
	if len(role.Policies) != 1 || len(role.ManagedPolicyArns) != 0 {
		t.Fatalf("role %s: want exactly one inline policy and no managed policies, got %d and %v",
			roleOf(fn), len(role.Policies), role.ManagedPolicyArns)
	}
	if !strings.Contains(fmt.Sprint(role.AssumeRolePolicyDocument), "lambda.amazonaws.com") {
		t.Errorf("role %s is not assumable by Lambda", roleOf(fn))
	}
	actions := map[string][]string{}   // service → actions
	resources := map[string][]string{} // service → resources
	stmts, _ := at(role.Policies[0].PolicyDocument, "Statement").([]any)
	for _, s := range stmts {
		if at(s, "Effect") != "Allow" || at(s, "NotAction") != nil || at(s, "NotResource") != nil || at(s, "Condition") != nil {
			t.Errorf("statement %v: only plain Allow statements expected", s)
		}
		var svc string
		for _, a := range strs(at(s, "Action")) {
			p, _, _ := strings.Cut(a, ":")
			if strings.Contains(a, "*") {
				t.Errorf("wildcard action %s", a)
			}
			if svc != "" && p != svc {
				t.Errorf("statement mixes services %s and %s", svc, p)
			}
			svc = p
		}
		if svc == "events" && at(s, "Sid") == "CampaignRules" {
			svc = "events:rules"
		}
		if svc == "sqs" && at(s, "Sid") == "FailedInvocations" {
			svc = "sqs:failed"
		}
		if svc == "secretsmanager" && at(s, "Sid") == "CallbackTokens" {
			svc = "secretsmanager:callbacks"
		}
		for _, a := range strs(at(s, "Action")) {
			_, action, _ := strings.Cut(a, ":")
			actions[svc] = append(actions[svc], action)
		}
		for _, r := range strs(at(s, "Resource")) {
			wild := strings.ContainsAny(strings.TrimPrefix(r, "sub:"), "*?")
			if wild && !(svc == "events:rules" && r == campaignRuleARN) && !(svc == "secretsmanager" && slices.Contains(providerSecretARNs, r)) &&
				!(svc == "scheduler" && r == campaignScheduleARN) &&
				!(svc == "secretsmanager:callbacks" && slices.Contains(callbackSecretARNs, r)) &&
				!(svc == "xray" && r == "*") {
				t.Errorf("wildcard resource %s", r)
			}
			resources[svc] = append(resources[svc], r)
		}
	}
	wantResources := []string{"getatt:Table.Arn"}
	for _, idx := range fn.Indexes {
		wantResources = append(wantResources, "sub:${Table.Arn}/index/"+idx)
	}
	checks := []struct {
		svc              string
		actions, targets []string
	}{
		{"logs", []string{"CreateLogStream", "PutLogEvents"}, []string{"getatt:" + logGroupOf(fn) + ".Arn"}},
		{"dynamodb", fn.DynamoDB, wantResources},
		{"sqs", fn.SQS, []string{"getatt:WorkQueue.Arn"}},
		{"events", fn.Events, []string{"getatt:EventBus.Arn"}},
		{"events:rules", fn.CampaignRules, []string{campaignRuleARN}},
		{"secretsmanager", fn.Secrets, providerSecretARNs},
		{"sqs:failed", failedInvocations(fn), []string{"getatt:FailedInvocationsQueue.Arn"}},
		{"scheduler", fn.CampaignSchedules, []string{campaignScheduleARN}},
		{"iam", passRole(fn), []string{"getatt:SchedulerRole.Arn"}},
		{"secretsmanager:callbacks", fn.CallbackSecrets, callbackSecretARNs},
		{"xray", xrayWrites, []string{"*"}},
	}
	for _, c := range checks {
		if got, want := sorted(actions[c.svc]), sorted(c.actions); !slices.Equal(got, want) {
			t.Errorf("%s %s actions = %v, want %v (awsrun.%s)", roleOf(fn), c.svc, got, want, fn.LogicalID)
		}
		if got, want := sorted(resources[c.svc]), sorted(c.targets); len(c.actions) > 0 && !slices.Equal(got, want) {
			t.Errorf("%s %s resources = %v, want %v", roleOf(fn), c.svc, got, want)
		}
		delete(actions, c.svc)
	}
	for svc, a := range actions {
		t.Errorf("%s grants %s actions %v that the function does not call", roleOf(fn), svc, a)
	}
}

// xrayWrites are what active tracing needs of every function's role:
// Lambda and the X-Ray SDK send segments with it (the SDK's sampling calls
// are not made under Lambda, which decides the sampling). X-Ray has no
// resource-level permissions, hence "*".
var xrayWrites = []string{"PutTelemetryRecords", "PutTraceSegments"}

// TestTemplateTracing: every function is traced, in the mode of its own
// parameter (Active or PassThrough), whose default is the function's
// declared one — the sender and webhooks PassThrough, so that their traces
// are bounded per job and not per second — and its role, which the
// template makes itself, so SAM does not add X-Ray's policy to it, may
// write the segments: without that Lambda drops the traces. Only the two
// writes, nothing else of X-Ray.
func TestTemplateTracing(t *testing.T) {
	tp := loadTemplate(t)
	if awsrun.Sender.Tracing != awsrun.TracingPassThrough || !awsrun.Sender.EndsTraces {
		t.Errorf("sender tracing %q, ends traces %v: want PassThrough, ending them (its next turns must start no traced invocation)",
			awsrun.Sender.Tracing, awsrun.Sender.EndsTraces)
	}
	src, err := os.ReadFile(filepath.Join(repoRoot(t), "template.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, fn := range awsrun.Functions() {
		// A !Ref of a parameter reads as the parameter's default.
		param := strings.TrimSuffix(fn.LogicalID, "Function") + "Tracing"
		if got := functionProp(tp, fn, "Tracing"); got != fn.Tracing || strings.Count(string(src), "Tracing: !Ref "+param+"\n") != 1 {
			t.Errorf("%s Tracing = %v, want the parameter %s (default %s), used once", fn.Name, got, param, fn.Tracing)
		}
		if d := at(tp.raw, "Parameters", param, "Default"); d != fn.Tracing || (fn.Tracing != awsrun.TracingActive && fn.Tracing != awsrun.TracingPassThrough) {
			t.Errorf("%s default %v, want %s (Active or PassThrough)", param, d, fn.Tracing)
		}
		if got := strs(at(tp.raw, "Parameters", param, "AllowedValues")); !slices.Equal(got, []string{"Active", "PassThrough"}) {
			t.Errorf("%s allowed values %v, want [Active PassThrough]", param, got)
		}
		if role := functionProp(tp, fn, "Role"); role != "getatt:"+roleOf(fn)+".Arn" {
			t.Errorf("%s role %v, want its own %s", fn.Name, role, roleOf(fn))
		}
		role, err := tp.typed.GetIAMRoleWithName(roleOf(fn))
		if err != nil {
			t.Fatalf("role: %v", err)
		}
		var got []string
		for _, p := range role.Policies {
			stmts, _ := at(p.PolicyDocument, "Statement").([]any)
			for _, st := range stmts {
				for _, a := range strs(at(st, "Action")) {
					if strings.HasPrefix(a, "xray:") {
						got = append(got, strings.TrimPrefix(a, "xray:"))
						if r := strs(at(st, "Resource")); !slices.Equal(r, []string{"*"}) || at(st, "Effect") != "Allow" {
							t.Errorf("%s: %s on %v", roleOf(fn), a, r)
						}
					}
				}
			}
		}
		if !slices.Equal(sorted(got), xrayWrites) {
			t.Errorf("%s X-Ray actions %v, want %v", roleOf(fn), got, xrayWrites)
		}
	}
	if rules := tp.typed.GetAllXRaySamplingRuleResources(); len(rules) != 0 {
		t.Errorf("sampling rules %v: Lambda does not apply them to its functions' traces", rules)
	}
}

// failedInvocations: an asynchronously invoked function may send to the
// failed-invocations queue, its OnFailure destination.
func failedInvocations(fn awsrun.Function) []string {
	if fn.Async {
		return []string{awsrun.SQSSendMessage}
	}
	return nil
}

func TestTemplateQueuesAndEventSources(t *testing.T) {
	tp := loadTemplate(t)
	work, err := tp.typed.GetSQSQueueWithName("WorkQueue")
	if err != nil {
		t.Fatal(err)
	}
	dlq, err := tp.typed.GetSQSQueueWithName("DeadLetterQueue")
	if err != nil {
		t.Fatal(err)
	}
	for name, q := range map[string]bool{"WorkQueue": work.FifoQueue != nil && *work.FifoQueue, "DeadLetterQueue": dlq.FifoQueue != nil && *dlq.FifoQueue} {
		if !q {
			t.Errorf("%s is not FIFO", name)
		}
	}
	if work.ContentBasedDeduplication == nil || *work.ContentBasedDeduplication {
		t.Errorf("WorkQueue must not deduplicate by content: every turn carries its own id")
	}
	for _, name := range []string{"WorkQueue", "DeadLetterQueue"} {
		p := at(tp.raw, "Resources", name, "Properties")
		if at(p, "DeduplicationScope") != "messageGroup" || at(p, "FifoThroughputLimit") != "perMessageGroupId" {
			t.Errorf("%s is not in FIFO high-throughput mode (DeduplicationScope messageGroup, FifoThroughputLimit perMessageGroupId)", name)
		}
	}
	if work.ReceiveMessageWaitTimeSeconds == nil || *work.ReceiveMessageWaitTimeSeconds != 0 {
		t.Errorf("WorkQueue ReceiveMessageWaitTimeSeconds must be 0")
	}
	if at(work.RedrivePolicy, "deadLetterTargetArn") != "getatt:DeadLetterQueue.Arn" {
		t.Errorf("WorkQueue redrive target = %v", at(work.RedrivePolicy, "deadLetterTargetArn"))
	}
	if n, ok := at(work.RedrivePolicy, "maxReceiveCount").(float64); !ok || n < 2 || n > 1000 {
		t.Errorf("WorkQueue maxReceiveCount = %v", at(work.RedrivePolicy, "maxReceiveCount"))
	}
	timeout, _ := functionProp(tp, awsrun.Sender, "Timeout").(float64)
	if timeout <= 0 || work.VisibilityTimeout == nil || float64(*work.VisibilityTimeout) < 6*timeout {
		t.Errorf("WorkQueue VisibilityTimeout %v must be ≥ 6 × sender timeout %v", at(tp.raw, "Resources", "WorkQueue", "Properties", "VisibilityTimeout"), timeout)
	}
	if margin, err := time.ParseDuration(functionEnv(tp, awsrun.Sender)[awsrun.EnvDeadlineMargin]); err != nil ||
		margin+time.Second >= time.Duration(timeout)*time.Second {
		t.Errorf("sender deadline margin %v leaves no time for a batch in a %vs invocation", margin, timeout)
	}

	ev := at(tp.raw, "Resources", awsrun.Sender.LogicalID, "Properties", "Events").(map[string]any)
	var sqsEvents int
	for name, e := range ev {
		if at(e, "Type") != "SQS" {
			t.Errorf("sender event %s has type %v", name, at(e, "Type"))
			continue
		}
		sqsEvents++
		p := at(e, "Properties")
		if at(p, "Queue") != "getatt:WorkQueue.Arn" {
			t.Errorf("sender event source queue = %v", at(p, "Queue"))
		}
		if n, _ := at(p, "BatchSize").(float64); n < 1 || n > 10 {
			t.Errorf("sender BatchSize = %v, want small (1..10)", at(p, "BatchSize"))
		}
		if !slices.Contains(strs(at(p, "FunctionResponseTypes")), "ReportBatchItemFailures") {
			t.Errorf("sender event source lacks ReportBatchItemFailures")
		}
		if at(p, "ScalingConfig", "MaximumConcurrency") == nil {
			t.Errorf("sender event source has no ScalingConfig.MaximumConcurrency")
		}
	}
	if sqsEvents != 1 {
		t.Errorf("sender has %d SQS event sources, want 1", sqsEvents)
	}

	// Routes: POST /v1/jobs to submit, everything else ($default) to api;
	// schedules for the reconciler and the breaker. (Campaign rules are
	// made at run time by the api function: see TestTemplateCampaignRules.)
	type route struct{ fn, typ, path, method string }
	var got []route
	for _, fn := range awsrun.Functions() {
		evs, _ := at(tp.raw, "Resources", fn.LogicalID, "Properties", "Events").(map[string]any)
		for _, e := range evs {
			got = append(got, route{fn.Name, fmt.Sprint(at(e, "Type")), fmt.Sprint(at(e, "Properties", "Path")), fmt.Sprint(at(e, "Properties", "Method"))})
			if at(e, "Type") == "HttpApi" && at(e, "Properties", "ApiId") != "ref:HttpApi" {
				t.Errorf("%s HttpApi event not on HttpApi", fn.Name)
			}
			if at(e, "Type") == "EventBridgeRule" {
				if at(e, "Properties", "EventBusName") != "ref:EventBus" {
					t.Errorf("%s rule not on the alert bus: %v", fn.Name, e)
				}
				if fn.Name != "webhooks" && !slices.Contains(strs(at(e, "Properties", "Pattern", "detail-type")), "qunfa.campaign") {
					t.Errorf("%s campaign rule: %v", fn.Name, e)
				}
				if fn.Name == "webhooks" {
					checkWebhookRule(t, e)
				}
				if at(e, "Properties", "DeadLetterConfig", "Arn") != "getatt:FailedInvocationsQueue.Arn" {
					t.Errorf("%s rule has no dead-letter queue (FailedInvocationsQueue): %v", fn.Name, at(e, "Properties", "DeadLetterConfig"))
				}
			}
			if at(e, "Type") == "ScheduleV2" {
				checkSchedule(t, fn, at(e, "Properties"))
			}
		}
	}
	for _, want := range []route{
		{"submit", "HttpApi", "/v1/jobs", "POST"},
		{"api", "HttpApi", "<nil>", "<nil>"},
		{"sender", "SQS", "<nil>", "<nil>"},
		{"reconciler", "ScheduleV2", "<nil>", "<nil>"},
		{"breaker", "ScheduleV2", "<nil>", "<nil>"},
		{"webhooks", "EventBridgeRule", "<nil>", "<nil>"},
		{"webhooks", "ScheduleV2", "<nil>", "<nil>"},
	} {
		if !slices.Contains(got, want) {
			t.Errorf("no event %+v; events: %+v", want, got)
		}
	}
	if len(got) != 7 {
		t.Errorf("events %+v, want exactly the seven above", got)
	}
}

var regexpRefs = regexp.MustCompile(`\$\{[A-Za-z:.]+\}`)
