package awsrun_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/scheduler"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/qunfa/qunfa/internal/api"
	"github.com/qunfa/qunfa/internal/awsemu"
	"github.com/qunfa/qunfa/internal/awsrun"
	"github.com/qunfa/qunfa/internal/dispatch"
	"github.com/qunfa/qunfa/internal/mockprovider"
	"github.com/qunfa/qunfa/internal/queue"
	"github.com/qunfa/qunfa/internal/queue/sqsqueue"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/store/dynamostore"
)

// TestBootstrapsUnderRuntimeEmulator runs the real binaries: every
// function's bootstrap, built for this machine's architecture with the
// template's build tags, under the AWS Lambda Runtime Interface Emulator
// (tools/rie), with exactly the environment template.yaml gives it (its
// references filled with emulator resources: dynalite, fauxqs, moto for
// EventBridge, the scheduler and Secrets Manager, the mock provider). It
// fails if a function cannot start with that environment, if a sample
// event of events/ is refused, or if a whole job — submit, the SQS
// poller below, sender, reconciler, breaker — loses or duplicates a
// message.
//
// The poller does what the Lambda event source mapping does with the
// template's settings: batches of up to BatchSize messages received with
// the queue's visibility timeout, the batch item failures left to
// reappear, the others deleted, and up to MaximumConcurrency invocations
// at once (SenderMaxConcurrency at the smallest value the template
// allows, one runtime emulator per concurrent invocation; the provider
// answers slowly, so a job submitted while another's batch runs is worked
// beside it, and the test fails unless that happened and never beyond
// the bound). The work queue has the template's redrive policy: a turn
// that fails every time (its template cannot be parsed) is received
// maxReceiveCount times and then moved to the dead-letter queue, while
// the other jobs complete.
func TestBootstrapsUnderRuntimeEmulator(t *testing.T) {
	if testing.Short() {
		t.Skip("builds six functions and the runtime emulator")
	}
	if runtime.GOOS != "linux" {
		t.Skip("the runtime interface emulator runs on Linux only")
	}
	awsEnv(t)
	root := repoRoot(t)
	bin := t.TempDir()
	build := func(args ...string) {
		t.Helper()
		// Fast once Go's build cache has the packages; a cold cache on a
		// busy machine takes minutes.
		cmd := exec.Command("go", append([]string{"build"}, args...)...)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %v: %v\n%s", args, err, out)
		}
	}
	build("-modfile=tools/rie/go.mod", "-o", filepath.Join(bin, "aws-lambda-rie"), "github.com/aws/aws-lambda-runtime-interface-emulator/cmd/aws-lambda-rie")
	build("-tags", "lambda.norpc", "-o", bin+"/", "./functions/...")
	ctx, cancel := context.WithTimeout(context.Background(), 180*time.Second)
	defer cancel()

	// Infrastructure, as template.yaml declares it.
	admin, err := awsrun.NewClients(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tp := loadTemplate(t)
	maxReceive := int(at(tp.raw, "Resources", "WorkQueue", "Properties", "RedrivePolicy", "maxReceiveCount").(float64))
	table, queueURL, dlqURL, bus := stackInfraRedrive(t, ctx, admin, "qunfa-rie-", maxReceive)
	logPath := filepath.Join(t.TempDir(), "deliveries.jsonl")
	mock, err := mockprovider.New(mockprovider.Config{LogPath: logPath, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	provider := httptest.NewServer(mock.Handler()) // 127.0.0.1
	defer provider.Close()
	defer mock.Close()
	stack := uniqueName("qunfa-rie-")
	const tenantAToken = "rie-tenant-a-provider-token"
	for name, tok := range map[string]string{stack + "/provider": "rie-default-token", stack + "/tenants/tenant-a/provider": tenantAToken} {
		if _, err := admin.SecretsManager.CreateSecret(ctx, &secretsmanager.CreateSecretInput{Name: aws.String(name),
			SecretString: aws.String(`{"token":"` + tok + `"}`)}); err != nil {
			t.Fatal(err)
		}
	}
	// Slow answers: a sender batch lasts long enough for a job submitted
	// meanwhile to be worked beside it.
	if err := mock.SetBehaviour("acct-a", mockprovider.Behaviour{Token: tenantAToken, LatencyMS: 3000}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Scheduler.CreateScheduleGroup(ctx, &scheduler.CreateScheduleGroupInput{Name: aws.String(stack)}); err != nil {
		t.Fatal(err)
	}

	// The template's values, references filled with those resources.
	resolved := map[string]string{
		"ref:Table": table, "ref:WorkQueue": queueURL, "ref:EventBus": bus, "ref:ProviderURL": provider.URL,
		"ref:ProviderSecretName": stack + "/provider", "sub:" + tenantSecretPrefix: stack + "/tenants/",
		"sub:${AWS::StackName}-c-":          stack + "-c-",
		"getatt:SubmitFunction.Arn":         "arn:aws:lambda:us-east-1:123456789012:function:" + stack + "-SubmitFunction",
		"getatt:FailedInvocationsQueue.Arn": "arn:aws:sqs:us-east-1:000000000000:" + stack + "-FailedInvocationsQueue",
		"ref:ScheduleGroup":                 stack,
		"getatt:SchedulerRole.Arn":          "arn:aws:iam::123456789012:role/" + stack + "-SchedulerRole",
		"sub:${ItemRetentionDays}d":         "30d",
	}
	rie := map[string]*rieFunction{}
	envs := map[string][]string{}
	for _, fn := range awsrun.Functions() {
		env := []string{"PATH=" + os.Getenv("PATH")}
		for name, v := range functionEnv(tp, fn) {
			if r, ok := resolved[v]; ok {
				v = r
			}
			if strings.HasPrefix(v, "ref:") || strings.HasPrefix(v, "getatt:") || strings.HasPrefix(v, "sub:") {
				t.Fatalf("%s: %s=%s: a reference this test cannot fill", fn.Name, name, v)
			}
			env = append(env, name+"="+v)
		}
		for _, name := range []string{"AWS_ENDPOINT_URL_DYNAMODB", "AWS_ENDPOINT_URL_SQS", "AWS_ENDPOINT_URL_EVENTBRIDGE",
			"AWS_ENDPOINT_URL_SECRETS_MANAGER", "AWS_ENDPOINT_URL_SCHEDULER", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION"} {
			env = append(env, name+"="+os.Getenv(name))
		}
		timeout, _ := functionProp(tp, fn, "Timeout").(float64)
		memory, _ := functionProp(tp, fn, "MemorySize").(float64)
		env = append(env, "AWS_LAMBDA_FUNCTION_NAME="+stack+"-"+fn.LogicalID, "AWS_LAMBDA_FUNCTION_TIMEOUT="+strconv.Itoa(int(timeout)),
			"AWS_LAMBDA_FUNCTION_MEMORY_SIZE="+strconv.Itoa(int(memory)), "AWS_LAMBDA_FUNCTION_VERSION=$LATEST")
		rie[fn.Name] = startRIE(t, filepath.Join(bin, "aws-lambda-rie"), filepath.Join(bin, fn.Name), env)
		envs[fn.Name] = env
	}

	// The operator's set-up (docs/deploy.md): the sample events' token
	// and the account granted to the tenant.
	adminStore := dynamostore.New(admin.DynamoDB, table, dynamostore.Options{})
	if err := adminStore.PutToken(ctx, api.HashToken("qf_example_token"), "tenant-a"); err != nil {
		t.Fatal(err)
	}
	if err := adminStore.GrantAccount(ctx, "tenant-a", "acct-a", time.Now()); err != nil {
		t.Fatal(err)
	}
	httpCall := func(fn, event string, wantStatus int, replace ...string) events.APIGatewayV2HTTPResponse {
		t.Helper()
		var resp events.APIGatewayV2HTTPResponse
		rie[fn].invoke(t, rawEvent(t, event, replace...), &resp)
		if resp.StatusCode != wantStatus {
			t.Fatalf("%s %s: status %d, want %d: %s", fn, event, resp.StatusCode, wantStatus, resp.Body)
		}
		return resp
	}
	httpCall("api", "api-put-account.json", 200)

	// The event source mapping: the template's batch size, visibility and
	// MaximumConcurrency, one sender emulator per concurrent invocation.
	var senderEvents map[string]any
	for _, e := range at(tp.raw, "Resources", awsrun.Sender.LogicalID, "Properties", "Events").(map[string]any) {
		senderEvents = at(e, "Properties").(map[string]any)
	}
	batchSize := int(senderEvents["BatchSize"].(float64))
	// loadTemplate fills parameter references with their defaults; this
	// stack deploys SenderMaxConcurrency at its MinValue instead (one
	// emulator per concurrent invocation).
	if v, def := at(senderEvents, "ScalingConfig", "MaximumConcurrency"), at(tp.raw, "Parameters", "SenderMaxConcurrency", "Default"); v != def {
		t.Fatalf("sender event source MaximumConcurrency = %v, want SenderMaxConcurrency (default %v)", v, def)
	}
	maxConcurrency := int(at(tp.raw, "Parameters", "SenderMaxConcurrency", "MinValue").(float64))
	visibility := time.Duration(at(tp.raw, "Resources", "WorkQueue", "Properties", "VisibilityTimeout").(float64)) * time.Second
	senders := []*rieFunction{rie["sender"]}
	for len(senders) < maxConcurrency {
		senders = append(senders, startRIE(t, filepath.Join(bin, "aws-lambda-rie"), filepath.Join(bin, "sender"), envs["sender"]))
	}
	var template events.SQSEvent
	readEvent(t, "sender-sqs.json", &template)
	work := sqsqueue.New(admin.SQS, queueURL)

	// A turn that fails at every receive: its job's template cannot be
	// parsed (written behind the API's validation).
	poison := dispatch.Turn{JobID: "rie-poison", Shard: 0, Turn: 1}
	if _, err := adminStore.CreateJob(ctx, store.CreateJobParams{
		Job: store.Job{ID: poison.JobID, Tenant: "tenant-a", IdempotencyKey: "rie-poison", RequestHash: "h", Template: "hi {{name",
			Total: 1, ShardCount: 1, CreatedAt: time.Now()},
		Shards: []store.Shard{{Index: 0, Account: "acct-a", Size: 1, Counts: store.Counts{Pending: 1}, SlowFactor: 1}},
	}); err != nil {
		t.Fatal(err)
	}
	if err := adminStore.PutItems(ctx, store.PutItemsParams{JobID: poison.JobID,
		Items: []store.Item{{JobID: poison.JobID, Seq: 0, Account: "acct-a", To: "nobody"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := adminStore.TransitionJob(ctx, store.TransitionJobParams{JobID: poison.JobID, To: store.JobRunning, At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := dispatch.Send(ctx, work, poison); err != nil {
		t.Fatal(err)
	}
	poisonBody, err := json.Marshal(poison)
	if err != nil {
		t.Fatal(err)
	}

	esm := &eventSourceMapping{queue: work, queueURL: queueURL, template: template, batchSize: batchSize, visibility: visibility,
		senders: senders, poison: string(poisonBody)}
	pollCtx, stopPolling := context.WithCancel(ctx)
	polling := esm.start(pollCtx)
	defer func() { stopPolling(); <-polling }()

	var apiJob api.Job
	if err := json.Unmarshal([]byte(httpCall("submit", "submit-api.json", 202).Body), &apiJob); err != nil || apiJob.Total != 3 {
		t.Fatalf("submitted job: %+v %v", apiJob, err)
	}
	// Submitted while the first job's batch waits for its slow answers.
	httpCall("api", "api-post-campaign.json", 201)
	schedules, err := admin.Scheduler.ListSchedules(ctx, &scheduler.ListSchedulesInput{GroupName: aws.String(stack)})
	if err != nil || len(schedules.Schedules) != 1 {
		t.Fatalf("campaign schedules: %v %+v", err, schedules)
	}
	var campaign struct {
		JobID   string `json:"job_id"`
		Created bool   `json:"created"`
	}
	rie["submit"].invoke(t, rawEvent(t, "submit-campaign.json"), &campaign)
	if !campaign.Created || campaign.JobID == "" {
		t.Fatalf("campaign firing: %+v", campaign)
	}
	var none json.RawMessage
	rie["breaker"].invoke(t, rawEvent(t, "breaker-schedule.json"), &none)

	status := func(id string) api.Job {
		var j api.Job
		if err := json.Unmarshal([]byte(httpCall("api", "api-get-job.json", 200, "JOB_ID", id).Body), &j); err != nil {
			t.Fatal(err)
		}
		return j
	}
	jobs := []string{apiJob.ID, campaign.JobID}
	dlq := sqsqueue.New(admin.SQS, dlqURL)
	var deadLettered []queue.Message
	for status(jobs[0]).Status != "completed" || status(jobs[1]).Status != "completed" || len(deadLettered) == 0 {
		if ctx.Err() != nil {
			t.Fatalf("not done in time: jobs %+v / %+v, %d dead-lettered, poison received %d times",
				status(jobs[0]), status(jobs[1]), len(deadLettered), esm.poisonReceives())
		}
		if err := esm.failed(); err != nil {
			t.Fatal(err)
		}
		if len(deadLettered) == 0 {
			if deadLettered, err = dlq.Receive(ctx, queue.ReceiveParams{Max: 10, VisibilityTimeout: time.Minute, Wait: time.Second}); err != nil {
				t.Fatal(err)
			}
		} else {
			time.Sleep(200 * time.Millisecond)
		}
	}
	stopPolling()
	<-polling
	if err := esm.failed(); err != nil {
		t.Fatal(err)
	}
	if len(deadLettered) != 1 || string(deadLettered[0].Body) != string(poisonBody) {
		t.Errorf("dead-letter queue holds %d messages (%v), want the failing turn alone", len(deadLettered), deadLettered)
	}
	if n := esm.poisonReceives(); n != maxReceive {
		t.Errorf("the failing turn was invoked %d times before it was dead-lettered, want maxReceiveCount %d", n, maxReceive)
	}
	if peak := esm.peak(); peak != maxConcurrency {
		t.Errorf("at most %d sender invocations ran at once, want MaximumConcurrency %d reached (and never passed)", peak, maxConcurrency)
	}
	batches := esm.batches()
	t.Logf("jobs completed after %d sender batches", batches)
	// A redelivered turn of a finished shard (the sample event) is a no-op.
	var resp events.SQSEventResponse
	rie["sender"].invoke(t, rawEvent(t, "sender-sqs.json", "JOB_ID", apiJob.ID), &resp)
	rie["reconciler"].invoke(t, rawEvent(t, "reconciler-schedule.json"), &none)
	rie["breaker"].invoke(t, rawEvent(t, "breaker-schedule.json"), &none)
	rie["webhooks"].invoke(t, rawEvent(t, "webhooks-alert.json"), &none)
	rie["webhooks"].invoke(t, rawEvent(t, "webhooks-schedule.json"), &none)
	// And each schedule's own input, as the scheduler fills it.
	for _, fn := range []awsrun.Function{awsrun.Reconciler, awsrun.Breaker, awsrun.Webhooks} {
		evs := at(tp.raw, "Resources", fn.LogicalID, "Properties", "Events").(map[string]any)
		for _, e := range evs {
			if at(e, "Type") != "ScheduleV2" {
				continue
			}
			in := strings.NewReplacer("<aws.scheduler.execution-id>", "rie-execution-1",
				"<aws.scheduler.scheduled-time>", time.Now().UTC().Format(time.RFC3339)).Replace(fmt.Sprint(at(e, "Properties", "Input")))
			rie[fn.Name].invoke(t, json.RawMessage(in), &none)
		}
	}
	var items api.ItemList
	if err := json.Unmarshal([]byte(httpCall("api", "api-list-items.json", 200, "JOB_ID", apiJob.ID).Body), &items); err != nil || len(items.Items) != 3 {
		t.Fatalf("items: %+v %v", items, err)
	}
	for _, id := range jobs {
		if j := status(id); j.Counts.Confirmed != j.Total {
			t.Errorf("job %s counts %+v, total %d", id, j.Counts, j.Total)
		}
	}
	want := map[string]int{
		"acct-a/wm-user-001": 1, "acct-a/wm-user-002": 1, "acct-a/wm-user-003": 1,
		"acct-a/wm-user-101": 1, "acct-a/wm-user-102": 1,
	}
	if got := deliveries(t, logPath); !reflect.DeepEqual(got, want) {
		t.Errorf("deliveries %v, want every recipient exactly once: %v", got, want)
	}
	// Every line the binaries logged while serving an invocation (all but
	// the start-up line) carries its request id, and none holds a
	// provider token.
	withID := 0
	for name, f := range rie {
		out := f.output.String()
		if strings.Contains(out, tenantAToken) || strings.Contains(out, "rie-default-token") {
			t.Errorf("%s logged a provider token", name)
		}
		for _, line := range strings.Split(out, "\n") {
			var rec map[string]any
			if !strings.HasPrefix(line, "{") || json.Unmarshal([]byte(line), &rec) != nil || rec["msg"] == nil || rec["msg"] == "ready" {
				continue // the emulator's own lines, metrics (EMF), the start-up line
			}
			if id, _ := rec["request_id"].(string); id == "" {
				t.Errorf("%s logged a line without request_id: %s", name, line)
			}
			withID++
		}
	}
	if withID == 0 {
		t.Errorf("the functions logged nothing while serving invocations")
	}
}

func mustJSON(t *testing.T, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// rieFunction is one bootstrap running under the runtime emulator.
type rieFunction struct {
	name   string
	url    string
	output *syncBuffer
}

// startRIE runs the emulator with bootstrap on a free port of 127.0.0.1
// and waits until it accepts invocations.
func startRIE(t *testing.T, rieBin, bootstrap string, env []string) *rieFunction {
	t.Helper()
	port, err := awsemu.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	apiPort, err := awsemu.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	f := &rieFunction{name: filepath.Base(bootstrap), url: fmt.Sprintf("http://127.0.0.1:%d/2015-03-31/functions/function/invocations", port), output: &syncBuffer{}}
	cmd := exec.Command(rieBin, "--runtime-interface-emulator-address", "127.0.0.1:"+strconv.Itoa(port),
		"--runtime-api-address", "127.0.0.1:"+strconv.Itoa(apiPort), bootstrap)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = f.output, f.output
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("%s output:\n%s", f.name, f.output.String())
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 200*time.Millisecond)
		if err == nil {
			c.Close()
			return f
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: the runtime emulator did not listen: %v\n%s", f.name, err, f.output.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// invoke sends one event and decodes the function's answer into out; a
// function error (or a bootstrap that failed to start) fails the test.
func (f *rieFunction) invoke(t *testing.T, event json.RawMessage, out any) {
	t.Helper()
	resp, err := http.Post(f.url, "application/json", bytes.NewReader(event))
	if err != nil {
		t.Fatalf("%s: invoke: %v", f.name, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var fnErr struct {
		ErrorType    string `json:"errorType"`
		ErrorMessage string `json:"errorMessage"`
	}
	_ = json.Unmarshal(body, &fnErr)
	if resp.StatusCode != http.StatusOK || fnErr.ErrorType != "" || resp.Header.Get("X-Amz-Function-Error") != "" {
		t.Fatalf("%s: invocation failed: HTTP %d %s\n%s", f.name, resp.StatusCode, body, f.output.String())
	}
	if err := json.Unmarshal(body, out); err != nil {
		t.Fatalf("%s: answer %s: %v", f.name, body, err)
	}
}
