package awsrun_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/scheduler"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/smithy-go/middleware"

	"github.com/qunfa/qunfa/internal/api"
	"github.com/qunfa/qunfa/internal/awsemu"
	"github.com/qunfa/qunfa/internal/awsrun"
	"github.com/qunfa/qunfa/internal/handlers"
	"github.com/qunfa/qunfa/internal/mockprovider"
	"github.com/qunfa/qunfa/internal/queue"
	"github.com/qunfa/qunfa/internal/queue/sqsqueue"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/store/dynamostore"
)

// callRecorder records the AWS calls made through a client: "dynamodb:GetItem",
// "dynamodb:index:due", "sqs:SendMessage".
type callRecorder struct {
	mu    sync.Mutex
	calls map[string]bool
}

func (r *callRecorder) option() func(*config.LoadOptions) error {
	return config.WithAPIOptions([]func(*middleware.Stack) error{func(st *middleware.Stack) error {
		return st.Initialize.Add(middleware.InitializeMiddlewareFunc("qunfaRecordCalls",
			func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				typ := reflect.TypeOf(in.Parameters).Elem()
				svc := path.Base(typ.PkgPath())
				r.mu.Lock()
				if r.calls == nil {
					r.calls = map[string]bool{}
				}
				r.calls[svc+":"+strings.TrimSuffix(typ.Name(), "Input")] = true
				if q, ok := in.Parameters.(*dynamodb.QueryInput); ok && q.IndexName != nil {
					r.calls["dynamodb:index:"+*q.IndexName] = true
				}
				r.mu.Unlock()
				return next.HandleInitialize(ctx, in)
			}), middleware.After)
	}})
}

func (r *callRecorder) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.calls))
	for c := range r.calls {
		out = append(out, c)
	}
	sort.Strings(out)
	return out
}

// syncBuffer is a bytes.Buffer safe for concurrent writers (loggers).
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// allowed is what fn's policy grants, in callRecorder's terms.
func allowed(fn awsrun.Function) map[string]bool {
	m := map[string]bool{}
	for _, a := range fn.DynamoDB {
		m["dynamodb:"+a] = true
	}
	for _, i := range fn.Indexes {
		m["dynamodb:index:"+i] = true
	}
	for _, a := range fn.SQS {
		m["sqs:"+a] = true
		if a == awsrun.SQSSendMessage {
			// SQS authorizes a batch with the permission of its single
			// action: sqs:SendMessage grants SendMessageBatch.
			m["sqs:SendMessageBatch"] = true
		}
	}
	for _, a := range append(fn.Events, fn.CampaignRules...) {
		m["eventbridge:"+a] = true
	}
	for _, a := range fn.Secrets {
		m["secretsmanager:"+a] = true
	}
	for _, a := range fn.CampaignSchedules {
		m["scheduler:"+a] = true
	}
	return m
}

// awsEnv points the SDK at the emulators the way a Lambda on LocalStack
// would be pointed: AWS_ENDPOINT_URL_* in the environment, honoured by
// the SDK itself.
func awsEnv(t *testing.T) {
	t.Setenv("AWS_ENDPOINT_URL_DYNAMODB", awsemu.DynamoDB(t))
	t.Setenv("AWS_ENDPOINT_URL_SQS", awsemu.SQS(t))
	t.Setenv("AWS_ENDPOINT_URL_EVENTBRIDGE", awsemu.Moto(t))
	t.Setenv("AWS_ENDPOINT_URL_SECRETS_MANAGER", awsemu.Moto(t))
	t.Setenv("AWS_ENDPOINT_URL_SCHEDULER", awsemu.Moto(t))
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	t.Setenv("AWS_SESSION_TOKEN", "")
	t.Setenv("AWS_REGION", "us-east-1")
	t.Setenv("AWS_PROFILE", "")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
}

func uniqueName(prefix string) string {
	return prefix + strconv.FormatInt(time.Now().UnixNano()%1e12, 36)
}

