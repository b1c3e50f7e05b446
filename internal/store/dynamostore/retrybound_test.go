package dynamostore_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/qunfa/qunfa/internal/awsemu"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/store/dynamostore"
)

// contendedPages returns a store with MaxRetries retries whose next `lose`
// status-page writes each lose to a claim of one item by another store
// on the same table, and that other store.
func contendedPages(t *testing.T, maxRetries, lose int, jobID string) (*dynamostore.Store, *dynamostore.Store) {
	t.Helper()
	tr := &beforePut{next: http.DefaultTransport}
	hooked := dynamodb.New(dynamodb.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(awsemu.DynamoDB(t)),
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
		HTTPClient:  &http.Client{Transport: tr},
	})
	plain := client(t)
	table := newTable(t, plain)
	s := dynamostore.New(hooked, table, dynamostore.Options{MaxRetries: maxRetries})
	other := dynamostore.New(plain, table, dynamostore.Options{})
	oneShardJob(t, other, jobID, 20)
	n := 0
	var race func()
	arm := func() {
		tr.mu.Lock()
		tr.hook = race
		tr.mu.Unlock()
	}
	race = func() { // runs outside tr.mu, once per arming
		n++
		c, err := other.ClaimItems(context.Background(), store.ClaimItemsParams{JobID: jobID, Index: 0, Max: 1, Now: t0, ClaimID: fmt.Sprint("racer-", n)})
		if err != nil || len(c.Items) != 1 {
			t.Errorf("racing claim %d: %d items, %v", n, len(c.Items), err)
		}
		if n < lose {
			arm()
		}
	}
	arm()
	return s, other
}

// TestWritesGiveUpAfterMaxRetries: a claim or an update whose status page
// write loses MaxRetries races in a row gives up with ErrConflict (a sender
// under contention ends its batch instead of spinning), and one that loses
// one race fewer succeeds.
func TestWritesGiveUpAfterMaxRetries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const maxRetries = 3
	for _, tc := range []struct {
		name string
		lose int
		ok   bool
	}{{"loses every try", maxRetries, false}, {"wins the last try", maxRetries - 1, true}} {
		s, _ := contendedPages(t, maxRetries, tc.lose, "claim-"+fmt.Sprint(tc.lose))
		c, err := s.ClaimItems(ctx, store.ClaimItemsParams{JobID: "claim-" + fmt.Sprint(tc.lose), Index: 0, Max: 2, Now: t0, ClaimID: "loser"})
		if tc.ok && (err != nil || len(c.Items) != 2) {
			t.Errorf("claim that %s: %d items, %v; want 2 items", tc.name, len(c.Items), err)
		}
		if !tc.ok && (!errors.Is(err, store.ErrConflict) || len(c.Items) != 0) {
			t.Errorf("claim that %s: %d items, %v; want ErrConflict", tc.name, len(c.Items), err)
		}

		s, _ = contendedPages(t, maxRetries, tc.lose, "update-"+fmt.Sprint(tc.lose))
		res, err := s.UpdateItems(ctx, store.UpdateItemsParams{JobID: "update-" + fmt.Sprint(tc.lose), Index: 0, At: t0, Updates: []store.ItemUpdate{
			{Seq: 19, From: store.ItemPending, To: store.ItemAbandoned, Error: &store.ItemError{Category: store.CategoryCancelled}},
		}})
		if tc.ok && (err != nil || res.Delta != (store.Counts{Pending: -1, Abandoned: 1})) {
			t.Errorf("update that %s: %+v, %v; want item 19 abandoned", tc.name, res, err)
		}
		if !tc.ok && !errors.Is(err, store.ErrConflict) {
			t.Errorf("update that %s: %+v, %v; want ErrConflict", tc.name, res, err)
		}
	}
}
