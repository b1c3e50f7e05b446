package awsrun_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/qunfa/qunfa/internal/alert"
	"github.com/qunfa/qunfa/internal/awsemu"
	"github.com/qunfa/qunfa/internal/awsrun"
	"github.com/qunfa/qunfa/internal/breaker"
	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/devstack"
	"github.com/qunfa/qunfa/internal/handlers"
	"github.com/qunfa/qunfa/internal/mockprovider"
	"github.com/qunfa/qunfa/internal/provider/wecomapi"
	"github.com/qunfa/qunfa/internal/queue"
	"github.com/qunfa/qunfa/internal/queue/sqsqueue"
	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/store/dynamostore"
	"github.com/qunfa/qunfa/internal/submit"
)

// TestManyAccountsOnAWSAdapters (issue 17): the sender function, built as
// in Lambda, on DynamoDB (dynalite) and SQS FIFO (the emulator), fed by an
// event source shaped like the template's (batches of 10 messages, a few
// invocations at once): one job over many rate-limited accounts keeps them
// all sending at once — each batch's shards worked side by side — exactly
// once and never over any account's rate.
func TestManyAccountsOnAWSAdapters(t *testing.T) {
	if testing.Short() {
		t.Skip("sends for several seconds")
	}
	awsEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	s := newSenderStack(t, ctx, "many")
	const accounts, perAccount, rate = 30, 20, 5.0
	var rcs []submitRecipient
	for i := range accounts {
		id := fmt.Sprintf("many-%02d", i)
		s.account(ctx, store.Account{ID: id, RatePerSec: rate, Burst: rate, MaxRecipientsPerCall: 1})
		rcs = append(rcs, recipients(id, perAccount)...)
	}
	start := time.Now()
	job := s.submit(ctx, "many-accounts", rcs)
	final := s.sendUntilFinal(ctx, job.ID, 100*time.Millisecond)
	took := time.Since(start)
	if final.Job.Status != store.JobCompleted || final.Counts().Confirmed != int64(len(rcs)) {
		t.Fatalf("job %s counts %+v, want completed with %d confirmed", final.Job.Status, final.Counts(), len(rcs))
	}

	// Judged by the provider's log: exactly once, never over any account's
	// rate (beyond its burst), all accounts at once.
	byAccount := map[string][]time.Time{}
	keys := map[string]int{}
	for _, d := range s.deliveries() {
		keys[d.Key]++
		byAccount[d.GUID] = append(byAccount[d.GUID], d.TS)
	}
	if len(keys) != len(rcs) {
		t.Errorf("%d keys delivered, want %d", len(keys), len(rcs))
	}
	for k, n := range keys {
		if n > 1 {
			t.Errorf("key %s delivered %d times", k, n)
		}
	}
	for id, ts := range byAccount {
		slices.SortFunc(ts, func(x, y time.Time) int { return x.Compare(y) })
		// (j+1) − rate·(tj − ti) − i over i ≤ j: the most sent in any window
		// beyond rate × its length.
		excess, minStart := math.Inf(-1), math.Inf(1)
		for j, tj := range ts {
			x := rate * tj.Sub(ts[0]).Seconds()
			minStart = math.Min(minStart, float64(j)-x)
			excess = math.Max(excess, float64(j+1)-x-minStart)
		}
		if excess > rate*1.01 {
			t.Errorf("account %s sent %.1f more in some window than %g/s allows beyond its burst of %g", id, excess, rate, rate)
		}
	}
	ideal := time.Duration(float64(perAccount) / rate * float64(time.Second))
	eff := ideal.Seconds() / took.Seconds()
	t.Logf("%d accounts × %d at %g/s on the AWS adapters: took %v, ideal %v, efficiency %.2f", accounts, perAccount, rate, took.Round(10*time.Millisecond), ideal, eff)
	// Side by side: every account had started sending before any account
	// finished (with one shard per invocation, four invocations would
	// start four at a time, the others only as those finished). Judged by
	// order, not speed, so a slow machine does not fail it.
	var lastStart, firstEnd time.Time
	for _, ts := range byAccount {
		if ts[0].After(lastStart) {
			lastStart = ts[0]
		}
		if end := ts[len(ts)-1]; firstEnd.IsZero() || end.Before(firstEnd) {
			firstEnd = end
		}
	}
	if lastStart.After(firstEnd) {
		t.Errorf("an account started sending %v after another had finished: the accounts did not send side by side", lastStart.Sub(firstEnd))
	}
	for _, f := range []function{s.submitFn, s.senderFn} {
		ok := allowed(f.spec)
		for _, c := range f.calls.list() {
			if !ok[c] {
				t.Errorf("%s called %s, which its policy does not grant", f.spec.Name, c)
			}
		}
	}
}

