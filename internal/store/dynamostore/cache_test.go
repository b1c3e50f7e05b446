package dynamostore_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/qunfa/qunfa/internal/awsemu"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/store/dynamostore"
)

// requestMeter counts requests and read units by operation.
type requestMeter struct {
	mu       sync.Mutex
	requests map[string]int
	read     float64
}

func (m *requestMeter) observe(op string, c types.ConsumedCapacity) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.requests == nil {
		m.requests = map[string]int{}
	}
	m.requests[op]++
	switch op {
	case "PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem":
	default:
		if c.CapacityUnits != nil {
			m.read += *c.CapacityUnits
		}
	}
}

func (m *requestMeter) reset() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.requests, m.read = nil, 0
}

// TestSenderLoopReads keeps the reads of a turn's batches to what cannot
// be cached: per batch of 10 the token bucket (GetItem) and the due index
// (Query), and a payload record per 64 items. The shard record before its
// advance, the status page before the claim and before the outcomes, and
// the payloads of items claimed before are this process's own writes and
// reads (recordCache): reading them again would cost about 0.35 read
// units per message (0.7 instead of 0.33 for the whole sender path).
func TestSenderLoopReads(t *testing.T) {
	t.Parallel()
	var m requestMeter
	s := newStore(t, dynamostore.Options{OnCapacity: m.observe})
	const n = 1000
	msgs := runSenderLoop(t, s, n, mockCase)
	// runSenderLoop's snapshot and job set-up are metered too; they read
	// a few records per page of 256 items.
	batches := n / 10
	t.Logf("%d messages: %.3f RCU/msg, requests %v", msgs, m.read/float64(msgs), m.requests)
	if got := m.requests["GetItem"]; got > batches+10 {
		t.Errorf("%d GetItem requests for %d batches: the shard is read again before its advance (one bucket read per batch expected)", got, batches)
	}
	if got, want := m.requests["BatchGetItem"], n/64+2+10; got > want {
		t.Errorf("%d BatchGetItem requests for %d batches, want at most %d: status pages or payloads are read again at every batch", got, batches, want)
	}
	if r := m.read / float64(msgs); r > 0.25 {
		t.Errorf("%.3f read units per message, want at most 0.25", r)
	}
}

// TestCachedPageChangedElsewhere: another process changes a status page
// this process has cached (a cancel, a reconciler re-pending an item).
// The claim and the outcomes written on the cached page must lose their
// condition and be decided again on the page as it is: nothing another
// process wrote is overwritten, and nothing is rejected because the
// cache is old.
func TestCachedPageChangedElsewhere(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	plain := client(t)
	table := newTable(t, plain)
	s := dynamostore.New(plain, table, dynamostore.Options{})
	other := dynamostore.New(plain, table, dynamostore.Options{})
	oneShardJob(t, s, "pg", 20)
	if _, err := s.BeginTurn(ctx, store.BeginTurnParams{JobID: "pg", Index: 0, Turn: 1, MessageID: "m1", At: t0}); err != nil {
		t.Fatal(err)
	}
	c1, err := s.ClaimItems(ctx, store.ClaimItemsParams{JobID: "pg", Index: 0, Max: 2, Now: t0, ClaimID: "c1"})
	if err != nil || len(c1.Items) != 2 {
		t.Fatalf("ClaimItems = %d items, %v", len(c1.Items), err)
	}
	// Elsewhere: items 2 and 3 are abandoned, item 1 (claimed here) is
	// put back to pending.
	if res, err := other.UpdateItems(ctx, store.UpdateItemsParams{JobID: "pg", Index: 0, At: t0, Updates: []store.ItemUpdate{
		{Seq: 2, From: store.ItemPending, To: store.ItemAbandoned, Error: &store.ItemError{Category: store.CategoryCancelled}},
		{Seq: 3, From: store.ItemPending, To: store.ItemAbandoned, Error: &store.ItemError{Category: store.CategoryCancelled}},
		{Seq: 1, From: store.ItemSubmitted, ClaimID: "c1", To: store.ItemPending, NextAttemptAt: t0.Add(-1)},
	}}); err != nil || len(res.Rejected) > 0 {
		t.Fatalf("other.UpdateItems = %+v, %v", res, err)
	}
	// Here, on the cached page: item 1 is still submitted by c1 and 2, 3
	// pending. Abandoning item 1 as pending must be accepted (the page
	// says pending now), confirming it as c1's must be rejected.
	res, err := s.UpdateItems(ctx, store.UpdateItemsParams{JobID: "pg", Index: 0, At: t0, Updates: []store.ItemUpdate{
		{Seq: 1, From: store.ItemPending, To: store.ItemAbandoned, Error: &store.ItemError{Category: store.CategoryCancelled}},
	}})
	if err != nil || len(res.Rejected) != 0 {
		t.Fatalf("abandon item 1, pending elsewhere = %+v, %v; want accepted", res, err)
	}
	res, err = s.UpdateItems(ctx, store.UpdateItemsParams{JobID: "pg", Index: 0, At: t0, Updates: []store.ItemUpdate{
		{Seq: 0, From: store.ItemSubmitted, ClaimID: "c1", To: store.ItemConfirmed},
	}})
	if err != nil || len(res.Rejected) != 0 {
		t.Fatalf("confirm item 0 = %+v, %v", res, err)
	}
	c2, err := s.ClaimItems(ctx, store.ClaimItemsParams{JobID: "pg", Index: 0, Max: 3, Now: t0, ClaimID: "c2"})
	if err != nil {
		t.Fatal(err)
	}
	var seqs []int64
	for _, it := range c2.Items {
		seqs = append(seqs, it.Seq)
		if it.To != fmt.Sprint("u", it.Seq) {
			t.Errorf("claimed item %d to %q", it.Seq, it.To)
		}
	}
	if !slices.Equal(seqs, []int64{4, 5, 6}) {
		t.Fatalf("second claim = %v, want [4 5 6] (2 and 3 were abandoned elsewhere)", seqs)
	}
	want := map[int64]store.ItemStatus{0: store.ItemConfirmed, 1: store.ItemAbandoned, 2: store.ItemAbandoned, 3: store.ItemAbandoned,
		4: store.ItemSubmitted, 5: store.ItemSubmitted, 6: store.ItemSubmitted, 7: store.ItemPending}
	list, err := other.ListItems(ctx, store.ListItemsParams{JobID: "pg", Limit: 8})
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range list.Items {
		if w, ok := want[it.Seq]; ok && it.Status != w {
			t.Errorf("item %d is %s, want %s", it.Seq, it.Status, w)
		}
	}
}

