package alert_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/qunfa/qunfa/internal/alert"
)

// seqs lists the Seq of entries, and checks each entry carries the event
// published with that number (tenant "t<seq>").
func seqs(t *testing.T, entries []alert.FeedEntry) []uint64 {
	t.Helper()
	out := []uint64{}
	for _, e := range entries {
		if want := fmt.Sprint("t", e.Seq); e.Event.Tenant != want {
			t.Errorf("entry %d holds event of tenant %q, want %q", e.Seq, e.Event.Tenant, want)
		}
		out = append(out, e.Seq)
	}
	return out
}

func numbered(from, n int) []alert.Event {
	events := make([]alert.Event, n)
	for i := range events {
		events[i] = alert.Event{Type: alert.JobStarted, Tenant: fmt.Sprint("t", from+i)}
	}
	return events
}

func TestFeedRecentAndSince(t *testing.T) {
	tests := []struct {
		name      string
		capacity  int
		published int
		recent    int
		since     uint64
		wantLast  uint64
		wantRec   []uint64
		wantSince []uint64
	}{
		{"empty", 4, 0, 3, 0, 0, []uint64{}, []uint64{}},
		{"fewer than capacity", 4, 3, 10, 0, 3, []uint64{1, 2, 3}, []uint64{1, 2, 3}},
		{"recent n smaller", 4, 3, 2, 1, 3, []uint64{2, 3}, []uint64{2, 3}},
		{"recent zero", 4, 3, 0, 3, 3, []uint64{}, []uint64{}},
		{"wrapped ring keeps newest", 4, 10, 10, 0, 10, []uint64{7, 8, 9, 10}, []uint64{7, 8, 9, 10}},
		{"since inside ring", 4, 10, 2, 8, 10, []uint64{9, 10}, []uint64{9, 10}},
		{"since behind ring shows gap", 4, 10, 4, 3, 10, []uint64{7, 8, 9, 10}, []uint64{7, 8, 9, 10}},
		{"since ahead", 4, 10, 1, 12, 10, []uint64{10}, []uint64{}},
		{"capacity below one is one", 0, 3, 5, 0, 3, []uint64{3}, []uint64{3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := alert.NewFeed(tt.capacity)
			// Publish one by one and in a batch, which must not differ.
			half := tt.published / 2
			for _, e := range numbered(1, half) {
				if err := f.Publish(t.Context(), e); err != nil {
					t.Fatal(err)
				}
			}
			if err := f.Publish(t.Context(), numbered(half+1, tt.published-half)...); err != nil {
				t.Fatal(err)
			}
			if got := f.Last(); got != tt.wantLast {
				t.Errorf("Last = %d, want %d", got, tt.wantLast)
			}
			if got := seqs(t, f.Recent(tt.recent)); fmt.Sprint(got) != fmt.Sprint(tt.wantRec) {
				t.Errorf("Recent(%d) = %v, want %v", tt.recent, got, tt.wantRec)
			}
			if got := seqs(t, f.Since(tt.since)); fmt.Sprint(got) != fmt.Sprint(tt.wantSince) {
				t.Errorf("Since(%d) = %v, want %v", tt.since, got, tt.wantSince)
			}
		})
	}
}

func TestFeedWaitReturnsAvailableAtOnce(t *testing.T) {
	f := alert.NewFeed(8)
	_ = f.Publish(t.Context(), numbered(1, 3)...)
	got, err := f.Wait(t.Context(), 1)
	if err != nil || fmt.Sprint(seqs(t, got)) != "[2 3]" {
		t.Fatalf("Wait(1) = %v, %v; want [2 3]", seqs(t, got), err)
	}
}

func TestFeedWaitWakesOnPublish(t *testing.T) {
	f := alert.NewFeed(8)
	_ = f.Publish(t.Context(), numbered(1, 2)...)
	type result struct {
		entries []alert.FeedEntry
		err     error
	}
	const waiters = 3
	results := make(chan result, waiters)
	for range waiters {
		go func() {
			entries, err := f.Wait(t.Context(), 2)
			results <- result{entries, err}
		}()
	}
	select {
	case r := <-results:
		t.Fatalf("Wait returned %v, %v before anything new was published", r.entries, r.err)
	default:
	}
	_ = f.Publish(t.Context(), numbered(3, 1)...)
	for range waiters {
		r := <-results
		if r.err != nil || fmt.Sprint(seqs(t, r.entries)) != "[3]" {
			t.Errorf("Wait(2) = %v, %v; want [3]", r.entries, r.err)
		}
	}
}

func TestFeedWaitEndsWithContext(t *testing.T) {
	f := alert.NewFeed(8)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := f.Wait(ctx, 0)
		done <- err
	}()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Wait after cancel: %v, want context.Canceled", err)
	}
}

// TestFeedConcurrentReaders runs publishers and waiting readers together
// (meant for -race): every reader sees every Seq once, in order.
func TestFeedConcurrentReaders(t *testing.T) {
	const publishers, perPublisher, readers = 4, 50, 3
	total := uint64(publishers * perPublisher)
	f := alert.NewFeed(int(total)) // large enough that nothing falls out
	var wg sync.WaitGroup
	for r := range readers {
		wg.Go(func() {
			var seen uint64
			for seen < total {
				entries, err := f.Wait(t.Context(), seen)
				if err != nil {
					t.Errorf("reader %d: %v", r, err)
					return
				}
				for _, e := range entries {
					if e.Seq != seen+1 {
						t.Errorf("reader %d got seq %d after %d", r, e.Seq, seen)
						return
					}
					seen = e.Seq
				}
			}
		})
	}
	for range publishers {
		wg.Go(func() {
			for range perPublisher {
				_ = f.Publish(t.Context(), alert.Event{Type: alert.JobStarted})
			}
		})
	}
	wg.Wait()
	if f.Last() != total {
		t.Errorf("Last = %d, want %d", f.Last(), total)
	}
}
