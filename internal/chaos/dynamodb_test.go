package chaos_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/qunfa/qunfa/internal/awsemu"
	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/queue"
	"github.com/qunfa/qunfa/internal/queue/sqsqueue"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/store/dynamostore"
)

func TestMain(m *testing.M) {
	code := m.Run()
	awsemu.StopAll()
	os.Exit(code)
}

// TestChaosDynamoDB runs the chaos suite on the AWS adapters: the DynamoDB
// store on dynalite and the SQS FIFO queue on fauxqs, each run with a
// table and a queue of its own, the same faults, crashes, operator actions
// and judge as TestChaos. QUNFA_CHAOS_RUNS, _BASE and _SEED work as there
// (default: a fixed batch of 6 runs, the short suite of `make test`).
func TestChaosDynamoDB(t *testing.T) {
	awsemu.DynamoDB(t)
	awsemu.SQS(t)
	for _, seed := range seeds(t, 6) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			chaosRun(t, seed, dynamoBackend)
		})
	}
}

var resourceSeq atomic.Int64

// dynamoBackend opens a fresh DynamoDB table on dynalite and a fresh FIFO
// queue (with its dead-letter queue) on fauxqs for one run.
func dynamoBackend(t *testing.T, _ string, clk *clock.Fake) (store.Store, queue.Queue) {
	ctx := context.Background()
	name := fmt.Sprintf("chaos-%d-%d", os.Getpid(), resourceSeq.Add(1))
	db := dynamodb.New(dynamodb.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(awsemu.DynamoDB(t)),
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
	})
	if err := dynamostore.CreateTable(ctx, db, name); err != nil {
		t.Fatalf("create table: %v", err)
	}
	t.Cleanup(func() { _, _ = db.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(name)}) })
	st := dynamostore.New(db, name, dynamostore.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})

	sc := awsemu.SQSClient(awsemu.SQS(t))
	url, dlq, err := sqsqueue.CreateQueues(ctx, sc, name, sqsqueue.MaxReceiveCountLimit)
	if err != nil {
		t.Fatalf("create queues: %v", err)
	}
	t.Cleanup(func() {
		for _, u := range []string{url, dlq} {
			_, _ = sc.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: aws.String(u)})
		}
	})
	return st, &fakeTimeQueue{inner: sqsqueue.New(sc, url), clk: clk, due: map[string]time.Time{}}
}

// realVisibility is how long, in real time, the SQS queue keeps a received
// message invisible for fakeTimeQueue: longer than any run.
const realVisibility = time.Hour

// fakeTimeQueue runs the timing of an SQS queue on the run's fake clock,
// which moves minutes while the wall clock moves seconds: a received
// message stays invisible in SQS (realVisibility) until its visibility
// ends on the fake clock, when it is made visible again at once (the next
// call notices). Deduplication ids get the fake 5-minute period they are
// sent in, so a duplicate is dropped within it (as SQS would within its
// window) and accepted after it (the window may be shorter than SQS's,
// never longer: more duplicates, never a message dropped that SQS would
// deliver). Everything else — FIFO order, group locking, deduplication,
// receipt handles, receive counts, the dead-letter queue — is the
// emulator's.
type fakeTimeQueue struct {
	inner queue.Queue
	clk   clock.Clock

	mu  sync.Mutex
	due map[string]time.Time // receipt handle → fake end of its visibility
}

// expire makes visible again the messages whose visibility has ended on
// the fake clock.
func (q *fakeTimeQueue) expire(ctx context.Context) error {
	now := q.clk.Now()
	var ended []string
	q.mu.Lock()
	for h, at := range q.due {
		if !at.After(now) {
			ended = append(ended, h)
			delete(q.due, h)
		}
	}
	q.mu.Unlock()
	for _, h := range ended {
		// Deleted meanwhile: nothing to make visible.
		if err := q.inner.ChangeVisibility(ctx, h, 0); err != nil && !errors.Is(err, queue.ErrNotFound) {
			return fmt.Errorf("expire visibility: %w", err)
		}
	}
	return nil
}

