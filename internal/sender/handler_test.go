package sender_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/qunfa/qunfa/internal/dispatch"
	"github.com/qunfa/qunfa/internal/handlers"
	"github.com/qunfa/qunfa/internal/provider"
	"github.com/qunfa/qunfa/internal/queue"
	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/submit"
)

// meetingProvider holds the first call of each account until the first
// calls of all `accounts` accounts have arrived: it only lets them through
// when they run at the same time.
type meetingProvider struct {
	provider.Provider
	mu      sync.Mutex
	seen    map[string]bool
	all     chan struct{}
	waiting int
}

func (m *meetingProvider) Send(ctx context.Context, req provider.SendRequest) (provider.SendResult, error) {
	m.mu.Lock()
	first := !m.seen[req.Account]
	m.seen[req.Account] = true
	if first {
		m.waiting--
		if m.waiting == 0 {
			close(m.all)
		}
	}
	m.mu.Unlock()
	if first {
		select {
		case <-m.all:
		case <-time.After(5 * time.Second):
			return provider.SendResult{}, context.DeadlineExceeded
		}
	}
	return m.Provider.Send(ctx, req)
}

// TestSenderHandlerWorksGroupsConcurrently (issue 17): one invocation works
// the FIFO groups of its batch at the same time, each in order, and reports
// failures per group — a shard handed back fails its own messages only.
func TestSenderHandlerWorksGroupsConcurrently(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, pipelineOptions{sender: sender.Config{ClaimBatch: 5, MaxWait: 300 * time.Millisecond}})
	p.account("fast", 1000, 1000, 0, 1)
	p.account("slow", 0.5, 1, 0, 1) // one send, then 2 s to the next token: handed back
	meet := &meetingProvider{Provider: p.sender.Provider, seen: map[string]bool{}, all: make(chan struct{}), waiting: 2}
	p.sender.Provider = meet
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: append(recipients([]string{"fast"}, 5), recipients([]string{"slow"}, 3)...)}, "groups")
	ctx := context.Background()
	msgs, err := p.queue.Receive(ctx, queue.ReceiveParams{Max: 10, VisibilityTimeout: time.Minute})
	if err != nil || len(msgs) != 2 {
		t.Fatalf("receive: %v, %d messages", err, len(msgs))
	}
	var slowMsg queue.Message
	ev := events.SQSEvent{}
	for _, m := range msgs {
		tn, err := dispatch.Decode(m.Body)
		if err != nil {
			t.Fatal(err)
		}
		rec := events.SQSMessage{MessageId: m.ID, ReceiptHandle: m.ReceiptHandle, Body: string(m.Body),
			Attributes: map[string]string{"MessageGroupId": m.Group, "ApproximateReceiveCount": strconv.Itoa(m.ReceiveCount)}}
		ev.Records = append(ev.Records, rec)
		if job.Shards[tn.Shard].Account == "slow" {
			slowMsg = m
			// A later message of the same group: it must fail with the
			// first, never run ahead of it.
			ev.Records = append(ev.Records, events.SQSMessage{MessageId: "later-" + m.ID, Body: string(m.Body),
				Attributes: map[string]string{"MessageGroupId": m.Group, "ApproximateReceiveCount": "1"}})
		}
	}
	resp, err := handlers.Sender(p.sender, p.log)(ctx, ev)
	if err != nil {
		t.Fatal(err)
	}
	failed := map[string]bool{}
	for _, f := range resp.BatchItemFailures {
		failed[f.ItemIdentifier] = true
	}
	if len(failed) != 2 || !failed[slowMsg.ID] || !failed["later-"+slowMsg.ID] {
		t.Fatalf("batch item failures %v, want the slow shard's message and the later one of its group", resp.BatchItemFailures)
	}
	v, err := p.store.GetJob(ctx, job.Job.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, sh := range v.Shards {
		want := int64(5)
		if sh.Account == "slow" {
			want = 1
		}
		if sh.Counts.Confirmed != want {
			t.Errorf("shard of %s confirmed %d, want %d (the two groups' first calls must have met)", sh.Account, sh.Counts.Confirmed, want)
		}
	}
}

// countingStore counts the whole-job reads (the job with every shard).
type countingStore struct {
	store.Store
	mu                   sync.Mutex
	getJob, getJobRecord int
}

func (c *countingStore) GetJob(ctx context.Context, id string) (store.JobView, error) {
	c.mu.Lock()
	c.getJob++
	c.mu.Unlock()
	return c.Store.GetJob(ctx, id)
}

func (c *countingStore) GetJobRecord(ctx context.Context, id string) (store.Job, error) {
	c.mu.Lock()
	c.getJobRecord++
	c.mu.Unlock()
	return c.Store.GetJobRecord(ctx, id)
}

// TestTurnReadsTheJobRecordNotEveryShard (issue 17): a batch of a turn
// reads the job record, not the job with all its shards, so a turn costs
// the same whatever the job's shard count.
func TestTurnReadsTheJobRecordNotEveryShard(t *testing.T) {
	t.Parallel()
	p, _ := fakePipeline(t, sender.Config{ClaimBatch: 5})
	var accounts []string
	for i := range 40 {
		id := "acct-" + strconv.Itoa(i)
		accounts = append(accounts, id)
		p.account(id, 1000, 1000, 0, 1)
	}
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients(accounts, 20)}, "shards")
	counting := &countingStore{Store: p.sender.Store}
	p.sender.Store = counting
	msg := p.nextTurn(time.Minute)
	res, err := p.sender.HandleTurn(context.Background(), msg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Sent != 20 {
		t.Fatalf("the turn sent %d, want its shard's 20 (result %+v)", res.Sent, res)
	}
	if counting.getJob > 1 || counting.getJobRecord < 4 {
		t.Fatalf("a turn of 4 batches of a %d-shard job read the whole job %d times and the job record %d times; want the record at every batch and the whole job at most once (finishing)",
			len(job.Shards), counting.getJob, counting.getJobRecord)
	}
}
