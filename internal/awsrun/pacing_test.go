package awsrun_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
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

// TestRandomPacingOnAWSAdapters (issue 20): the sender function, built as
// in Lambda, on DynamoDB (dynalite) and SQS FIFO (the emulator), sends a
// minute's worth for an account at 10/s with pacing random and min_gap_ms
// 30. Judged by the mock's log: every recipient once, the average rate
// within 5 % of 10/s, no two sends closer than 30 ms, at most two in any
// 100 ms, and gaps that vary (coefficient of variation above 0.5).
func TestRandomPacingOnAWSAdapters(t *testing.T) {
	if testing.Short() {
		t.Skip("sends for a minute")
	}
	awsEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	admin, err := awsrun.NewClients(ctx)
	if err != nil {
		t.Fatal(err)
	}
	table, queueURL, bus := stackInfra(t, ctx, admin, "qunfa-paced-")
	logPath := filepath.Join(t.TempDir(), "deliveries.jsonl")
	mock, err := mockprovider.New(mockprovider.Config{LogPath: logPath, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	provider := httptest.NewServer(mock.Handler())
	defer provider.Close()
	defer mock.Close()

	env := map[string]string{
		awsrun.EnvTable: table, awsrun.EnvQueueURL: queueURL, awsrun.EnvLogLevel: "warn", awsrun.EnvAlertBus: bus,
		awsrun.EnvCampaignRulePrefix: "qpaced-c-", awsrun.EnvCampaignTarget: "arn:aws:lambda:us-east-1:123456789012:function:submit",
		awsrun.EnvProviderURL:            provider.URL,
		awsrun.EnvProviderConnectTimeout: "1s", awsrun.EnvProviderTimeout: "2s",
		// As template.yaml sets them, with a shorter turn.
		awsrun.EnvClaimBatch: "10", awsrun.EnvConcurrency: "16", awsrun.EnvMaxWait: "1s",
		awsrun.EnvTurnDuration: "20s", awsrun.EnvDeadlineMargin: "6s",
		awsrun.EnvStaleAfter: "2m", awsrun.EnvSettleAfter: "10s",
	}
	submitFn := buildFunction(t, awsrun.Submit, env, log)
	senderFn := buildFunction(t, awsrun.Sender, env, log)
	submitH := handlers.Submit(submitFn.core.API, submitFn.core.Campaigns, log)

	const (
		id     = "paced-aws"
		rate   = 10.0
		minGap = 30 * time.Millisecond
		n      = 601 // a minute at 10/s
	)
	st := dynamostore.New(admin.DynamoDB, table, dynamostore.Options{Logger: log})
	if err := st.PutToken(ctx, api.HashToken("qf_example_token"), "tenant-a"); err != nil {
		t.Fatal(err)
	}
	if err := st.GrantAccount(ctx, "tenant-a", id, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.PutAccount(ctx, store.Account{Tenant: "tenant-a", ID: id, RatePerSec: rate, Burst: rate, MaxRecipientsPerCall: 1,
		Pacing: store.Pacing{Mode: store.PacingRandom, MinGapMs: int(minGap.Milliseconds())}}); err != nil {
		t.Fatal(err)
	}
	type recipient struct {
		Account string            `json:"account"`
		To      string            `json:"to"`
		Vars    map[string]string `json:"vars"`
	}
	rcs := make([]recipient, n)
	for j := range rcs {
		rcs[j] = recipient{Account: id, To: fmt.Sprintf("u-%d", j), Vars: map[string]string{"n": fmt.Sprint(j)}}
	}
	body, _ := json.Marshal(map[string]any{"name": "paced", "template": "hi {{n}}", "recipients": rcs})
	var post events.APIGatewayV2HTTPRequest
	readEvent(t, "submit-api.json", &post)
	post.Body = string(body)
	post.Headers["idempotency-key"] = "paced"
	raw, _ := json.Marshal(post)
	out, err := submitH(ctx, raw)
	resp, ok := out.(events.APIGatewayV2HTTPResponse)
	var job api.Job
	if err != nil || !ok || resp.StatusCode != 202 || json.Unmarshal([]byte(resp.Body), &job) != nil {
		t.Fatalf("submit: %v %+v", err, out)
	}

	srcCtx, stop := context.WithCancel(ctx)
	src := &devstack.EventSource{Queue: sqsqueue.New(admin.SQS, queueURL), Handler: handlers.Sender(senderFn.core.Sender, log),
		Log: log, Workers: 4, BatchSize: 10, Timeout: 30 * time.Second, Wait: time.Second}
	srcDone := make(chan struct{})
	go func() { defer close(srcDone); src.Run(srcCtx) }()
	var final store.JobView
	for {
		if final, err = st.GetJob(ctx, job.ID); err != nil {
			t.Fatal(err)
		}
		if store.JobFinal(final.Job.Status) || ctx.Err() != nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	stop()
	<-srcDone
	if final.Job.Status != store.JobCompleted || final.Counts().Confirmed != n {
		t.Fatalf("job %s counts %+v, want completed with %d confirmed", final.Job.Status, final.Counts(), n)
	}

	f, err := os.Open(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var ts []time.Time
	keys := map[string]int{}
	dec := json.NewDecoder(f)
	for {
		var d mockprovider.Delivery
		if err := dec.Decode(&d); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		keys[d.Key]++
		ts = append(ts, d.TS)
	}
	if len(keys) != n || len(ts) != n {
		t.Fatalf("%d deliveries of %d keys, want %d once each", len(ts), len(keys), n)
	}
	judgePacing(t, ts, rate, minGap)
}

// judgePacing applies the four criteria of issue 20 to an account's send
// times as the provider logged them.
func judgePacing(t *testing.T, ts []time.Time, rate float64, minGap time.Duration) {
	t.Helper()
	slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
	window := time.Duration(float64(time.Second) / rate)
	closest, most, j := time.Hour, 0, 0
	var gaps []float64
	for i := range ts {
		if i > 0 {
			closest = min(closest, ts[i].Sub(ts[i-1]))
			gaps = append(gaps, ts[i].Sub(ts[i-1]).Seconds())
		}
		for ts[i].Sub(ts[j]) >= window {
			j++
		}
		most = max(most, i-j+1)
	}
	span := ts[len(ts)-1].Sub(ts[0]).Seconds()
	got, mean := float64(len(gaps))/span, span/float64(len(gaps))
	var sq float64
	for _, g := range gaps {
		sq += (g - mean) * (g - mean)
	}
	cv := math.Sqrt(sq/float64(len(gaps))) / mean
	t.Logf("%d sends: %.3f/s, closest %v, at most %d in %v, cv %.3f", len(ts), got, closest, most, window, cv)
	if math.Abs(got-rate) > 0.05*rate {
		t.Errorf("average rate %.3f/s, not within 5%% of %v/s", got, rate)
	}
	if closest < minGap {
		t.Errorf("two sends %v apart, closer than min_gap_ms %v", closest, minGap)
	}
	if most > 2 {
		t.Errorf("%d sends within 1/rate: a burst", most)
	}
	if cv <= 0.5 {
		t.Errorf("gaps' coefficient of variation %.3f, not above 0.5", cv)
	}
}
