package dynamostore_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/qunfa/qunfa/internal/awsemu"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/store/dynamostore"
)

// requestCounter is an HTTP transport that counts DynamoDB requests by
// operation and, once armed, cancels a context when the nth request of
// an operation is about to go out, as a submit process dying mid-way
// would leave it: the requests sent before are applied, the others never
// reach DynamoDB.
type requestCounter struct {
	next   http.RoundTripper
	mu     sync.Mutex
	byOp   map[string]int
	op     string
	at     int
	cancel context.CancelFunc
}

func (c *requestCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	op := r.Header.Get("X-Amz-Target")
	op = op[strings.LastIndexByte(op, '.')+1:]
	c.mu.Lock()
	c.byOp[op]++
	if c.cancel != nil && op == c.op && c.byOp[op] == c.at {
		c.cancel()
		c.cancel = nil
		c.mu.Unlock()
		return nil, context.Canceled
	}
	c.mu.Unlock()
	return c.next.RoundTrip(r)
}

func (c *requestCounter) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.byOp
	c.byOp = map[string]int{}
	return out
}

// armCancel makes the nth next request of op cancel cancel (and fail).
func (c *requestCounter) armCancel(op string, n int, cancel context.CancelFunc) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.byOp = map[string]int{}
	c.op, c.at, c.cancel = op, n, cancel
}

func countingStore(t *testing.T) (*dynamostore.Store, *requestCounter) {
	t.Helper()
	tr := &requestCounter{next: http.DefaultTransport, byOp: map[string]int{}}
	c := dynamodb.New(dynamodb.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(awsemu.DynamoDB(t)),
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
		HTTPClient:   &http.Client{Transport: tr},
	})
	return dynamostore.New(c, newTable(t, c), dynamostore.Options{}), tr
}

// manyShardsJob is a job over accounts accounts of perAccount shards
// each, as the planner makes one for a large submit.
func manyShardsJob(id string, accounts, perAccount int) store.CreateJobParams {
	p := store.CreateJobParams{Job: store.Job{ID: id, Tenant: "t", IdempotencyKey: "key-" + id, RequestHash: "h",
		CreatedAt: time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)}}
	for a := range accounts {
		for k := range perAccount {
			size := int64(100 + a + k)
			p.Shards = append(p.Shards, store.Shard{Index: len(p.Shards), Account: fmt.Sprintf("acct-%03d", a), Size: size})
			p.Job.Total += size
		}
	}
	return p
}

// checkShards fails unless job id holds exactly the plan's shards, fresh.
func checkShards(t *testing.T, s store.Store, p store.CreateJobParams) {
	t.Helper()
	v, err := s.GetJob(context.Background(), p.Job.ID)
	if err != nil {
		t.Fatalf("GetJob: %v", err)
	}
	if len(v.Shards) != len(p.Shards) || v.Job.Total != p.Job.Total {
		t.Fatalf("job has %d shards, total %d; want %d, %d", len(v.Shards), v.Job.Total, len(p.Shards), p.Job.Total)
	}
	for i, sh := range v.Shards {
		want := p.Shards[i]
		if sh.Index != want.Index || sh.Account != want.Account || sh.Size != want.Size || sh.Status != store.ShardPending ||
			sh.Counts != (store.Counts{Pending: want.Size}) || sh.SlowFactor != 1 {
			t.Fatalf("shard %d = %+v, want %+v pending", i, sh, want)
		}
	}
}

// TestCreateJobWritesShardsInBatches: a submit over 200 accounts of 4
// shards each writes its 800 shard records 25 to a request, not one
// request each (800 PutItems took about as many round trips on AWS).
func TestCreateJobWritesShardsInBatches(t *testing.T) {
	t.Parallel()
	s, tr := countingStore(t)
	p := manyShardsJob("many", 200, 4)
	tr.take() // the table's creation
	start := time.Now()
	res, err := s.CreateJob(context.Background(), p)
	took := time.Since(start)
	if err != nil || !res.Created {
		t.Fatalf("CreateJob = %+v, %v", res, err)
	}
	ops := tr.take()
	t.Logf("800 shards: %v in %v", ops, took)
	if ops["PutItem"] > 2 || ops["BatchWriteItem"] > 800/25+2 {
		t.Errorf("requests %v: want the idempotency and job records put, the shards in %d batches", ops, 800/25)
	}
	checkShards(t, s, p)
}

// TestCreateJobRetriedAfterPartialShardBatches: a submit that dies after
// some of its shard batches were written (the context ends as the 10th
// goes out, others in flight) is retried with the same key and plan: the
// retry creates the job with exactly its shards, and a third call is a
// replay of it.
func TestCreateJobRetriedAfterPartialShardBatches(t *testing.T) {
	t.Parallel()
	s, tr := countingStore(t)
	p := manyShardsJob("partial", 200, 4)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tr.armCancel("BatchWriteItem", 10, cancel)
	if _, err := s.CreateJob(ctx, p); err == nil {
		t.Fatal("CreateJob survived its context's end mid-way")
	}
	if _, err := s.GetJob(context.Background(), p.Job.ID); err == nil {
		t.Fatal("the interrupted submit left a visible job")
	}
	if _, err := s.GetShard(context.Background(), p.Job.ID, len(p.Shards)-1); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the last shard after the interruption: %v, want ErrNotFound (the submit stopped mid-way)", err)
	}
	res, err := s.CreateJob(context.Background(), p)
	if err != nil || !res.Created || res.Job.ID != p.Job.ID {
		t.Fatalf("retry: CreateJob = %+v, %v; want job %s created", res, err, p.Job.ID)
	}
	checkShards(t, s, p)
	again, err := s.CreateJob(context.Background(), p)
	if err != nil || again.Created || again.Job.ID != p.Job.ID {
		t.Fatalf("replay: CreateJob = %+v, %v; want job %s, not created again", again, err, p.Job.ID)
	}
	checkShards(t, s, p)
}