// TestCachedShardChangedElsewhere: a shard's status changes in another
// process between two advances of this one's turn. Every write of a shard
// moves its version, so the advance, begun on the record this process
// last wrote, reads it again instead of putting a completed shard back
// into the running index.
func TestCachedShardChangedElsewhere(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	plain := client(t)
	table := newTable(t, plain)
	s := dynamostore.New(plain, table, dynamostore.Options{})
	other := dynamostore.New(plain, table, dynamostore.Options{})
	oneShardJob(t, s, "sh", 4)
	if _, err := s.TransitionShard(ctx, store.TransitionShardParams{JobID: "sh", Index: 0, To: store.ShardRunning, At: t0}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.BeginTurn(ctx, store.BeginTurnParams{JobID: "sh", Index: 0, Turn: 1, MessageID: "m1", At: t0}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AdvanceShard(ctx, store.AdvanceShardParams{JobID: "sh", Index: 0, Turn: 1, At: t0}); err != nil {
		t.Fatal(err)
	}
	before, _, err := s.ShardRecordForTest(ctx, "sh", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.TransitionShard(ctx, store.TransitionShardParams{JobID: "sh", Index: 0,
		From: []store.ShardStatus{store.ShardRunning}, To: store.ShardCompleted, At: t0}); err != nil {
		t.Fatal(err)
	}
	after, _, err := s.ShardRecordForTest(ctx, "sh", 0)
	if err != nil {
		t.Fatal(err)
	}
	if after <= before {
		t.Fatalf("TransitionShard left the shard version at %d (was %d): a compare-and-swap on the old record would not notice", after, before)
	}
	sh, err := s.AdvanceShard(ctx, store.AdvanceShardParams{JobID: "sh", Index: 0, Turn: 1, At: t0, EndTurn: true})
	if err != nil {
		t.Fatal(err)
	}
	if sh.Status != store.ShardCompleted {
		t.Fatalf("advance after the shard completed elsewhere: status %s", sh.Status)
	}
	if _, g2, err := s.ShardRecordForTest(ctx, "sh", 0); err != nil || g2 == "RUNNING" {
		t.Fatalf("completed shard's running-index partition = %q, %v: put back as running from a stale record", g2, err)
	}
}

// countRequests counts the requests of one DynamoDB operation.
type countRequests struct {
	next http.RoundTripper
	op   string
	n    atomic.Int64
}

func (c *countRequests) RoundTrip(r *http.Request) (*http.Response, error) {
	if strings.HasSuffix(r.Header.Get("X-Amz-Target"), "."+c.op) {
		c.n.Add(1)
	}
	return c.next.RoundTrip(r)
}

// TestNoCacheOutsideTurns: a process that runs no turn of a shard (the
// reconciler, the API) writes its status pages on fresh reads. Its
// cached page would be old by its next change (the turns write the pages
// meanwhile), and a write on it would cost a failed conditional write.
func TestNoCacheOutsideTurns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	puts := &countRequests{next: http.DefaultTransport, op: "PutItem"}
	counted := dynamodb.New(dynamodb.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(awsemu.DynamoDB(t)),
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
		HTTPClient:  &http.Client{Transport: puts},
	})
	plain := client(t)
	table := newTable(t, plain)
	s := dynamostore.New(counted, table, dynamostore.Options{})
	other := dynamostore.New(plain, table, dynamostore.Options{})
	oneShardJob(t, other, "out", 4)
	abandon := func(st *dynamostore.Store, seq int64) {
		t.Helper()
		res, err := st.UpdateItems(ctx, store.UpdateItemsParams{JobID: "out", Index: 0, At: t0, Updates: []store.ItemUpdate{
			{Seq: seq, From: store.ItemPending, To: store.ItemAbandoned, Error: &store.ItemError{Category: store.CategoryCancelled}}}})
		if err != nil || len(res.Rejected) > 0 {
			t.Fatalf("abandon %d: %+v, %v", seq, res, err)
		}
	}
	abandon(s, 0)
	abandon(other, 1)
	puts.n.Store(0)
	// Without errors to record, so a cached page would be written on.
	res, err := s.UpdateItems(ctx, store.UpdateItemsParams{JobID: "out", Index: 0, At: t0, Updates: []store.ItemUpdate{
		{Seq: 2, From: store.ItemPending, To: store.ItemAbandoned}}})
	if err != nil || len(res.Rejected) > 0 {
		t.Fatalf("abandon 2: %+v, %v", res, err)
	}
	if n := puts.n.Load(); n != 1 {
		t.Fatalf("%d PutItem requests for one page change, want 1: the page was written on a stale cached copy first", n)
	}
}