// readEvent decodes events/<name>, with replacements applied first.
func readEvent(t *testing.T, name string, into any, replace ...string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "events", name))
	if err != nil {
		t.Fatal(err)
	}
	s := strings.NewReplacer(replace...).Replace(string(b))
	if err := json.Unmarshal([]byte(s), into); err != nil {
		t.Fatalf("events/%s: %v", name, err)
	}
}

func rawEvent(t *testing.T, name string, replace ...string) json.RawMessage {
	t.Helper()
	var m json.RawMessage
	readEvent(t, name, &m, replace...)
	return m
}

// function is one function built the way its main.go builds it, with its
// calls recorded.
type function struct {
	spec  awsrun.Function
	core  *awsrun.Core
	calls *callRecorder
}

func buildFunction(t *testing.T, fn awsrun.Function, env map[string]string, log *slog.Logger) function {
	t.Helper()
	cfg, err := awsrun.Load(fn, func(k string) string { return env[k] })
	if err != nil {
		t.Fatalf("%s config: %v", fn.Name, err)
	}
	rec := &callRecorder{}
	clients, err := awsrun.NewClients(context.Background(), rec.option())
	if err != nil {
		t.Fatal(err)
	}
	core, err := awsrun.Build(cfg, clients, log.With("fn", fn.Name))
	if err != nil {
		t.Fatalf("%s: %v", fn.Name, err)
	}
	return function{spec: fn, core: core, calls: rec}
}

