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

// TestFormerBreakerHistoryIsDeleted: the BRKHIST# records earlier versions
// kept a breaker's history in stay while they are the history, and are
// deleted by the first save after a transition moved them into the
// breaker record, or by a later save if that sweep fails; another
// account whose name extends this one's keeps its records; once swept,
// and for a breaker created since, a save is one write again.
func TestFormerBreakerHistoryIsDeleted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tr := &failNthWrite{next: http.DefaultTransport}
	hooked := dynamodb.New(dynamodb.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(awsemu.DynamoDB(t)),
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
		HTTPClient:  &http.Client{Transport: tr}, RetryMaxAttempts: 1,
	})
	s := dynamostore.New(hooked, newTable(t, client(t)), dynamostore.Options{})
	at := time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)
	cycle := []store.BreakerTransition{
		{From: store.BreakerClosed, To: store.BreakerOpen, At: at, Reason: "5 failed sends in a row", Opens: 1},
		{From: store.BreakerOpen, To: store.BreakerHalfOpen, At: at.Add(time.Minute), Opens: 1},
		{From: store.BreakerHalfOpen, To: store.BreakerClosed, At: at.Add(2 * time.Minute), Reason: "probe succeeded", Opens: 1},
	}
	for acct, n := range map[string]int{"a": 3, "a#b": 2} {
		if err := s.PutLegacyBreakerForTest(ctx, store.Breaker{Tenant: "t", Account: acct, State: store.BreakerClosed, Opens: 1, Version: int64(n)}, cycle[:n]); err != nil {
			t.Fatal(err)
		}
	}
	ring := func(acct string) int {
		t.Helper()
		n, err := s.LegacyBreakerHistoryForTest(ctx, "t", acct)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	history := func(acct string) int {
		t.Helper()
		h, err := s.ListBreakerHistory(ctx, "t", acct)
		if err != nil {
			t.Fatal(err)
		}
		return len(h)
	}
	// save saves account's breaker (with a transition to open, or a new
	// window), failing its nth write (0: none), and returns its writes.
	save := func(acct string, transition bool, nth int) int {
		t.Helper()
		b, err := s.GetBreaker(ctx, "t", acct)
		if err != nil {
			t.Fatal(err)
		}
		at = at.Add(time.Minute)
		b.WindowAt, b.UpdatedAt = at, at
		if transition {
			b.State, b.Opens = store.BreakerOpen, b.Opens+1
			b.Transition = &store.BreakerTransition{From: store.BreakerClosed, To: store.BreakerOpen, At: at, Reason: "failure rate", Opens: b.Opens}
		}
		tr.mu.Lock()
		tr.armed, tr.writes, tr.nth = true, 0, nth
		tr.mu.Unlock()
		_, err = s.SaveBreaker(ctx, b)
		tr.mu.Lock()
		tr.armed = false
		writes := tr.writes
		tr.mu.Unlock()
		if err != nil {
			t.Fatalf("save of %s (transition %v, failing write %d): %v", acct, transition, nth, err)
		}
		return writes
	}
	save("a", false, 0)
	if n, h := ring("a"), history("a"); n != 3 || h != 3 {
		t.Fatalf("after a window save: %d former records, %d history entries; want 3 and 3 (they are the history)", n, h)
	}
	save("a", true, 2) // the sweep's BatchWriteItem fails; the save stands
	if n, h := ring("a"), history("a"); n != 3 || h != 4 {
		t.Fatalf("after a transition whose sweep failed: %d former records, %d history entries; want 3 and 4", n, h)
	}
	save("a", false, 0)
	if n, h := ring("a"), history("a"); n != 0 || h != 4 {
		t.Fatalf("after the next save: %d former records, %d history entries; want 0 and 4", n, h)
	}
	if n, h := ring("a#b"), history("a#b"); n != 2 || h != 2 {
		t.Fatalf("account a#b: %d former records, %d history entries; want 2 and 2 (not a's)", n, h)
	}
	if w := save("a", false, 0); w != 1 {
		t.Fatalf("a save after the sweep made %d writes, want 1", w)
	}
	if w := save("c", true, 0); w != 1 || history("c") != 1 {
		t.Fatalf("a new breaker's transition made %d writes, want 1 (nothing to sweep)", w)
	}
}
