// Package devstack is the local runtime behind `qunfa dev`: it plays the
// parts AWS plays in production — the SQS event source that feeds the
// sender, the EventBridge schedules that fire the reconciler — around the
// very handlers the Lambda functions run.
package devstack

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/qunfa/qunfa/internal/queue"
)

// SQSHandler is the shape of an SQS-triggered Lambda handler.
type SQSHandler func(context.Context, events.SQSEvent) (events.SQSEventResponse, error)

// EventSource is the local stand-in for Lambda's SQS event source mapping:
// N workers receive messages, hand them to the handler as an SQSEvent with
// a deadline, delete the ones the handler did not report as failed and
// leave the others to the queue (their visibility decides when they return).
type EventSource struct {
	Queue   queue.Queue
	Handler SQSHandler
	Log     *slog.Logger
	// Workers is the number of concurrent handler invocations (default 4).
	Workers int
	// BatchSize is the most messages per invocation (default 1).
	BatchSize int
	// Timeout is the invocation deadline (default 60 s); the visibility
	// timeout of received messages is 6 × Timeout, as in template.yaml.
	Timeout time.Duration
	// Wait is the long-poll wait of each receive (default 1 s).
	Wait time.Duration
}

// Run feeds the handler until ctx is done, then lets invocations in hand
// finish (the handler sees its context cancelled and hands shards back).
func (e *EventSource) Run(ctx context.Context) {
	n := max(e.Workers, 1)
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.work(ctx)
		}()
	}
	wg.Wait()
}

func (e *EventSource) work(ctx context.Context) {
	timeout := e.Timeout
	if timeout <= 0 {
		timeout = 60 * time.Second
	}
	wait := e.Wait
	if wait <= 0 {
		wait = time.Second
	}
	batch := min(max(e.BatchSize, 1), queue.MaxReceive)
	for ctx.Err() == nil {
		msgs, err := e.Queue.Receive(ctx, queue.ReceiveParams{Max: batch, VisibilityTimeout: 6 * timeout, Wait: wait})
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, context.Canceled) {
				e.Log.Error("receive from work queue", slog.Any("err", err))
				sleep(ctx, time.Second)
			}
			continue
		}
		if len(msgs) == 0 {
			continue
		}
		e.invoke(ctx, msgs, timeout)
	}
}

// invoke runs one handler invocation. Its context is cancelled when ctx is
// (shutdown) or at the deadline.
func (e *EventSource) invoke(ctx context.Context, msgs []queue.Message, timeout time.Duration) {
	ev := events.SQSEvent{Records: make([]events.SQSMessage, 0, len(msgs))}
	for _, m := range msgs {
		ev.Records = append(ev.Records, events.SQSMessage{
			MessageId:     m.ID,
			ReceiptHandle: m.ReceiptHandle,
			Body:          string(m.Body),
			Attributes: map[string]string{
				"ApproximateReceiveCount": strconv.Itoa(m.ReceiveCount),
				"MessageGroupId":          m.Group,
				"MessageDeduplicationId":  m.DedupID,
				"SentTimestamp":           strconv.FormatInt(m.SentAt.UnixMilli(), 10),
			},
			EventSource: "aws:sqs",
		})
	}
	ictx, cancel := context.WithTimeout(ctx, timeout)
	resp, err := e.Handler(ictx, ev)
	cancel()
	if err != nil {
		// A whole-batch error: every message stays for redelivery.
		e.Log.Error("sender invocation failed", slog.Any("err", err))
		return
	}
	failed := map[string]bool{}
	for _, f := range resp.BatchItemFailures {
		failed[f.ItemIdentifier] = true
	}
	dctx := context.WithoutCancel(ctx)
	for _, m := range msgs {
		if failed[m.ID] {
			continue
		}
		if err := e.Queue.Delete(dctx, m.ReceiptHandle); err != nil && !errors.Is(err, queue.ErrNotFound) {
			e.Log.Error("delete work message", slog.String("message", m.ID), slog.Any("err", err))
		}
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
