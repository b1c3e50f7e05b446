package reconcile_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/qunfa/qunfa/internal/awsemu"
	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/mockprovider"
	"github.com/qunfa/qunfa/internal/provider/wecomapi"
	"github.com/qunfa/qunfa/internal/queue"
	"github.com/qunfa/qunfa/internal/queue/sqlitequeue"
	"github.com/qunfa/qunfa/internal/queue/sqsqueue"
	"github.com/qunfa/qunfa/internal/reconcile"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/store/dynamostore"
	"github.com/qunfa/qunfa/internal/store/sqlitestore"
	"github.com/qunfa/qunfa/internal/store/storetest"
)

// BenchmarkSettleBacklog measures how long the reconciler takes to settle
// a backlog of uncertain items once the provider answers again, with the
// mock provider's look-ups taking 200 ms each (status_latency_ms), on the
// embedded store, in passes of at most 90 s as on Lambda. The backlog is
// QUNFA_RECONCILE_BACKLOG items (default 2,000; the target is
// 20,000 within 5 minutes):
//
//	QUNFA_RECONCILE_BACKLOG=20000 go test -run '^$' -bench SettleBacklog -benchtime 1x ./internal/reconcile/
func BenchmarkSettleBacklog(b *testing.B) {
	for range b.N {
		b.StopTimer()
		ctx := context.Background()
		dir := b.TempDir()
		st, err := sqlitestore.Open(ctx, filepath.Join(dir, "store.db"))
		if err != nil {
			b.Fatal(err)
		}
		q, err := sqlitequeue.Open(ctx, filepath.Join(dir, "queue.db"), sqlitequeue.Options{Name: "work", DeadLetter: "dlq", MaxReceiveCount: 10})
		if err != nil {
			b.Fatal(err)
		}
		settleBacklog(b, st, q, backlogSize())
		_ = q.Close()
		_ = st.Close()
	}
}

// BenchmarkSettleBacklogDynamoDB is BenchmarkSettleBacklog on the AWS
// adapters: the DynamoDB store on dynalite and the SQS queue on the
// emulator (the target holds "locally and on the emulators"):
//
//	QUNFA_RECONCILE_BACKLOG=20000 go test -run '^$' -bench SettleBacklogDynamoDB -benchtime 1x ./internal/reconcile/
func BenchmarkSettleBacklogDynamoDB(b *testing.B) {
	for range b.N {
		b.StopTimer()
		ctx := context.Background()
		db := dynamodb.New(dynamodb.Options{
			Region: "us-east-1", BaseEndpoint: aws.String(awsemu.DynamoDB(b)),
			Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
		})
		table := fmt.Sprintf("qunfa-backlog-%d", time.Now().UnixNano())
		if err := dynamostore.CreateTable(ctx, db, table); err != nil {
			b.Fatal(err)
		}
		sqsClient := awsemu.SQSClient(awsemu.SQS(b))
		url, _, err := sqsqueue.CreateQueues(ctx, sqsClient, fmt.Sprintf("qunfa-backlog-%d", time.Now().UnixNano()), 10)
		if err != nil {
			b.Fatal(err)
		}
		settleBacklog(b, dynamostore.New(db, table, dynamostore.Options{}), sqsqueue.New(sqsClient, url), backlogSize())
	}
}

// backlogSize is QUNFA_RECONCILE_BACKLOG, or 2,000.
func backlogSize() int {
	if v, err := strconv.Atoi(os.Getenv("QUNFA_RECONCILE_BACKLOG")); err == nil && v > 0 {
		return v
	}
	return 2000
}

// settleBacklog stores n items left submitted (their answers lost) over
// 4 jobs of 5 shards, and times the reconciler's passes until none is
// left submitted, with look-ups of 200 ms.
func settleBacklog(b *testing.B, st store.Store, q queue.Queue, n int) {
	b.Helper()
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	mock, err := mockprovider.New(mockprovider.Config{Logger: log})
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(mock.Handler())
	prov, err := wecomapi.New(wecomapi.Config{BaseURL: srv.URL, Token: "t", MaxIdleConnsPerHost: 128})
	if err != nil {
		b.Fatal(err)
	}
	// 4 jobs of 5 shards (accounts acct-0..acct-4), every item claimed
	// and left submitted: the answers were lost.
	const jobs, shards = 4, 5
	claimedAt := time.Now().Add(-10 * time.Minute)
	for range jobs {
		p, items := storetest.NewJob("t1", shards, n/(jobs*shards))
		if _, err := st.CreateJob(ctx, p); err != nil {
			b.Fatal(err)
		}
		for start := 0; start < len(items); start += store.MaxPutItems {
			if err := st.PutItems(ctx, store.PutItemsParams{JobID: p.Job.ID, Items: items[start:min(start+store.MaxPutItems, len(items))]}); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := st.TransitionJob(ctx, store.TransitionJobParams{JobID: p.Job.ID, To: store.JobRunning, At: claimedAt}); err != nil {
			b.Fatal(err)
		}
		for i := range shards {
			if _, err := st.TransitionShard(ctx, store.TransitionShardParams{JobID: p.Job.ID, Index: i, To: store.ShardRunning, At: claimedAt}); err != nil {
				b.Fatal(err)
			}
			for {
				cl, err := st.ClaimItems(ctx, store.ClaimItemsParams{JobID: p.Job.ID, Index: i, Max: n, Now: claimedAt, ClaimID: "c"})
				if err != nil {
					b.Fatal(err)
				}
				if len(cl.Items) == 0 {
					break // a store may claim a page at a time
				}
			}
			if _, err := st.RecountShard(ctx, p.Job.ID, i); err != nil {
				b.Fatal(err)
			}
		}
	}
	for i := range shards {
		if err := mock.SetBehaviour("acct-"+strconv.Itoa(i), mockprovider.Behaviour{StatusLatencyMS: 200}); err != nil {
			b.Fatal(err)
		}
	}
	rec := &reconcile.Reconciler{Store: st, Queue: q, Provider: prov, Clock: clock.System{}, Log: log,
		SettleAfter: time.Minute, StaleAfter: time.Hour}
	b.StartTimer()
	start := time.Now()
	passes := 0
	for {
		if passes == 1000 {
			b.Fatalf("backlog not settled after %d passes", passes)
		}
		passes++
		pctx, cancel := context.WithTimeout(ctx, 120*time.Second) // the Lambda timeout
		rep, err := rec.Run(pctx)
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		if rep.OldestSubmitted == 0 {
			break
		}
	}
	took := time.Since(start)
	b.StopTimer()
	b.ReportMetric(took.Seconds(), "s/backlog")
	b.ReportMetric(float64(n)/took.Seconds(), "items/s")
	b.ReportMetric(float64(passes), "passes")
	if lookups := mock.Stats(); lookups["acct-0"].StatusCalls == 0 {
		b.Fatal("no look-ups reached the mock")
	}
	srv.Close()
	_ = mock.Close()
}

// TestMain stops the emulators BenchmarkSettleBacklogDynamoDB started.
func TestMain(m *testing.M) {
	code := m.Run()
	awsemu.StopAll()
	os.Exit(code)
}
