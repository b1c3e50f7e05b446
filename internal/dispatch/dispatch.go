// Package dispatch hands a shard's turn to the work queue. One queue message
// is one turn of one shard; its FIFO group is the shard, so a shard is never
// worked by two senders at once, and its deduplication id is the turn, so
// the same turn enqueued twice (a continuation and a redrive, a submit
// retried) runs once. The store's turn fencing (BeginTurn) drops what the
// queue's five-minute dedup window does not.
package dispatch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
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

// SendTurns enqueues every turn of ts, several to a request where the
// queue sends batches (queue.BatchSender; SQS: ten per SendMessageBatch),
// one Send each otherwise. Each turn keeps its group and deduplication id,
// so a batch changes nothing of the FIFO rules. The turns not sent are
// all in the error (errors.Join); the others are sent all the same.
func SendTurns(ctx context.Context, q queue.Queue, ts []Turn) error {
	bs, ok := q.(queue.BatchSender)
	if !ok || len(ts) < 2 {
		var errs []error
		for _, t := range ts {
			if err := Send(ctx, q, t); err != nil {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	}
	params := make([]queue.SendParams, len(ts))
	for i, t := range ts {
		body, err := json.Marshal(t)
		if err != nil {
			return err
		}
		params[i] = queue.SendParams{Group: Group(t.JobID, t.Shard), DedupID: DedupID(t.JobID, t.Shard, t.Turn), Body: body}
	}
	results, err := bs.SendBatch(ctx, params)
	if err != nil {
		return fmt.Errorf("enqueue %d turns: %w", len(ts), err)
	}
	var errs []error
	for i, r := range results {
		if r.Err != nil {
			errs = append(errs, fmt.Errorf("enqueue turn %d of shard %s/%d: %w", ts[i].Turn, ts[i].JobID, ts[i].Shard, r.Err))
		}
	}
	return errors.Join(errs...)
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

// Plan is the body of a planning message: plan the next step of a starting
// job (submit.Submitter.Plan). Its FIFO group is the job's planning, so
// one job is planned by one worker at a time; its deduplication id names
// the checkpoint version it follows.
type Plan struct {
	JobID string `json:"plan"`
}

// PlanGroup is the FIFO group of a job's planning.
func PlanGroup(jobID string) string { return "plan-" + jobID }

// SendPlan enqueues the planning step that follows checkpoint version.
func SendPlan(ctx context.Context, q queue.Queue, jobID string, version int64) error {
	body, err := json.Marshal(Plan{JobID: jobID})
	if err != nil {
		return err
	}
	if _, err := q.Send(ctx, queue.SendParams{
		Group: PlanGroup(jobID), DedupID: PlanGroup(jobID) + "-" + strconv.FormatInt(version, 10), Body: body,
	}); err != nil {
		return fmt.Errorf("enqueue planning of job %s: %w", jobID, err)
	}
	return nil
}

// DecodePlan reports whether a work-queue message is a planning message,
// and of which job.
func DecodePlan(body []byte) (string, bool) {
	if !bytes.Contains(body, []byte(`"plan"`)) {
		return "", false
	}
	var p Plan
	if err := json.Unmarshal(body, &p); err != nil || p.JobID == "" {
		return "", false
	}
	return p.JobID, true
}