// stackInfra makes what template.yaml declares for a stack — the table,
// the FIFO work queue and its dead-letter queue, the alert bus — on the
// emulators, removed when the test ends.
func stackInfra(t *testing.T, ctx context.Context, admin awsrun.Clients, prefix string) (table, queueURL, bus string) {
	t.Helper()
	table, queueURL, _, bus = stackInfraRedrive(t, ctx, admin, prefix, 10)
	return table, queueURL, bus
}

// stackInfraRedrive is stackInfra with the work queue's maxReceiveCount
// given, and its dead-letter queue's URL.
func stackInfraRedrive(t *testing.T, ctx context.Context, admin awsrun.Clients, prefix string, maxReceive int) (table, queueURL, dlqURL, bus string) {
	t.Helper()
	table, bus = uniqueName(prefix), uniqueName(prefix+"alerts-")
	if err := dynamostore.CreateTable(ctx, admin.DynamoDB, table); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = admin.DynamoDB.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(table)})
	})
	queueURL, dlqURL, err := sqsqueue.CreateQueues(ctx, admin.SQS, uniqueName(prefix), maxReceive)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, u := range []string{queueURL, dlqURL} {
			_, _ = admin.SQS.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: aws.String(u)})
		}
	})
	if _, err := admin.EventBridge.CreateEventBus(ctx, &eventbridge.CreateEventBusInput{Name: aws.String(bus)}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = admin.EventBridge.DeleteEventBus(context.Background(), &eventbridge.DeleteEventBusInput{Name: aws.String(bus)})
	})
	return table, queueURL, dlqURL, bus
}

// eventCounter counts the events put on the bus (one PutEvents entry each).
type eventCounter struct{ n *atomic.Int64 }

func (c eventCounter) Publish(_ context.Context, evs ...alert.Event) error {
	c.n.Add(int64(len(evs)))
	return nil
}

// countingQueue counts the SQS requests made through it.
type countingQueue struct {
	queue.Queue
	requests atomic.Int64
}

func (c *countingQueue) Send(ctx context.Context, p queue.SendParams) (queue.SendResult, error) {
	c.requests.Add(1)
	return c.Queue.Send(ctx, p)
}

// SendBatch counts one request per queue.MaxSendBatch messages (the
// adapter's SendMessageBatch requests; entries retried alone are not
// counted).
func (c *countingQueue) SendBatch(ctx context.Context, p []queue.SendParams) ([]queue.SendBatchResult, error) {
	c.requests.Add(int64((len(p) + queue.MaxSendBatch - 1) / queue.MaxSendBatch))
	return c.Queue.(queue.BatchSender).SendBatch(ctx, p)
}

func (c *countingQueue) Receive(ctx context.Context, p queue.ReceiveParams) ([]queue.Message, error) {
	c.requests.Add(1)
	return c.Queue.Receive(ctx, p)
}

func (c *countingQueue) Delete(ctx context.Context, h string) error {
	c.requests.Add(1)
	return c.Queue.Delete(ctx, h)
}

func (c *countingQueue) ChangeVisibility(ctx context.Context, h string, d time.Duration) error {
	c.requests.Add(1)
	return c.Queue.ChangeVisibility(ctx, h, d)
}

// BenchmarkManyAccountsCost is the AWS bill of sending through many slow
// accounts at once (issue 17), measured on the emulators with the sender as
// Lambda runs it (batches of 10 groups, MaxWait 1 s, 512 MB): Lambda
// invocations and GB-seconds, SQS requests, DynamoDB units and EventBridge
// events per message, and what they cost per million messages at on-demand
// list prices (arm64 Lambda $0.0000133334/GB-s + $0.20/M requests, SQS FIFO
// $0.50/M requests, DynamoDB $0.625/M write and $0.125/M read units,
// EventBridge $1/M events). The provider calls themselves are not AWS's.
func BenchmarkManyAccountsCost(b *testing.B) {
	for _, c := range []struct {
		accounts, perAccount int
		rate                 float64
	}{{20, 40, 20}, {20, 6, 1}} {
		b.Run(fmt.Sprintf("accounts=%d×%d@%g", c.accounts, c.perAccount, c.rate), func(b *testing.B) {
			for range b.N {
				manyAccountsCost(b, c.accounts, c.perAccount, c.rate)
			}
		})
	}
}

