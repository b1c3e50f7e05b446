package awsrun_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http/httptest"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go/middleware"

	"github.com/qunfa/qunfa/internal/alert"
	"github.com/qunfa/qunfa/internal/awsemu"
	"github.com/qunfa/qunfa/internal/breaker"
	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/mockprovider"
	"github.com/qunfa/qunfa/internal/provider"
	"github.com/qunfa/qunfa/internal/provider/wecomapi"
	"github.com/qunfa/qunfa/internal/queue"
	"github.com/qunfa/qunfa/internal/queue/sqsqueue"
	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/store/dynamostore"
	"github.com/qunfa/qunfa/internal/submit"
)

// capacity sums the DynamoDB capacity consumed, writes and reads apart.
type capacity struct {
	mu          sync.Mutex
	write, read float64
	byOp        map[string]float64 // units by operation
}

func (c *capacity) observe(op string, cc types.ConsumedCapacity) {
	if cc.CapacityUnits == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byOp == nil {
		c.byOp = map[string]float64{}
	}
	c.byOp[op] += *cc.CapacityUnits
	switch op {
	case "PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem":
		c.write += *cc.CapacityUnits
	default:
		c.read += *cc.CapacityUnits
	}
}

// Prices (us-east-1, on-demand, USD) the benchmark turns its counts into.
const (
	priceDynamoWrite = 0.625 / 1e6 // per write request unit
	priceDynamoRead  = 0.125 / 1e6 // per read request unit
	priceSQSFIFO     = 0.50 / 1e6  // per FIFO request (64 KB chunk)
	priceLambdaGBs   = 0.0000133334
	priceLambdaReq   = 0.20 / 1e6
	priceEvents      = 1.00 / 1e6 // PutEvents entry (64 KB chunk)
	priceHTTPAPI     = 1.00 / 1e6 // HTTP API request
)

// counter counts what a client or publisher was asked to do.
type counter struct {
	mu    sync.Mutex
	calls int
}

func (c *counter) add(n int) {
	c.mu.Lock()
	c.calls += n
	c.mu.Unlock()
}

func (c *counter) take() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.calls
	c.calls = 0
	return n
}

// Publish counts the events (alert.Publisher): each is one PutEvents entry.
func (c *counter) Publish(_ context.Context, evs ...alert.Event) error {
	c.add(len(evs))
	return nil
}

// countRequests makes a copy of an SQS client that counts its requests.
func countRequests(cl *sqs.Client, c *counter) *sqs.Client {
	return sqs.New(cl.Options(), func(o *sqs.Options) {
		o.APIOptions = append(o.APIOptions, func(st *middleware.Stack) error {
			return st.Initialize.Add(middleware.InitializeMiddlewareFunc("qunfaCountRequests",
				func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
					c.add(1)
					return next.HandleInitialize(ctx, in)
				}), middleware.After)
		})
	})
}

// cpuTime is the CPU time this process has used (user + system).
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkSenderCostPerMessage measures what AWS charges per delivered
// message for the whole production path, not just the store operations:
// submit (job, shards, snapshot), then the sender handler as Lambda runs
// it — turn fencing, job/account/breaker/suppression reads at every batch,
// tokens, claims, outcomes, shard advances — on dynalite and fauxqs, with
// the mock provider, for one account: single-recipient provider calls with
// the sender's AWS default claim batch (10), and calls of 100 recipients
// with claims of 100. Beside DynamoDB's units it counts SQS requests (the
// sender's and the poller's, as the event source mapping makes them),
// EventBridge entries (alerts, per-batch outcomes), sender invocations
// and this process's CPU time per message, billed as Lambda GB-seconds at
// the sender's memory (512 MB; a lower bound of the billed duration, which
// also counts waits), and one HTTP API request per job; $/M is the sum at
// on-demand prices. WCU/msg counts the table's writes (as dynalite
// reports them) and its indexes' (indexMeter: dynalite charges none).
//
// The mock answers numbered message ids, one per recipient, which deflate
// 3 to 4 times; msgid=real gives each call a random id of the length
// WeCom answers (32 base64url characters), and ref=order each recipient
// a reference of its own (a random 19-digit order number): the realistic
// case.
func BenchmarkSenderCostPerMessage(b *testing.B) {
	for _, perCall := range []int{1, 100} {
		for _, c := range []costShape{{}, {realIDs: true}, {realIDs: true, refs: true}} {
			name := fmt.Sprintf("recipients_per_call=%d", perCall)
			if c.realIDs {
				name += ",msgid=real"
			}
			if c.refs {
				name += ",ref=order"
			}
			b.Run(name, func(b *testing.B) { benchSenderCost(b, perCall, c) })
		}
	}
}

