package awsrun_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/qunfa/qunfa/internal/api"
	"github.com/qunfa/qunfa/internal/awsrun"
	"github.com/qunfa/qunfa/internal/devstack"
	"github.com/qunfa/qunfa/internal/handlers"
	"github.com/qunfa/qunfa/internal/mockprovider"
	"github.com/qunfa/qunfa/internal/queue/sqsqueue"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/store/dynamostore"
)

// senderStack is the submit and sender functions built as in Lambda on
// the emulators' table, queue and bus (DynamoDB on dynalite, SQS FIFO),
// sending to a mock provider that logs every delivery, for tests that feed
// the sender by an event source shaped like the template's.
type senderStack struct {
	t        *testing.T
	log      *slog.Logger
	admin    awsrun.Clients
	queueURL string
	logPath  string
	st       *dynamostore.Store
	submitFn function
	senderFn function
}

// submitRecipient is a recipient of a job submitted through the API.
type submitRecipient struct {
	Account string            `json:"account"`
	To      string            `json:"to"`
	Vars    map[string]string `json:"vars"`
}

// newSenderStack builds the stack, its resources named from prefix, with
// the functions' settings as template.yaml sets them but a shorter turn;
// the API token qf_example_token is tenant-a's.
func newSenderStack(t *testing.T, ctx context.Context, prefix string) *senderStack {
	t.Helper()
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	admin, err := awsrun.NewClients(ctx)
	if err != nil {
		t.Fatal(err)
	}
	table, queueURL, bus := stackInfra(t, ctx, admin, "qunfa-"+prefix+"-")
	logPath := filepath.Join(t.TempDir(), "deliveries.jsonl")
	mock, err := mockprovider.New(mockprovider.Config{LogPath: logPath, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	provider := httptest.NewServer(mock.Handler())
	t.Cleanup(func() { _ = mock.Close() })
	t.Cleanup(provider.Close)

	env := map[string]string{
		awsrun.EnvTable: table, awsrun.EnvQueueURL: queueURL, awsrun.EnvLogLevel: "warn", awsrun.EnvAlertBus: bus,
		awsrun.EnvCampaignRulePrefix: "q" + prefix + "-c-", awsrun.EnvCampaignTarget: "arn:aws:lambda:us-east-1:123456789012:function:submit",
		awsrun.EnvProviderURL:            provider.URL, // no provider secret: the mock takes any call
		awsrun.EnvProviderConnectTimeout: "1s", awsrun.EnvProviderTimeout: "2s",
		// As template.yaml sets them, with a shorter turn.
		awsrun.EnvClaimBatch: "10", awsrun.EnvConcurrency: "16", awsrun.EnvMaxWait: "1s",
		awsrun.EnvTurnDuration: "20s", awsrun.EnvDeadlineMargin: "6s",
		awsrun.EnvStaleAfter: "2m", awsrun.EnvSettleAfter: "10s",
	}
	s := &senderStack{t: t, log: log, admin: admin, queueURL: queueURL, logPath: logPath,
		st:       dynamostore.New(admin.DynamoDB, table, dynamostore.Options{Logger: log}),
		submitFn: buildFunction(t, awsrun.Submit, env, log), senderFn: buildFunction(t, awsrun.Sender, env, log)}
	if err := s.st.PutToken(ctx, api.HashToken("qf_example_token"), "tenant-a"); err != nil {
		t.Fatal(err)
	}
	return s
}

// account grants a to tenant-a and stores it.
func (s *senderStack) account(ctx context.Context, a store.Account) {
	s.t.Helper()
	a.Tenant = "tenant-a"
	if err := s.st.GrantAccount(ctx, a.Tenant, a.ID, time.Time{}); err != nil {
		s.t.Fatal(err)
	}
	if _, err := s.st.PutAccount(ctx, a); err != nil {
		s.t.Fatal(err)
	}
}

// submit posts a job of template "hi {{n}}" through the submit function's
// API Gateway handler, as tenant-a, under idempotency key key.
func (s *senderStack) submit(ctx context.Context, key string, rcs []submitRecipient) api.Job {
	s.t.Helper()
	body, _ := json.Marshal(map[string]any{"name": key, "template": "hi {{n}}", "recipients": rcs})
	var post events.APIGatewayV2HTTPRequest
	readEvent(s.t, "submit-api.json", &post)
	post.Body = string(body)
	post.Headers["idempotency-key"] = key
	raw, _ := json.Marshal(post)
	out, err := handlers.Submit(s.submitFn.core.API, s.submitFn.core.Campaigns, s.log)(ctx, raw)
	resp, ok := out.(events.APIGatewayV2HTTPResponse)
	var job api.Job
	if err != nil || !ok || resp.StatusCode != 202 || json.Unmarshal([]byte(resp.Body), &job) != nil {
		s.t.Fatalf("submit: %v %+v", err, out)
	}
	return job
}

// sendUntilFinal feeds the sender function from the queue as template.yaml
// configures the event source (batches of 10, a bounded number of
// invocations at once: MaximumConcurrency) until the job is final or ctx
// ends, reading the job every poll.
func (s *senderStack) sendUntilFinal(ctx context.Context, jobID string, poll time.Duration) store.JobView {
	s.t.Helper()
	srcCtx, stop := context.WithCancel(ctx)
	src := &devstack.EventSource{Queue: sqsqueue.New(s.admin.SQS, s.queueURL), Handler: handlers.Sender(s.senderFn.core.Sender, s.log),
		Log: s.log, Workers: 4, BatchSize: 10, Timeout: 30 * time.Second, Wait: time.Second}
	srcDone := make(chan struct{})
	go func() { defer close(srcDone); src.Run(srcCtx) }()
	defer func() { stop(); <-srcDone }()
	for {
		final, err := s.st.GetJob(ctx, jobID)
		if err != nil {
			s.t.Fatal(err)
		}
		if store.JobFinal(final.Job.Status) || ctx.Err() != nil {
			return final
		}
		time.Sleep(poll)
	}
}

// deliveries is the mock provider's log of what it delivered.
func (s *senderStack) deliveries() []mockprovider.Delivery {
	s.t.Helper()
	f, err := os.Open(s.logPath)
	if err != nil {
		s.t.Fatal(err)
	}
	defer f.Close()
	var out []mockprovider.Delivery
	dec := json.NewDecoder(f)
	for {
		var d mockprovider.Delivery
		if err := dec.Decode(&d); err == io.EOF {
			return out
		} else if err != nil {
			s.t.Fatal(err)
		}
		out = append(out, d)
	}
}

// recipients are perAccount recipients u-0, u-1, … of account, each with
// its n.
func recipients(account string, perAccount int) []submitRecipient {
	out := make([]submitRecipient, perAccount)
	for j := range out {
		out[j] = submitRecipient{Account: account, To: fmt.Sprintf("u-%d", j), Vars: map[string]string{"n": fmt.Sprint(j)}}
	}
	return out
}