// TestLambdaHandlersOnAWSAdapters runs the five functions' handlers, built
// by awsrun as in Lambda, on DynamoDB (dynalite), SQS FIFO (fauxqs) and
// EventBridge (moto: the alert bus, the campaign rules) with the mock
// provider, fed with the sample events of events/; a small event source
// loop stands in for the Lambda SQS poller, and the campaign rule's input
// template, filled as EventBridge fills it, for its firings.
func TestLambdaHandlersOnAWSAdapters(t *testing.T) {
	awsEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// Every log line is kept, to check no provider token is in one.
	var logs syncBuffer
	var logOut io.Writer = &logs
	if testing.Verbose() {
		logOut = io.MultiWriter(&logs, os.Stderr)
	}
	log := slog.New(slog.NewJSONHandler(logOut, &slog.HandlerOptions{Level: slog.LevelDebug}))

	// Infrastructure, as template.yaml declares it.
	admin, err := awsrun.NewClients(ctx)
	if err != nil {
		t.Fatal(err)
	}
	table, queueURL, bus := stackInfra(t, ctx, admin, "qunfa-e2e-")
	logPath := filepath.Join(t.TempDir(), "deliveries.jsonl")
	mock, err := mockprovider.New(mockprovider.Config{LogPath: logPath, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	provider := httptest.NewServer(mock.Handler()) // 127.0.0.1
	defer provider.Close()
	defer mock.Close()

	// The provider credentials, as an operator stores them in Secrets
	// Manager: the deployment's default and tenant-a's own, which the
	// mock requires for tenant-a's account.
	secretStack := uniqueName("qunfa-e2e-")
	const tenantAToken, defaultToken = "tenant-a-provider-token-1", "default-provider-token-1"
	for name, tok := range map[string]string{secretStack + "/provider": defaultToken, secretStack + "/tenants/tenant-a/provider": tenantAToken} {
		if _, err := admin.SecretsManager.CreateSecret(ctx, &secretsmanager.CreateSecretInput{Name: aws.String(name),
			SecretString: aws.String(`{"token":"` + tok + `"}`)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := mock.SetBehaviour("acct-a", mockprovider.Behaviour{Token: tenantAToken}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, tok := range []string{tenantAToken, defaultToken} {
			if strings.Contains(logs.String(), tok) {
				t.Errorf("a provider token is in the functions' logs")
			}
		}
	})

	rulePrefix := uniqueName("qe2e") + "-c-"
	const submitARN = "arn:aws:lambda:us-east-1:123456789012:function:qunfa-e2e-SubmitFunction"
	const schedulerRole = "arn:aws:iam::123456789012:role/qunfa-e2e-SchedulerRole"
	scheduleGroup := uniqueName("qe2e")
	if _, err := admin.Scheduler.CreateScheduleGroup(ctx, &scheduler.CreateScheduleGroupInput{Name: aws.String(scheduleGroup)}); err != nil {
		t.Fatal(err)
	}

	env := map[string]string{
		awsrun.EnvTable: table, awsrun.EnvQueueURL: queueURL, awsrun.EnvLogLevel: "info",
		awsrun.EnvAlertBus: bus, awsrun.EnvCampaignRulePrefix: rulePrefix, awsrun.EnvCampaignTarget: submitARN,
		awsrun.EnvCampaignScheduleGroup: scheduleGroup, awsrun.EnvSchedulerRole: schedulerRole,
		awsrun.EnvCampaignTimeZone: "Asia/Shanghai",
		awsrun.EnvProviderURL:      provider.URL, awsrun.EnvProviderSecret: secretStack + "/provider",
		awsrun.EnvTenantSecretPrefix:     secretStack + "/tenants/",
		awsrun.EnvProviderConnectTimeout: "1s", awsrun.EnvProviderTimeout: "2s",
		awsrun.EnvClaimBatch: "10", awsrun.EnvConcurrency: "4",
		awsrun.EnvTurnDuration: "5s", awsrun.EnvDeadlineMargin: "6s",
		awsrun.EnvStaleAfter: "2m", awsrun.EnvSettleAfter: "10s",
	}
	fns := map[string]function{}
	for _, fn := range awsrun.Functions() {
		fns[fn.Name] = buildFunction(t, fn, env, log)
	}
	submitH := handlers.Submit(fns["submit"].core.API, fns["submit"].core.Campaigns, log)
	apiH := handlers.API(fns["api"].core.API)
	senderH := handlers.Sender(fns["sender"].core.Sender, log)
	reconcilerH := handlers.Reconciler(fns["reconciler"].core.Reconciler, log)
	breakerH := handlers.Breaker(fns["breaker"].core.Breakers, log)

	// The operator provisions the tenant's API token (docs/deploy.md): the
	// token of the sample events, stored hashed.
	adminStore := dynamostore.New(admin.DynamoDB, table, dynamostore.Options{Logger: log})
	if err := adminStore.PutToken(ctx, api.HashToken("qf_example_token"), "tenant-a"); err != nil {
		t.Fatal(err)
	}
	// The platform operator grants the provider account to the tenant.
	if err := adminStore.GrantAccount(ctx, "tenant-a", "acct-a", time.Now()); err != nil {
		t.Fatal(err)
	}

	var putAccount events.APIGatewayV2HTTPRequest
	readEvent(t, "api-put-account.json", &putAccount)
	resp, err := apiH(ctx, putAccount)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("PUT account: %v %d %s", err, resp.StatusCode, resp.Body)
	}

	// POST /v1/jobs through the submit function (3 recipients + 1 duplicate).
	out, err := submitH(ctx, rawEvent(t, "submit-api.json"))
	if err != nil {
		t.Fatal(err)
	}
	sresp, ok := out.(events.APIGatewayV2HTTPResponse)
	if !ok || sresp.StatusCode != 202 {
		t.Fatalf("submit: %T %+v", out, out)
	}
	var apiJob api.Job
	if err := json.Unmarshal([]byte(sresp.Body), &apiJob); err != nil || apiJob.Total != 3 {
		t.Fatalf("submitted job %s: %v", sresp.Body, err)
	}
	// A campaign through the api function: stored, and its EventBridge
	// Scheduler schedule made in the stack's group, pointing at submit (no
	// rule on the default bus any more).
	var postCampaign events.APIGatewayV2HTTPRequest
	readEvent(t, "api-post-campaign.json", &postCampaign)
	cresp, err := apiH(ctx, postCampaign)
	if err != nil || cresp.StatusCode != 201 {
		t.Fatalf("POST campaign: %v %d %s", err, cresp.StatusCode, cresp.Body)
	}
	// Its next firing counts in the stack's zone: Monday 08:00 in Shanghai.
	var shown api.Campaign
	shanghai, _ := time.LoadLocation("Asia/Shanghai")
	if err := json.Unmarshal([]byte(cresp.Body), &shown); err != nil || shown.NextFireAt == nil ||
		shown.NextFireAt.In(shanghai).Format("Mon 15:04") != "Mon 08:00" {
		t.Fatalf("campaign's next firing: %v %s", err, cresp.Body)
	}
	schedules, err := admin.Scheduler.ListSchedules(ctx, &scheduler.ListSchedulesInput{GroupName: aws.String(scheduleGroup)})
	if err != nil || len(schedules.Schedules) != 1 {
		t.Fatalf("campaign schedules: %v %+v", err, schedules)
	}
	schedule, err := admin.Scheduler.GetSchedule(ctx, &scheduler.GetScheduleInput{Name: schedules.Schedules[0].Name, GroupName: aws.String(scheduleGroup)})
	if err != nil || aws.ToString(schedule.ScheduleExpression) != "cron(0 8 ? * MON *)" || aws.ToString(schedule.ScheduleExpressionTimezone) != "Asia/Shanghai" ||
		schedule.Target == nil || aws.ToString(schedule.Target.Arn) != submitARN || aws.ToString(schedule.Target.RoleArn) != schedulerRole {
		t.Fatalf("campaign schedule: %v %+v", err, schedule)
	}
	if rules, err := admin.EventBridge.ListRules(ctx, &eventbridge.ListRulesInput{NamePrefix: aws.String(rulePrefix)}); err != nil || len(rules.Rules) != 0 {
		t.Fatalf("campaign rules on the default bus: %v %+v", err, rules)
	}
	// The schedule fires for Monday 2025-02-03 08:00 and is delivered
	// twice (at least once): the target's input, then the sample event
	// (the same firing). One job.
	firing := strings.Replace(aws.ToString(schedule.Target.Input), "<aws.scheduler.scheduled-time>", "2025-02-03T08:00:00Z", 1)
	var campaign handlers.CampaignResult
	for i, ev := range []json.RawMessage{json.RawMessage(firing), rawEvent(t, "submit-campaign.json")} {
		out, err := submitH(ctx, ev)
		if err != nil {
			t.Fatalf("campaign firing: %v", err)
		}
		res := out.(handlers.CampaignResult)
		if i == 0 && (!res.Created || res.Total != 2) || i == 1 && (res.Created || res.JobID != campaign.JobID) {
			t.Fatalf("campaign delivery %d: %+v", i+1, res)
		}
		campaign = res
	}
	// The breaker's schedule while the jobs run: nothing to open.
	var breakerEvent events.EventBridgeEvent
	readEvent(t, "breaker-schedule.json", &breakerEvent)
	if err := breakerH(ctx, breakerEvent); err != nil {
		t.Fatalf("breaker: %v", err)
	}
	jobs := []string{apiJob.ID, campaign.JobID}

	// The event source: receive, hand the batch to the sender handler as an
	// SQS event built on events/sender-sqs.json, delete what it did not
	// report failed.
	var template events.SQSEvent
	readEvent(t, "sender-sqs.json", &template)
	work := sqsqueue.New(admin.SQS, queueURL)
	getJob := func(id string) api.Job {
		var ev events.APIGatewayV2HTTPRequest
		readEvent(t, "api-get-job.json", &ev, "JOB_ID", id)
		resp, err := apiH(ctx, ev)
		var j api.Job
		if err != nil || resp.StatusCode != 200 || json.Unmarshal([]byte(resp.Body), &j) != nil {
			t.Fatalf("GET job %s: %v %d %s", id, err, resp.StatusCode, resp.Body)
		}
		return j
	}
	done := func() bool {
		for _, id := range jobs {
			if getJob(id).Status != "completed" {
				return false
			}
		}
		return true
	}
	invocations := 0
	for !done() {
		if ctx.Err() != nil {
			t.Fatalf("jobs not completed in time: %+v / %+v", getJob(jobs[0]), getJob(jobs[1]))
		}
		msgs, err := work.Receive(ctx, queue.ReceiveParams{Max: 1, VisibilityTimeout: 30 * time.Second, Wait: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			ev := sqsEventFor(template, m, queueURL)
			ictx, icancel := context.WithTimeout(ctx, 15*time.Second) // the invocation deadline
			resp, err := senderH(ictx, ev)
			icancel()
			invocations++
			if err != nil {
				t.Fatalf("sender: %v", err)
			}
			failed := map[string]bool{}
			for _, f := range resp.BatchItemFailures {
				failed[f.ItemIdentifier] = true
			}
			if !failed[m.ID] {
				if err := work.Delete(ctx, m.ReceiptHandle); err != nil {
					t.Fatalf("delete: %v", err)
				}
			}
		}
	}
	t.Logf("jobs completed after %d sender invocations", invocations)

	// The reconciler's scheduled event: nothing to settle, counts add up.
	var sched events.EventBridgeEvent
	readEvent(t, "reconciler-schedule.json", &sched)
	if err := reconcilerH(ctx, sched); err != nil {
		t.Fatalf("reconciler: %v", err)
	}

	if err := breakerH(ctx, breakerEvent); err != nil {
		t.Fatalf("breaker after the jobs: %v", err)
	}

	// Status and items through the api function.
	for _, id := range jobs {
		j := getJob(id)
		if j.Counts.Confirmed != j.Total || j.Counts.Pending+j.Counts.Submitted+j.Counts.Failed+j.Counts.Abandoned != 0 {
			t.Errorf("job %s counts %+v, total %d", id, j.Counts, j.Total)
		}
	}
	var items events.APIGatewayV2HTTPRequest
	readEvent(t, "api-list-items.json", &items, "JOB_ID", apiJob.ID)
	iresp, err := apiH(ctx, items)
	var list api.ItemList
	if err != nil || iresp.StatusCode != 200 || json.Unmarshal([]byte(iresp.Body), &list) != nil || len(list.Items) != 3 {
		t.Fatalf("items: %v %d %s", err, iresp.StatusCode, iresp.Body)
	}

	// The provider's delivery log: every recipient exactly once.
	want := map[string]int{
		"acct-a/wm-user-001": 1, "acct-a/wm-user-002": 1, "acct-a/wm-user-003": 1,
		"acct-a/wm-user-101": 1, "acct-a/wm-user-102": 1,
	}
	got := deliveries(t, logPath)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("deliveries %v, want %v", got, want)
	}
	if st := mock.Stats()["acct-a"]; st.Accepted != 5 {
		t.Errorf("mock stats %+v, want 5 accepted", st)
	}

	// Deleting the campaign removes its schedule (and any former rule).
	del := postCampaign
	del.RawPath, del.Body = "/v1/campaigns/weekly-digest", ""
	del.RequestContext.HTTP.Method, del.RequestContext.HTTP.Path = "DELETE", del.RawPath
	if resp, err := apiH(ctx, del); err != nil || resp.StatusCode != 204 {
		t.Fatalf("DELETE campaign: %v %d %s", err, resp.StatusCode, resp.Body)
	}
	if rules, err := admin.EventBridge.ListRules(ctx, &eventbridge.ListRulesInput{NamePrefix: aws.String(rulePrefix)}); err != nil || len(rules.Rules) != 0 {
		t.Errorf("campaign rules after delete: %v %+v", err, rules)
	}
	if left, err := admin.Scheduler.ListSchedules(ctx, &scheduler.ListSchedulesInput{GroupName: aws.String(scheduleGroup)}); err != nil || len(left.Schedules) != 0 {
		t.Errorf("campaign schedules after delete: %v %+v", err, left)
	}

	// Every function that started or finished a job published the alert.
	for _, name := range []string{"submit", "sender"} {
		if !slices.Contains(fns[name].calls.list(), "eventbridge:PutEvents") {
			t.Errorf("%s published no alert on the bus", name)
		}
	}

	// Every call a function made is granted by its policy (template_test
	// checks the policy is exactly awsrun's declaration).
	for _, f := range fns {
		ok := allowed(f.spec)
		calls := f.calls.list()
		for _, c := range calls {
			if !ok[c] {
				t.Errorf("%s called %s, which its policy does not grant (awsrun.%s)", f.spec.Name, c, f.spec.LogicalID)
			}
		}
		t.Logf("%s calls: %v", f.spec.Name, calls)
	}
}

// sqsEventFor is the event the Lambda SQS poller would hand the sender for
// message m: the sample record with m's identity, body and attributes.
func sqsEventFor(template events.SQSEvent, m queue.Message, queueURL string) events.SQSEvent {
	r := template.Records[0]
	r.MessageId, r.ReceiptHandle, r.Body = m.ID, m.ReceiptHandle, string(m.Body)
	r.Attributes = map[string]string{}
	for k, v := range template.Records[0].Attributes {
		r.Attributes[k] = v
	}
	r.Attributes["MessageGroupId"] = m.Group
	r.Attributes["MessageDeduplicationId"] = m.DedupID
	r.Attributes["ApproximateReceiveCount"] = strconv.Itoa(m.ReceiveCount)
	r.Attributes["SentTimestamp"] = strconv.FormatInt(m.SentAt.UnixMilli(), 10)
	r.EventSourceARN = "arn:aws:sqs:us-east-1:000000000000:" + path.Base(queueURL)
	return events.SQSEvent{Records: []events.SQSMessage{r}}
}

// deliveries counts the mock's delivery log lines per account/recipient.
func deliveries(t *testing.T, logPath string) map[string]int {
	t.Helper()
	f, err := os.Open(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var d mockprovider.Delivery
		if err := json.Unmarshal(sc.Bytes(), &d); err != nil {
			t.Fatalf("delivery log line %q: %v", sc.Text(), err)
		}
		out[fmt.Sprintf("%s/%s", d.GUID, d.ToID)]++
	}
	return out
}

// TestTemplateTableMatchesDynamostore creates the table with
// dynamostore.CreateTable and compares it with template.yaml's Table.
func TestTemplateTableMatchesDynamostore(t *testing.T) {
	awsEnv(t)
	ctx := context.Background()
	c, err := awsrun.NewClients(ctx)
	if err != nil {
		t.Fatal(err)
	}
	name := uniqueName("qunfa-tbl-")
	if err := dynamostore.CreateTable(ctx, c.DynamoDB, name); err != nil {
		t.Fatal(err)
	}
	defer c.DynamoDB.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(name)})
	desc, err := c.DynamoDB.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)})
	if err != nil {
		t.Fatal(err)
	}
	d := desc.Table
	keys := func(ks []types.KeySchemaElement) string {
		var s []string
		for _, k := range ks {
			s = append(s, aws.ToString(k.AttributeName)+" "+string(k.KeyType))
		}
		return strings.Join(s, ", ")
	}
	var adapterAttrs, adapterGSIs []string
	for _, a := range d.AttributeDefinitions {
		adapterAttrs = append(adapterAttrs, aws.ToString(a.AttributeName)+":"+string(a.AttributeType))
	}
	for _, g := range d.GlobalSecondaryIndexes {
		adapterGSIs = append(adapterGSIs, aws.ToString(g.IndexName)+"("+keys(g.KeySchema)+") "+string(g.Projection.ProjectionType))
	}

	tbl, err := loadTemplate(t).typed.GetDynamoDBTableWithName("Table")
	if err != nil {
		t.Fatal(err)
	}
	var tmplAttrs, tmplGSIs []string
	for _, a := range tbl.AttributeDefinitions {
		tmplAttrs = append(tmplAttrs, a.AttributeName+":"+a.AttributeType)
	}
	var tmplKeys []string
	for _, k := range tbl.KeySchema {
		tmplKeys = append(tmplKeys, k.AttributeName+" "+k.KeyType)
	}
	for _, g := range tbl.GlobalSecondaryIndexes {
		var ks []string
		for _, k := range g.KeySchema {
			ks = append(ks, k.AttributeName+" "+k.KeyType)
		}
		proj := ""
		if g.Projection.ProjectionType != nil {
			proj = *g.Projection.ProjectionType
		}
		tmplGSIs = append(tmplGSIs, g.IndexName+"("+strings.Join(ks, ", ")+") "+proj)
	}
	if got, want := sorted(tmplAttrs), sorted(adapterAttrs); !slices.Equal(got, want) {
		t.Errorf("attributes: template %v, adapter %v", got, want)
	}
	if got, want := strings.Join(tmplKeys, ", "), keys(d.KeySchema); got != want {
		t.Errorf("key schema: template %s, adapter %s", got, want)
	}
	if got, want := sorted(tmplGSIs), sorted(adapterGSIs); !slices.Equal(got, want) {
		t.Errorf("indexes: template %v, adapter %v", got, want)
	}
	if tbl.BillingMode == nil || *tbl.BillingMode != "PAY_PER_REQUEST" {
		t.Errorf("billing mode %v, want PAY_PER_REQUEST (on-demand)", tbl.BillingMode)
	}
	if p := tbl.PointInTimeRecoverySpecification; p == nil || p.PointInTimeRecoveryEnabled == nil || !*p.PointInTimeRecoveryEnabled {
		t.Errorf("point-in-time recovery is off")
	}
	if ttl := tbl.TimeToLiveSpecification; ttl == nil || ttl.AttributeName == nil || *ttl.AttributeName != dynamostore.TTLAttribute || !ttl.Enabled {
		t.Errorf("the template's TTL %+v is not dynamostore's %s", ttl, dynamostore.TTLAttribute)
	}
	var indexes []string
	for _, g := range tbl.GlobalSecondaryIndexes {
		indexes = append(indexes, g.IndexName)
	}
	for _, fn := range awsrun.Functions() {
		for _, i := range fn.Indexes {
			if !slices.Contains(indexes, i) {
				t.Errorf("%s declares index %s, which the table does not have", fn.Name, i)
			}
		}
	}
}