func (q *fakeTimeQueue) Send(ctx context.Context, p queue.SendParams) (queue.SendResult, error) {
	p.DedupID += "~" + strconv.FormatInt(q.clk.Now().Unix()/int64(queue.DedupWindow/time.Second), 10)
	return q.inner.Send(ctx, p)
}

func (q *fakeTimeQueue) Receive(ctx context.Context, p queue.ReceiveParams) ([]queue.Message, error) {
	if err := q.expire(ctx); err != nil {
		return nil, err
	}
	fake := p.VisibilityTimeout
	if fake > 0 {
		p.VisibilityTimeout = realVisibility
	}
	msgs, err := q.inner.Receive(ctx, p)
	if err != nil || fake == 0 {
		return msgs, err
	}
	at := q.clk.Now().Add(fake)
	q.mu.Lock()
	for _, m := range msgs {
		q.due[m.ReceiptHandle] = at
	}
	q.mu.Unlock()
	return msgs, nil
}

func (q *fakeTimeQueue) Delete(ctx context.Context, receiptHandle string) error {
	if err := q.expire(ctx); err != nil {
		return err
	}
	q.mu.Lock()
	delete(q.due, receiptHandle)
	q.mu.Unlock()
	return q.inner.Delete(ctx, receiptHandle)
}

func (q *fakeTimeQueue) ChangeVisibility(ctx context.Context, receiptHandle string, d time.Duration) error {
	if err := q.expire(ctx); err != nil {
		return err
	}
	if d <= 0 {
		q.mu.Lock()
		delete(q.due, receiptHandle)
		q.mu.Unlock()
		return q.inner.ChangeVisibility(ctx, receiptHandle, d)
	}
	if d > queue.MaxVisibilityTimeout {
		return q.inner.ChangeVisibility(ctx, receiptHandle, d) // refused as SQS refuses it
	}
	if err := q.inner.ChangeVisibility(ctx, receiptHandle, realVisibility); err != nil {
		return err
	}
	q.mu.Lock()
	q.due[receiptHandle] = q.clk.Now().Add(d)
	q.mu.Unlock()
	return nil
}

// TestFakeTimeQueue: on the SQS emulator, a received message comes back
// when its visibility ends on the fake clock (not before), a hand-back
// keeps it away for its delay on the fake clock, and a deduplication id
// is remembered within its fake 5-minute period only.
func TestFakeTimeQueue(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(t0)
	_, q := dynamoBackend(t, "", clk)
	send := func(dedup string) {
		t.Helper()
		if _, err := q.Send(ctx, queue.SendParams{Group: "g", DedupID: dedup, Body: []byte("b-" + dedup)}); err != nil {
			t.Fatal(err)
		}
	}
	receive := func() []queue.Message {
		t.Helper()
		msgs, err := q.Receive(ctx, queue.ReceiveParams{Max: 10, VisibilityTimeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		return msgs
	}
	send("a")
	send("a") // dropped: same period
	first := receive()
	if len(first) != 1 {
		t.Fatalf("received %d messages, want 1 (the duplicate dropped)", len(first))
	}
	clk.Advance(59 * time.Second)
	if got := receive(); len(got) != 0 {
		t.Fatalf("received %d messages 59 s into a 1-minute visibility, want 0", len(got))
	}
	clk.Advance(2 * time.Second)
	again := receive()
	if len(again) != 1 || again[0].ID != first[0].ID || again[0].ReceiveCount != 2 {
		t.Fatalf("after the visibility ended: %+v, want the same message, received twice", again)
	}
	if err := q.ChangeVisibility(ctx, again[0].ReceiptHandle, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	clk.Advance(20 * time.Second)
	if got := receive(); len(got) != 0 {
		t.Fatalf("received %d messages 20 s into a 30 s hand-back, want 0", len(got))
	}
	clk.Advance(15 * time.Second)
	last := receive()
	if len(last) != 1 {
		t.Fatalf("received %d messages after the hand-back, want 1", len(last))
	}
	if err := q.Delete(ctx, last[0].ReceiptHandle); err != nil {
		t.Fatal(err)
	}
	clk.Advance(queue.DedupWindow)
	send("a") // a new period: accepted
	if got := receive(); len(got) != 1 {
		t.Fatalf("received %d messages after a resend in the next period, want 1", len(got))
	}
}
