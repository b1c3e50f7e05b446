// Package dispatch hands a shard's turn to the work queue. One queue message
// is one turn of one shard; its FIFO group is the shard, so a shard is never
// worked by two senders at once, and its deduplication id is the turn, so
// the same turn enqueued twice (a continuation and a redrive, a submit
// retried) runs once. The store's turn fencing (BeginTurn) drops what the
// queue's five-minute dedup window does not.
package dispatch

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/qunfa/qunfa/internal/queue"
)

// Turn is the body of a work-queue message.
type Turn struct {
	JobID string `json:"job"`
	Shard int    `json:"shard"`
	Turn  int64  `json:"turn"`
}

// Group is the FIFO group of a shard: account + shard number, scoped by job.
func Group(jobID string, shard int) string {
	return jobID + "-" + strconv.Itoa(shard)
}

// DedupID identifies one turn of one shard.
func DedupID(jobID string, shard int, turn int64) string {
	return jobID + "-" + strconv.Itoa(shard) + "-" + strconv.FormatInt(turn, 10)
}

// Send enqueues turn t.
func Send(ctx context.Context, q queue.Queue, t Turn) error {
	body, err := json.Marshal(t)
	if err != nil {
		return err
	}
	_, err = q.Send(ctx, queue.SendParams{
		Group:   Group(t.JobID, t.Shard),
		DedupID: DedupID(t.JobID, t.Shard, t.Turn),
		Body:    body,
	})
	if err != nil {
		return fmt.Errorf("enqueue turn %d of shard %s/%d: %w", t.Turn, t.JobID, t.Shard, err)
	}
	return nil
}

// Decode parses a work-queue message body.
func Decode(body []byte) (Turn, error) {
	var t Turn
	if err := json.Unmarshal(body, &t); err != nil {
		return Turn{}, fmt.Errorf("decode turn: %w", err)
	}
	if t.JobID == "" || t.Shard < 0 || t.Turn < 1 {
		return Turn{}, fmt.Errorf("decode turn: incomplete message %q", body)
	}
	return t, nil
}
