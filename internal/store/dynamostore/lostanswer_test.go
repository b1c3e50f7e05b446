package dynamostore_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/qunfa/qunfa/internal/awsemu"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/store/dynamostore"
)

// loseAnswers is an HTTP transport that, while armed, lets a DynamoDB
// request of the given operation through and then drops its answer, as a
// connection reset after the write would. The SDK retries the same
// request, which DynamoDB has already applied.
type loseAnswers struct {
	next http.RoundTripper
	mu   sync.Mutex
	op   string
	left int
	lost int
}

func (l *loseAnswers) arm(op string, n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.op, l.left = op, n
}

func (l *loseAnswers) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := l.next.RoundTrip(r)
	if err != nil {
		return resp, err
	}
	l.mu.Lock()
	drop := l.left > 0 && strings.HasSuffix(r.Header.Get("X-Amz-Target"), "."+l.op) && resp.StatusCode == http.StatusOK
	if drop {
		l.left--
		l.lost++
	}
	l.mu.Unlock()
	if !drop {
		return resp, nil
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return nil, errors.New("read: connection reset by peer (answer dropped by the test)")
}

func lossyStore(t *testing.T) (*dynamostore.Store, *loseAnswers) {
	t.Helper()
	endpoint := awsemu.DynamoDB(t)
	tr := &loseAnswers{next: http.DefaultTransport}
	c := dynamodb.New(dynamodb.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
		HTTPClient:   &http.Client{Transport: tr},
	})
	return dynamostore.New(c, newTable(t, c), dynamostore.Options{}), tr
}

// TestAdditiveUpdatesSurviveLostAnswers: an UpdateItem with ADD that
// DynamoDB applied but whose answer was lost is retried by the SDK; the
// retry must not apply it a second time (AddShardCounts, AdvanceShard,
// ReserveBudget).
func TestAdditiveUpdatesSurviveLostAnswers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, tr := lossyStore(t)
	oneShardJob(t, s, "lost", 10)
	abandon := func(seqs ...int64) store.UpdateItemsResult {
		t.Helper()
		var ups []store.ItemUpdate
		for _, seq := range seqs {
			ups = append(ups, store.ItemUpdate{Seq: seq, From: store.ItemPending, To: store.ItemAbandoned,
				Error: &store.ItemError{Category: store.CategoryCancelled}})
		}
		res, err := s.UpdateItems(ctx, store.UpdateItemsParams{JobID: "lost", Index: 0, Updates: ups, At: t0})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	sh, err := s.GetShard(ctx, "lost", 0)
	if err != nil {
		t.Fatal(err)
	}
	res := abandon(0, 1)
	tr.arm("UpdateItem", 1)
	got, err := s.AddShardCounts(ctx, store.AddShardCountsParams{JobID: "lost", Index: 0, Epoch: sh.Epoch, Delta: res.Delta, FailuresDelta: res.FailuresDelta})
	if err != nil {
		t.Fatalf("AddShardCounts: %v", err)
	}
	if tr.lost != 1 {
		t.Fatalf("%d answers lost, want 1", tr.lost)
	}
	if want := (store.Counts{Pending: 8, Abandoned: 2}); got.Counts != want {
		t.Fatalf("AddShardCounts after a lost answer: counts %+v, want %+v (the ADD was applied twice?)", got.Counts, want)
	}
	if stored, _ := s.GetShard(ctx, "lost", 0); stored.Counts != got.Counts {
		t.Fatalf("stored counts %+v, returned %+v", stored.Counts, got.Counts)
	}

	bt, err := s.BeginTurn(ctx, store.BeginTurnParams{JobID: "lost", Index: 0, Turn: 1, MessageID: "m1", At: t0})
	if err != nil {
		t.Fatal(err)
	}
	res = abandon(2)
	tr.arm("UpdateItem", 1)
	adv, err := s.AdvanceShard(ctx, store.AdvanceShardParams{JobID: "lost", Index: 0, Turn: 1, Epoch: bt.Epoch,
		Delta: res.Delta, FailuresDelta: res.FailuresDelta, Cursor: 3, At: t0, Attempts: 1, AttemptFailures: 1})
	if err != nil {
		t.Fatalf("AdvanceShard: %v", err)
	}
	if want := (store.Counts{Pending: 7, Abandoned: 3}); adv.Counts != want || adv.Attempts != 1 || adv.AttemptFailures != 1 {
		t.Fatalf("AdvanceShard after a lost answer: counts %+v attempts %d/%d, want %+v and 1/1", adv.Counts, adv.Attempts, adv.AttemptFailures, want)
	}

	if _, err := s.UpdateJobLimits(ctx, store.UpdateJobLimitsParams{JobID: "lost", Budget: aws.Int64(10)}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int64{4, -1} {
		tr.arm("UpdateItem", 1)
		if g, err := s.ReserveBudget(ctx, "lost", n); err != nil || g.Granted != n {
			t.Fatalf("ReserveBudget(%d) = %+v, %v", n, g, err)
		}
	}
	v, err := s.GetJob(ctx, "lost")
	if err != nil {
		t.Fatal(err)
	}
	if v.Job.BudgetUsed != 3 {
		t.Fatalf("BudgetUsed %d after reserving 4 and giving 1 back with lost answers, want 3", v.Job.BudgetUsed)
	}
}