func manyAccountsCost(b *testing.B, accounts, perAccount int, rate float64) {
	ctx := context.Background()
	meter := &capacity{}
	db, table := emulatedTable(b, "qunfa-mcost")
	st := dynamostore.New(db, table, dynamostore.Options{OnCapacity: meter.observe})
	watch := dynamostore.New(db, table, dynamostore.Options{})
	sqsClient := awsemu.SQSClient(awsemu.SQS(b))
	queueURL, _, err := sqsqueue.CreateQueues(ctx, sqsClient, fmt.Sprintf("qunfa-mcost-%d", time.Now().UnixNano()), 10)
	if err != nil {
		b.Fatal(err)
	}
	q := &countingQueue{Queue: sqsqueue.New(sqsClient, queueURL)}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	mock, err := mockprovider.New(mockprovider.Config{Logger: log})
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(mock.Handler())
	defer func() { mock.Close(); srv.Close() }()
	prov, err := wecomapi.New(wecomapi.Config{BaseURL: srv.URL, Logger: log})
	if err != nil {
		b.Fatal(err)
	}
	clk := clock.System{}
	var published atomic.Int64
	snd := &sender.Sender{Store: st, Queue: q, Provider: prov, Clock: clk, Log: log,
		Config:   sender.Config{ClaimBatch: 10, Concurrency: 16, MaxWait: time.Second, TurnDuration: 60 * time.Second},
		Breakers: &breaker.Breakers{Store: st, Clock: clk, Log: log}, Sizers: &sender.Sizers{}, Accounts: &sender.AccountReads{},
		Outcomes: eventCounter{&published}}
	var rcs []submit.Recipient
	for i := range accounts {
		id := fmt.Sprintf("a%02d", i)
		if err := st.GrantAccount(ctx, "t", id, time.Time{}); err != nil {
			b.Fatal(err)
		}
		if _, err := st.PutAccount(ctx, store.Account{Tenant: "t", ID: id, RatePerSec: rate, Burst: rate, MaxRecipientsPerCall: 1}); err != nil {
			b.Fatal(err)
		}
		for j := range perAccount {
			rcs = append(rcs, submit.Recipient{Account: id, To: fmt.Sprint("u-", j), Vars: map[string]string{"n": fmt.Sprint(j)}})
		}
	}
	n := float64(len(rcs))
	var invocations atomic.Int64
	var busy atomic.Int64 // nanoseconds of invocations
	h := handlers.Sender(snd, log)
	counted := func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		start := time.Now()
		defer func() { invocations.Add(1); busy.Add(int64(time.Since(start))) }()
		return h(ctx, ev)
	}
	res, err := (&submit.Submitter{Store: st, Queue: q, Clock: clk}).Submit(ctx, submit.Params{
		Tenant: "t", IdempotencyKey: fmt.Sprint("mcost-", time.Now().UnixNano()),
		Request: submit.Request{Template: "hello {{n}}", Recipients: rcs},
	})
	if err != nil {
		b.Fatal(err)
	}
	srcCtx, stop := context.WithCancel(ctx)
	src := &devstack.EventSource{Queue: q, Handler: counted, Log: log, Workers: 10, BatchSize: 10, Timeout: 90 * time.Second, Wait: time.Second}
	done := make(chan struct{})
	go func() { defer close(done); src.Run(srcCtx) }()
	for deadline := time.Now().Add(5 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		v, err := watch.GetJob(ctx, res.Job.Job.ID)
		if err != nil {
			b.Fatal(err)
		}
		if store.JobFinal(v.Job.Status) {
			if c := v.Counts(); c.Confirmed != int64(n) {
				b.Fatalf("counts %+v", c)
			}
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("job not finished: %s %+v", v.Job.Status, v.Counts())
		}
	}
	stop()
	<-done
	gbs := time.Duration(busy.Load()).Seconds() * 0.5 // MemorySize 512
	b.ReportMetric(float64(invocations.Load())/n, "invocations/msg")
	b.ReportMetric(gbs/n, "GB-s/msg")
	b.ReportMetric(float64(q.requests.Load())/n, "SQS/msg")
	b.ReportMetric(meter.write/n, "WCU/msg")
	b.ReportMetric(meter.read/n, "RCU/msg")
	b.ReportMetric(float64(published.Load())/n, "events/msg")
	usd := gbs*0.0000133334 + float64(invocations.Load())*0.20e-6 + float64(q.requests.Load())*0.50e-6 +
		meter.write*0.625e-6 + meter.read*0.125e-6 + float64(published.Load())*1e-6
	b.ReportMetric(usd/n*1e6, "$/M-msg")
}
