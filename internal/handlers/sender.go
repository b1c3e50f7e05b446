// Package handlers holds the Lambda-shaped entry points of qunfa: each takes
// the aws-lambda-go event type of its trigger and calls the core. The Lambda
// functions (functions/*) and the local runtime (qunfa dev) run exactly these
// handlers, so the local stack exercises the production code path.
package handlers

import (
	"context"
	"log/slog"
	"strconv"

	"github.com/aws/aws-lambda-go/events"

	"github.com/qunfa/qunfa/internal/sender"
)

// Sender handles a batch of work-queue messages (one shard turn each) from
// an SQS FIFO event source. It reports partial batch failures the FIFO way:
// at the first message that is not done (handed back with a delay, or
// failed), that message and every later one of the batch are returned as
// failures, so the queue keeps them in order.
func Sender(s *sender.Sender, log *slog.Logger) func(context.Context, events.SQSEvent) (events.SQSEventResponse, error) {
	return func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		var resp events.SQSEventResponse
		for i, rec := range ev.Records {
			if ctx.Err() != nil {
				return failFrom(ctx, s, resp, ev.Records[i:], true), nil
			}
			rc, _ := strconv.Atoi(rec.Attributes["ApproximateReceiveCount"])
			res, err := s.HandleTurn(ctx, sender.Message{
				ID: rec.MessageId, Body: []byte(rec.Body), ReceiptHandle: rec.ReceiptHandle, ReceiveCount: rc,
			})
			if err != nil {
				log.Error("shard turn failed; the queue will retry it", slog.String("message", rec.MessageId), slog.Any("err", err))
				return failFrom(ctx, s, resp, ev.Records[i:], false), nil
			}
			if res.Disposition == sender.HandedBack {
				return failFrom(ctx, s, resp, ev.Records[i:], false), nil
			}
		}
		return resp, nil
	}
}

// failFrom reports recs as failures. Records after the first were not
// worked at all: they are made visible again at once (best effort) instead
// of waiting out the queue's long visibility timeout.
func failFrom(ctx context.Context, s *sender.Sender, resp events.SQSEventResponse, recs []events.SQSMessage, includeFirst bool) events.SQSEventResponse {
	for i, r := range recs {
		resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: r.MessageId})
		if (i > 0 || includeFirst) && r.ReceiptHandle != "" {
			_ = s.Queue.ChangeVisibility(context.WithoutCancel(ctx), r.ReceiptHandle, 0)
		}
	}
	return resp
}
