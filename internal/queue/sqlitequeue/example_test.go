package sqlitequeue_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/qunfa/qunfa/internal/queue"
	"github.com/qunfa/qunfa/internal/queue/sqlitequeue"
)

// A work queue and its dead-letter queue share one file; a message of a
// shard's group is received, handled and deleted.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "sqlitequeue-example")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "queue.db")

	work, err := sqlitequeue.Open(ctx, path, sqlitequeue.Options{Name: "work", MaxReceiveCount: 5, DeadLetter: "work-dlq"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer work.Close()

	for _, turn := range []string{"turn-1", "turn-2"} {
		if _, err := work.Send(ctx, queue.SendParams{Group: "job-1/acct-a/0", DedupID: "job-1/0/" + turn, Body: []byte(turn)}); err != nil {
			fmt.Println(err)
			return
		}
	}
	for range 2 {
		msgs, err := work.Receive(ctx, queue.ReceiveParams{Max: queue.MaxReceive, VisibilityTimeout: time.Minute, Wait: time.Second})
		if err != nil {
			fmt.Println(err)
			return
		}
		for _, m := range msgs {
			fmt.Printf("%s %s (receive %d)\n", m.Group, m.Body, m.ReceiveCount)
			if err := work.Delete(ctx, m.ReceiptHandle); err != nil {
				fmt.Println(err)
			}
		}
	}
	stats, _ := work.Stats(ctx)
	fmt.Printf("left: %d visible, %d in flight\n", stats.Visible, stats.InFlight)
	// Output:
	// job-1/acct-a/0 turn-1 (receive 1)
	// job-1/acct-a/0 turn-2 (receive 1)
	// left: 0 visible, 0 in flight
}
