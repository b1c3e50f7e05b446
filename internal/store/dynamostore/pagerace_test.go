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

// beforePut runs a hook once, right before the next PutItem request goes
// out: another process writing a status page between this one's read of
// the page and its conditional write.
type beforePut struct {
	next http.RoundTripper
	mu   sync.Mutex
	hook func()
}

func (b *beforePut) RoundTrip(r *http.Request) (*http.Response, error) {
	b.mu.Lock()
	hook := b.hook
	if hook != nil && strings.HasSuffix(r.Header.Get("X-Amz-Target"), ".PutItem") {
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

// racedPages returns a store whose next status-page write is preceded by
// what race does on a second store over the same table, and that second
// store.
func racedPages(t *testing.T) (*dynamostore.Store, *dynamostore.Store, *beforePut) {
	t.Helper()
	tr := &beforePut{next: http.DefaultTransport}
	hooked := dynamodb.New(dynamodb.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(awsemu.DynamoDB(t)),
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
		HTTPClient:  &http.Client{Transport: tr},
	})
	plain := client(t)
	table := newTable(t, plain)
	return dynamostore.New(hooked, table, dynamostore.Options{}), dynamostore.New(plain, table, dynamostore.Options{}), tr
}

// TestClaimRetriesAfterLosingThePageWrite: two senders claim from the same
// status page; the one whose conditional write loses reads the page again
// and claims other items — it neither returns an empty claim (the items
// it meant to take left pending for nothing, its counts moved for items it
// does not hold) nor takes the winner's items.
func TestClaimRetriesAfterLosingThePageWrite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, other, tr := racedPages(t)
	oneShardJob(t, s, "claimrace", 6)
	var won store.ClaimItemsResult
	tr.mu.Lock()
	tr.hook = func() {
		var err error
		if won, err = other.ClaimItems(ctx, store.ClaimItemsParams{JobID: "claimrace", Index: 0, Max: 2, Now: t0, ClaimID: "winner"}); err != nil || len(won.Items) != 2 {
			t.Errorf("the other claim: %d items, %v", len(won.Items), err)
		}
	}
	tr.mu.Unlock()
	got, err := s.ClaimItems(ctx, store.ClaimItemsParams{JobID: "claimrace", Index: 0, Max: 2, Now: t0, ClaimID: "loser"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Items) != 2 || got.Delta != (store.Counts{Pending: -2, Submitted: 2}) {
		t.Fatalf("claim after losing the page write: %d items, delta %+v; want 2 other items claimed", len(got.Items), got.Delta)
	}
	mine := map[int64]bool{}
	for _, it := range won.Items {
		mine[it.Seq] = true
	}
	for _, it := range got.Items {
		if mine[it.Seq] {
			t.Fatalf("item %d claimed by both", it.Seq)
		}
	}
	res, err := s.ListItems(ctx, store.ListItemsParams{JobID: "claimrace", Status: store.ItemSubmitted, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	claims := map[string]int{}
	for _, it := range res.Items {
		claims[it.ClaimID]++
	}
	if len(res.Items) != 4 || claims["winner"] != 2 || claims["loser"] != 2 {
		t.Fatalf("submitted items by claim %v, want 2 each", claims)
	}
}

// TestUpdateRetriesAfterLosingThePageWrite: an update of items whose page
// write loses to a concurrent claim reads the page again and applies what
// is still allowed — the items not claimed meanwhile are abandoned and
// counted, the claimed one is rejected — instead of reporting success for
// a write that never happened.
func TestUpdateRetriesAfterLosingThePageWrite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, other, tr := racedPages(t)
	oneShardJob(t, s, "updaterace", 4)
	tr.mu.Lock()
	tr.hook = func() {
		if c, err := other.ClaimItems(ctx, store.ClaimItemsParams{JobID: "updaterace", Index: 0, Max: 1, Now: t0, ClaimID: "racer"}); err != nil || len(c.Items) != 1 || c.Items[0].Seq != 0 {
			t.Errorf("the racing claim: %+v, %v", c.Items, err)
		}
	}
	tr.mu.Unlock()
	var ups []store.ItemUpdate
	for seq := range int64(4) {
		ups = append(ups, store.ItemUpdate{Seq: seq, From: store.ItemPending, To: store.ItemAbandoned, Error: &store.ItemError{Category: store.CategoryCancelled}})
	}
	res, err := s.UpdateItems(ctx, store.UpdateItemsParams{JobID: "updaterace", Index: 0, Updates: ups, At: t0})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rejected) != 1 || res.Rejected[0] != 0 || res.Delta != (store.Counts{Pending: -3, Abandoned: 3}) {
		t.Fatalf("update after losing the page write: rejected %v, delta %+v; want item 0 rejected and 3 abandoned", res.Rejected, res.Delta)
	}
	list, err := s.ListItems(ctx, store.ListItemsParams{JobID: "updaterace", Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range list.Items {
		want := store.ItemAbandoned
		if it.Seq == 0 {
			want = store.ItemSubmitted
		}
		if it.Status != want {
			t.Errorf("item %d %s, want %s", it.Seq, it.Status, want)
		}
	}
}
