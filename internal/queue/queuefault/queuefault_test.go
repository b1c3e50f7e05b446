package queuefault_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/queue"
	"github.com/qunfa/qunfa/internal/queue/queuefault"
	"github.com/qunfa/qunfa/internal/queue/sqlitequeue"
)

// TestDuplicatesAndExpiries: with faults on, some messages come twice in
// one receive and some come back at the next receive although their
// visibility had not run out; after Heal neither happens.
func TestDuplicatesAndExpiries(t *testing.T) {
	ctx := context.Background()
	raw, err := sqlitequeue.Open(ctx, filepath.Join(t.TempDir(), "q.db"), sqlitequeue.Options{Name: "w", DeadLetter: "d", MaxReceiveCount: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	q := queuefault.New(raw, queuefault.Config{Seed: 3, DuplicateRatio: 0.3, ExpireRatio: 0.3})
	for i := range 20 {
		if _, err := q.Send(ctx, queue.SendParams{Group: fmt.Sprint("g", i), DedupID: fmt.Sprint("d", i), Body: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := q.Receive(ctx, queue.ReceiveParams{Max: 10, VisibilityTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	inj := q.Injected()
	if len(got) != 10+inj["duplicate"] || inj["duplicate"] == 0 || inj["expire"] == 0 {
		t.Fatalf("received %d with %v injected", len(got), inj)
	}
	q.Heal()
	again, err := q.Receive(ctx, queue.ReceiveParams{Max: 10, VisibilityTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	back := 0
	for _, m := range again {
		for _, g := range got {
			if m.ID == g.ID {
				back++
				break
			}
		}
	}
	if back != inj["expire"] {
		t.Fatalf("%d messages came back early, want the %d expired", back, inj["expire"])
	}
}