// TestProvisionTokenScript checks that infra/provision-token.sh writes the
// item the store writes for PutToken: the api function then finds the
// tenant of the token.
func TestProvisionTokenScript(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("bash not on PATH")
	}
	awsEnv(t)
	ctx := context.Background()
	c, err := awsrun.NewClients(ctx)
	if err != nil {
		t.Fatal(err)
	}
	table := uniqueName("qunfa-tok-")
	if err := dynamostore.CreateTable(ctx, c.DynamoDB, table); err != nil {
		t.Fatal(err)
	}
	defer c.DynamoDB.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(table)})

	cmd := exec.Command("bash", filepath.Join(repoRoot(t), "infra", "provision-token.sh"), "stack", "tenant-b", "qf_script_token")
	cmd.Env = append(os.Environ(), "QUNFA_DRY_RUN=1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("script: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 2 {
		t.Fatalf("script printed %d items, want the listing and the token: %s", len(lines), out)
	}
	for _, line := range lines {
		var raw map[string]map[string]string
		if err := json.Unmarshal([]byte(line), &raw); err != nil {
			t.Fatalf("script item %s: %v", line, err)
		}
		item := map[string]types.AttributeValue{}
		for k, v := range raw {
			if n, ok := v["N"]; ok {
				item[k] = &types.AttributeValueMemberN{Value: n}
				continue
			}
			item[k] = &types.AttributeValueMemberS{Value: v["S"]}
		}
		if _, err := c.DynamoDB.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: item}); err != nil {
			t.Fatal(err)
		}
	}
	st := dynamostore.New(c.DynamoDB, table, dynamostore.Options{})
	tenant, err := st.TenantForToken(ctx, api.HashToken("qf_script_token"))
	if err != nil || tenant != "tenant-b" {
		t.Fatalf("TenantForToken after the script's item: %q, %v", tenant, err)
	}
	// Listed as the tenant's admin token, so the tenant can revoke it.
	list, err := st.ListTokens(ctx, "tenant-b")
	if err != nil || len(list) != 1 || list[0].Role != store.RoleAdmin || list[0].Hash != api.HashToken("qf_script_token") {
		t.Fatalf("ListTokens after the script: %+v, %v", list, err)
	}
	if err := st.DeleteToken(ctx, "tenant-b", list[0].ID); err != nil {
		t.Fatal(err)
	}
	if _, err := st.TenantForToken(ctx, api.HashToken("qf_script_token")); err == nil {
		t.Fatal("the script's token works after its revocation")
	}
}
