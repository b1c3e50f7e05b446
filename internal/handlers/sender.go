// Package handlers holds the Lambda-shaped entry points of qunfa: each takes
// the aws-lambda-go event type of its trigger and calls the core. The Lambda
// functions (functions/*) and the local runtime (qunfa dev) run exactly these
// handlers, so the local stack exercises the production code path.
package handlers

import (
	"context"
	"log/slog"
	"strconv"
	"sync"

	"github.com/aws/aws-lambda-go/events"

	"github.com/qunfa/qunfa/internal/dispatch"
	"github.com/qunfa/qunfa/internal/sender"
)

// Sender handles a batch of work-queue messages (one shard turn each) from
// an SQS FIFO event source. The batch's FIFO groups (shards) are worked
// concurrently, each group's messages in order, so one invocation keeps
// several shards sending while each waits for its own tokens. Partial batch
// failures are reported per group, the FIFO way: at a group's first message
// that is not done (handed back with a delay, or failed), that message and
// the group's later ones are returned as failures, so the queue keeps each
// group in order; the other groups' messages are done.
func Sender(s *sender.Sender, log *slog.Logger) func(context.Context, events.SQSEvent) (events.SQSEventResponse, error) {
	return Work(s, nil, log)
}

// Planner plans staged jobs (submit.Submitter.Plan).
type Planner interface {
	Plan(ctx context.Context, jobID string) error
}

// Work is Sender that also runs the planning messages of staged jobs
// (dispatch.Plan) with p, on the same work queue: one planning step per
// message, the next step enqueued by the step itself.
func Work(s *sender.Sender, p Planner, log *slog.Logger) func(context.Context, events.SQSEvent) (events.SQSEventResponse, error) {
	return func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		groups := groupRecords(ev.Records)
		failures := make([][]events.SQSBatchItemFailure, len(groups))
		var wg sync.WaitGroup
		for gi, recs := range groups {
			wg.Go(func() { failures[gi] = senderGroup(ctx, s, p, log, recs) })
		}
		wg.Wait()
		var resp events.SQSEventResponse
		for _, f := range failures {
			resp.BatchItemFailures = append(resp.BatchItemFailures, f...)
		}
		return resp, nil
	}
}

// groupRecords splits a batch by MessageGroupId, keeping the order of the
// batch within each group (records without one form one group).
func groupRecords(recs []events.SQSMessage) [][]events.SQSMessage {
	index := map[string]int{}
	var groups [][]events.SQSMessage
	for _, r := range recs {
		g := r.Attributes["MessageGroupId"]
		i, ok := index[g]
		if !ok {
			i = len(groups)
			index[g] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], r)
	}
	return groups
}

// senderGroup works one group's messages in order and returns its failures.
func senderGroup(ctx context.Context, s *sender.Sender, p Planner, log *slog.Logger, recs []events.SQSMessage) []events.SQSBatchItemFailure {
	for i, rec := range recs {
		if ctx.Err() != nil {
			return failFrom(ctx, s, recs[i:], true)
		}
		if job, ok := dispatch.DecodePlan([]byte(rec.Body)); ok && p != nil {
			if err := p.Plan(ctx, job); err != nil {
				log.Error("planning step failed; the queue will retry it", slog.String("job", job), slog.Any("err", err))
				return failFrom(ctx, s, recs[i:], false)
			}
			continue
		}
		rc, _ := strconv.Atoi(rec.Attributes["ApproximateReceiveCount"])
		res, err := s.HandleTurn(ctx, sender.Message{
			ID: rec.MessageId, Body: []byte(rec.Body), ReceiptHandle: rec.ReceiptHandle, ReceiveCount: rc,
		})
		if err != nil {
			log.Error("shard turn failed; the queue will retry it", slog.String("message", rec.MessageId), slog.Any("err", err))
			return failFrom(ctx, s, recs[i:], false)
		}
		if res.Disposition == sender.HandedBack {
			return failFrom(ctx, s, recs[i:], false)
		}
	}
	return nil
}

// failFrom reports recs as failures. Records after the first were not
// worked at all: they are made visible again at once (best effort) instead
// of waiting out the queue's long visibility timeout.
func failFrom(ctx context.Context, s *sender.Sender, recs []events.SQSMessage, includeFirst bool) []events.SQSBatchItemFailure {
	var out []events.SQSBatchItemFailure
	for i, r := range recs {
		out = append(out, events.SQSBatchItemFailure{ItemIdentifier: r.MessageId})
		if (i > 0 || includeFirst) && r.ReceiptHandle != "" {
			_ = s.Queue.ChangeVisibility(context.WithoutCancel(ctx), r.ReceiptHandle, 0)
		}
	}
	return out
}
