package dynamostore_test

import (
	"context"
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

// beforeUpdate is an HTTP transport that runs a hook once, right before
// the next UpdateItem request goes out: what another process does between
// a compare-and-swap's read and its write.
type beforeUpdate struct {
	next http.RoundTripper
	mu   sync.Mutex
	hook func()
}

func (b *beforeUpdate) RoundTrip(r *http.Request) (*http.Response, error) {
	b.mu.Lock()
	hook := b.hook
	if hook != nil && strings.HasSuffix(r.Header.Get("X-Amz-Target"), ".UpdateItem") {
		b.hook = nil
	} else {
		hook = nil
	}
	b.mu.Unlock()
	if hook != nil {
		hook()
	}
	return b.next.RoundTrip(r)
}

// TestMarkBetweenReadAndFold: an outside change's fold reads the shard,
// another change marks it, then the fold writes. The fold must not clear
// the second change's mark (nor add its delta to counts the mark made
// untrustworthy): the mark moves the shard version, so the fold's
// compare-and-swap reads again and recounts.
func TestMarkBetweenReadAndFold(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	endpoint := awsemu.DynamoDB(t)
	tr := &beforeUpdate{next: http.DefaultTransport}
	hooked := dynamodb.New(dynamodb.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(endpoint),
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
		HTTPClient:  &http.Client{Transport: tr},
	})
	plain := client(t)
	table := newTable(t, plain)
	s := dynamostore.New(hooked, table, dynamostore.Options{})
	other := dynamostore.New(plain, table, dynamostore.Options{})
	oneShardJob(t, s, "race", 4)

	a, err := store.BeginOutsideTurn(ctx, s, "race", 0)
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.UpdateItems(ctx, store.UpdateItemsParams{JobID: "race", Index: 0, At: t0, Updates: []store.ItemUpdate{
		{Seq: 0, From: store.ItemPending, To: store.ItemAbandoned, Error: &store.ItemError{Category: store.CategoryCancelled}}}})
	if err != nil {
		t.Fatal(err)
	}
	tr.mu.Lock()
	tr.hook = func() {
		if _, err := store.BeginOutsideTurn(ctx, other, "race", 0); err != nil {
			t.Error(err)
		}
	}
	tr.mu.Unlock()
	sh, err := store.FoldOutsideTurn(ctx, s, a, res.Delta, res.FailuresDelta)
	if err != nil {
		t.Fatal(err)
	}
	stored, err := s.GetShard(ctx, "race", 0)
	if err != nil {
		t.Fatal(err)
	}
	if !sh.Dirty || !stored.Dirty {
		t.Fatalf("after a fold whose read came before another change's mark: Dirty %v (stored %v), want the mark kept", sh.Dirty, stored.Dirty)
	}
	if want := (store.Counts{Pending: 3, Abandoned: 1}); stored.Counts != want {
		t.Fatalf("counts %+v, want %+v", stored.Counts, want)
	}
}
