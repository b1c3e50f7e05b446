package awsrun_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/qunfa/qunfa/internal/awsemu"
	"github.com/qunfa/qunfa/internal/breaker"
	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/mockprovider"
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
}

func (c *capacity) observe(op string, cc types.ConsumedCapacity) {
	if cc.CapacityUnits == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch op {
	case "PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem":
		c.write += *cc.CapacityUnits
	default:
		c.read += *cc.CapacityUnits
	}
}

// BenchmarkSenderCostPerMessage measures what DynamoDB charges per
// delivered message for the whole production path, not just the store
// operations: submit (job, shards, snapshot), then the sender handler as
// Lambda runs it — turn fencing, job/account/breaker/suppression reads at
// every batch, tokens, claims, outcomes, shard advances — on dynalite and
// fauxqs, with the mock provider, for single-recipient messages of one
// account and the sender's AWS default claim batch (10).
func BenchmarkSenderCostPerMessage(b *testing.B) {
	const n = 1000
	ctx := context.Background()
	meter := &capacity{}
	db := dynamodb.New(dynamodb.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(awsemu.DynamoDB(b)),
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
	})
	table := fmt.Sprintf("qunfa-cost-%d", time.Now().UnixNano())
	if err := dynamostore.CreateTable(ctx, db, table); err != nil {
		b.Fatal(err)
	}
	st := dynamostore.New(db, table, dynamostore.Options{OnCapacity: meter.observe})
	watch := dynamostore.New(db, table, dynamostore.Options{}) // the benchmark's own polling is not metered
	sqsClient := awsemu.SQSClient(awsemu.SQS(b))
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
	prov, err := wecomapi.New(wecomapi.Config{BaseURL: srv.URL, Logger: log})
	if err != nil {
		b.Fatal(err)
	}
	clk := clock.System{}
	if err := st.GrantAccount(ctx, "t", "a", time.Time{}); err != nil {
		b.Fatal(err)
	}
	if _, err := st.PutAccount(ctx, store.Account{Tenant: "t", ID: "a", RatePerSec: 1e6, Burst: 1e6, MaxRecipientsPerCall: 1}); err != nil {
		b.Fatal(err)
	}
	snd := &sender.Sender{Store: st, Queue: q, Provider: prov, Clock: clk, Log: log,
		Config:   sender.Config{ClaimBatch: 10, Concurrency: 16},
		Breakers: &breaker.Breakers{Store: st, Clock: clk, Log: log}}
	var rcs []submit.Recipient
	for i := range n {
		rcs = append(rcs, submit.Recipient{Account: "a", To: fmt.Sprint("user-", i), Vars: map[string]string{"n": fmt.Sprint(i)}})
	}
	b.ResetTimer()
	for range b.N {
		meter.write, meter.read = 0, 0
		res, err := (&submit.Submitter{Store: st, Queue: q, Clock: clk}).Submit(ctx, submit.Params{
			Tenant: "t", IdempotencyKey: fmt.Sprint("cost-", time.Now().UnixNano()),
			Request: submit.Request{Template: "hello {{n}}", Recipients: rcs},
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
		b.ReportMetric(meter.write/n, "WCU/msg")
		b.ReportMetric(meter.read/n, "RCU/msg")
	}
}