// costShape is what the data of a cost run looks like: the provider's
// message ids random ones of the real length (realIDs), and a reference
// on every recipient (refs).
type costShape struct {
	realIDs, refs bool
}

// randomIDs answers the accepted recipients of each call of the provider
// it wraps one message id of 32 random base64url characters, as WeCom's
// message/send does (the mock's are numbered, one per recipient).
type randomIDs struct {
	provider.Provider
	mu  sync.Mutex
	rng *rand.Rand
}

func (p *randomIDs) Send(ctx context.Context, req provider.SendRequest) (provider.SendResult, error) {
	res, err := p.Provider.Send(ctx, req)
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	id := make([]byte, 32)
	p.mu.Lock()
	for k := range id {
		id[k] = alphabet[p.rng.IntN(len(alphabet))]
	}
	p.mu.Unlock()
	for i := range res.Recipients {
		if res.Recipients[i].MsgID != "" {
			res.Recipients[i].MsgID = string(id)
		}
	}
	return res, err
}

func benchSenderCost(b *testing.B, perCall int, shape costShape) {
	const n = 1000
	const senderMemoryGB = 0.5
	ctx := context.Background()
	meter := &capacity{}
	db, table := emulatedTable(b, "qunfa-cost")
	indexes, err := newIndexMeter(ctx, db, table)
	if err != nil {
		b.Fatal(err)
	}
	st := dynamostore.New(indexes.meter(db), table, dynamostore.Options{OnCapacity: meter.observe})
	watch := dynamostore.New(db, table, dynamostore.Options{}) // the benchmark's own polling is not metered
	sqsRequests, eventEntries := &counter{}, &counter{}
	sqsClient := countRequests(awsemu.SQSClient(awsemu.SQS(b)), sqsRequests)
	queueURL, _, err := sqsqueue.CreateQueues(ctx, sqsClient, fmt.Sprintf("qunfa-cost-%d", time.Now().UnixNano()), 10)
	if err != nil {
		b.Fatal(err)
	}
	q := sqsqueue.New(sqsClient, queueURL)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	mock, err := mockprovider.New(mockprovider.Config{Logger: log})
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(mock.Handler())
	defer func() { mock.Close(); srv.Close() }()
	var prov provider.Provider
	prov, err = wecomapi.New(wecomapi.Config{BaseURL: srv.URL, Logger: log})
	if err != nil {
		b.Fatal(err)
	}
	if shape.realIDs {
		prov = &randomIDs{Provider: prov, rng: rand.New(rand.NewPCG(1, 2))}
	}
	clk := clock.System{}
	if err := st.GrantAccount(ctx, "t", "a", time.Time{}); err != nil {
		b.Fatal(err)
	}
	if _, err := st.PutAccount(ctx, store.Account{Tenant: "t", ID: "a", RatePerSec: 1e6, Burst: 1e6, MaxRecipientsPerCall: perCall}); err != nil {
		b.Fatal(err)
	}
	snd := &sender.Sender{Store: st, Queue: q, Provider: prov, Clock: clk, Log: log,
		// A packed call needs a claim of as many items.
		Config:   sender.Config{ClaimBatch: max(10, perCall), Concurrency: 16},
		Breakers: &breaker.Breakers{Store: st, Clock: clk, Log: log}, Sizers: &sender.Sizers{}, Accounts: &sender.AccountReads{},
		Alerts: eventEntries, Outcomes: eventEntries}
	var rcs []submit.Recipient
	refs := rand.New(rand.NewPCG(3, 4))
	for i := range n {
		rc := submit.Recipient{Account: "a", To: fmt.Sprint("user-", i), Vars: map[string]string{"n": fmt.Sprint(i)}}
		if shape.refs {
			rc.Ref = fmt.Sprintf("%d%018d", 1+refs.IntN(9), refs.Int64N(1e18))
		}
		rcs = append(rcs, rc)
	}
	// One call carries many recipients only when they get the same
	// content: a personalised template sends one call per recipient.
	template := "hello {{n}}"
	if perCall > 1 {
		template = "hello everyone"
	}
	b.ResetTimer()
	for range b.N {
		meter.write, meter.read, meter.byOp = 0, 0, nil
		indexes.take()
		sqsRequests.take()
		eventEntries.take()
		invocations := 0
		cpu := cpuTime(b)
		res, err := (&submit.Submitter{Store: st, Queue: q, Clock: clk, Alerts: eventEntries}).Submit(ctx, submit.Params{
			Tenant: "t", IdempotencyKey: fmt.Sprint("cost-", time.Now().UnixNano()),
			Request: submit.Request{Template: template, Recipients: rcs},
		})
		if err != nil {
			b.Fatal(err)
		}
		for deadline := time.Now().Add(5 * time.Minute); ; {
			v, err := watch.GetJob(ctx, res.Job.Job.ID)
			if err != nil {
				b.Fatal(err)
			}
			if store.JobFinal(v.Job.Status) {
				if c := v.Counts(); c.Confirmed != n {
					b.Fatalf("counts %+v", c)
				}
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("job not finished: %s %+v", v.Job.Status, v.Counts())
			}
			msgs, err := q.Receive(ctx, queue.ReceiveParams{Max: 1, VisibilityTimeout: time.Minute, Wait: time.Second})
			if err != nil {
				b.Fatal(err)
			}
			if len(msgs) > 0 {
				invocations++
			}
			for _, m := range msgs {
				r, err := snd.HandleTurn(ctx, sender.Message{ID: m.ID, Body: m.Body, ReceiptHandle: m.ReceiptHandle, ReceiveCount: m.ReceiveCount})
				if err != nil {
					b.Fatal(err)
				}
				if r.Disposition == sender.Done {
					if err := q.Delete(ctx, m.ReceiptHandle); err != nil && !errors.Is(err, queue.ErrNotFound) {
						b.Fatal(err)
					}
				}
			}
		}
		cpuPerMsg := (cpuTime(b) - cpu).Seconds() / n
		sqsPerMsg := float64(sqsRequests.take()) / n
		eventsPerMsg := float64(eventEntries.take()) / n
		indexUnits := 0.0
		for name, units := range indexes.take() {
			indexUnits += units
			b.ReportMetric(units/n, "indexWCU:"+name+"/msg")
		}
		tableWrite := meter.write
		meter.write += indexUnits // what AWS bills: table and index writes
		b.ReportMetric(tableWrite/n, "tableWCU/msg")
		b.ReportMetric(indexUnits/n, "indexWCU/msg")
		b.ReportMetric(meter.write/n, "WCU/msg")
		b.ReportMetric(meter.read/n, "RCU/msg")
		b.ReportMetric(sqsPerMsg, "SQSreq/msg")
		b.ReportMetric(eventsPerMsg, "events/msg")
		b.ReportMetric(cpuPerMsg*1e3, "CPUms/msg")
		dollars := meter.write/n*priceDynamoWrite + meter.read/n*priceDynamoRead + sqsPerMsg*priceSQSFIFO +
			eventsPerMsg*priceEvents + cpuPerMsg*senderMemoryGB*priceLambdaGBs + float64(invocations)/n*priceLambdaReq +
			priceHTTPAPI/n
		b.ReportMetric(dollars*1e6, "$/M")
		b.ReportMetric(meter.write/n*priceDynamoWrite*1e6, "$dynamoW/M")
		b.ReportMetric(meter.read/n*priceDynamoRead*1e6, "$dynamoR/M")
		b.ReportMetric(sqsPerMsg*priceSQSFIFO*1e6, "$sqs/M")
		b.ReportMetric(cpuPerMsg*senderMemoryGB*priceLambdaGBs*1e6, "$lambda/M")
		b.ReportMetric(eventsPerMsg*priceEvents*1e6, "$events/M")
		// Where the units go, by operation.
		for op, units := range meter.byOp {
			b.ReportMetric(units/n, op+"/msg")
		}
	}
}
