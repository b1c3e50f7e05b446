package dynamostore_test

import (
	"context"
	"errors"
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

// failNthWrite is an HTTP transport that fails the nth write request
// (PutItem, UpdateItem, BatchWriteItem) after it is armed: a process that
// dies or loses the network between two writes.
type failNthWrite struct {
	next   http.RoundTripper
	mu     sync.Mutex
	armed  bool
	writes int
	nth    int
}

func (f *failNthWrite) RoundTrip(r *http.Request) (*http.Response, error) {
	target := r.Header.Get("X-Amz-Target")
	f.mu.Lock()
	fail := false
	if f.armed && (strings.HasSuffix(target, ".PutItem") || strings.HasSuffix(target, ".UpdateItem") || strings.HasSuffix(target, ".BatchWriteItem")) {
		f.writes++
		fail = f.writes == f.nth
	}
	f.mu.Unlock()
	if fail {
		return nil, errors.New("injected: connection lost")
	}
	return f.next.RoundTrip(r)
}

// TestBreakerTransitionIsAtomic: whichever write of a save with a
// transition fails, the breaker and its history agree afterwards: the
// transition counted and recorded, or neither.
func TestBreakerTransitionIsAtomic(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for nth := 1; nth <= 3; nth++ {
		tr := &failNthWrite{next: http.DefaultTransport, nth: nth}
		hooked := dynamodb.New(dynamodb.Options{
			Region: "us-east-1", BaseEndpoint: aws.String(awsemu.DynamoDB(t)),
			Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
			HTTPClient:  &http.Client{Transport: tr}, RetryMaxAttempts: 1,
		})
		s := dynamostore.New(hooked, newTable(t, client(t)), dynamostore.Options{})
		at := time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)
		b, err := s.GetBreaker(ctx, "t", "a")
		if err != nil {
			t.Fatal(err)
		}
		b.State, b.UpdatedAt = store.BreakerOpen, at
		b.Transition = &store.BreakerTransition{From: store.BreakerClosed, To: store.BreakerOpen, At: at, Reason: "5 failed sends in a row"}
		tr.mu.Lock()
		tr.armed = true
		tr.mu.Unlock()
		_, saveErr := s.SaveBreaker(ctx, b)
		tr.mu.Lock()
		tr.armed = false
		tr.mu.Unlock()
		got, err := s.GetBreaker(ctx, "t", "a")
		if err != nil {
			t.Fatal(err)
		}
		h, err := s.ListBreakerHistory(ctx, "t", "a")
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(h)) != got.Transitions || (saveErr == nil) != (got.Transitions == 1) {
			t.Errorf("write %d failed (save error %v): breaker %s with %d transitions, %d history entries; want both or neither",
				nth, saveErr, got.State, got.Transitions, len(h))
		}
	}
}
