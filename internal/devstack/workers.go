// Package devstack is the local runtime behind `qunfa dev`: it plays the
// parts AWS plays in production — the SQS event source that feeds the
// sender, the EventBridge schedules that fire the reconciler — around the
// very handlers the Lambda functions run.
package devstack

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"golang.org/x/sync/semaphore"

	"github.com/qunfa/qunfa/internal/queue"
)

// SQSHandler is the shape of an SQS-triggered Lambda handler.
type SQSHandler func(context.Context, events.SQSEvent) (events.SQSEventResponse, error)

// EventSource is the local stand-in for Lambda's SQS event source mapping:
// it receives batches of messages, hands each batch to the handler as an
// SQSEvent with a deadline (several invocations at once), deletes the
// messages the handler did not report as failed and leaves the others to
// the queue (their visibility decides when they return).
//
// An invocation that waits — a shard waiting for its account's next tokens
// — is a parked goroutine, not a busy worker: the number of invocations in
// hand is bounded by Workers, which is large by default, so every active
// shard can be in hand at once and the aggregate rate reaches the sum of
// the accounts' rates.
type EventSource struct {
	Queue   queue.Queue
	Handler SQSHandler
	Log     *slog.Logger
	// Workers × BatchSize is the most messages (shard turns) in hand at
	// once (Workers defaults to DefaultInvocations).
	Workers int
	// BatchSize is the most messages per invocation (default 10, as the
	// sender's SQS event source); the handler works their groups
	// concurrently.
	BatchSize int
	// Pollers is the number of receive loops (default 2).
	Pollers int
	// Timeout is the invocation deadline (default 60 s); the visibility
	// timeout of received messages is 6 × Timeout, as in template.yaml.
	Timeout time.Duration
	// Wait is the long-poll wait of each receive (default 1 s).
	Wait time.Duration
	// Held, when set, is Queue wrapped to renew the visibility of the
	// messages in hand: they are received with Visibility, renewed every
	// third of it while their invocation runs, and released when the
	// handler deletes or hands back each (or the invocation ends).
	Held *HeldMessages
	// Visibility is the visibility of received messages with Held.
	Visibility time.Duration
}

// DefaultInvocations is the default bound on invocations in hand: with the
// default batch of 10, room for a few thousand shards at once.
const DefaultInvocations = 256

// Run feeds the handler until ctx is done, then lets invocations in hand
// finish (the handler sees its context cancelled and hands shards back).
//
// Messages in hand, not invocations, are what is bounded (Workers ×
// BatchSize): a submission enqueues its shards one by one, so pollers often
// receive batches of one or two, and a bound on invocations would leave
// most of the room unused while those few shards wait for their tokens.
func (e *EventSource) Run(ctx context.Context) {
	batch := min(cmp.Or(max(e.BatchSize, 0), 10), queue.MaxReceive)
	room := semaphore.NewWeighted(int64(cmp.Or(max(e.Workers, 0), DefaultInvocations) * batch))
	var invocations, pollers sync.WaitGroup
	for range cmp.Or(max(e.Pollers, 0), 2) {
		pollers.Go(func() { e.poll(ctx, room, batch, &invocations) })
	}
	pollers.Wait()
	invocations.Wait()
}

// poll receives a batch whenever there is room for one and starts an
// invocation for it.
func (e *EventSource) poll(ctx context.Context, room *semaphore.Weighted, batch int, invocations *sync.WaitGroup) {
	timeout := cmp.Or(e.Timeout, 60*time.Second)
	wait := cmp.Or(e.Wait, time.Second)
	for ctx.Err() == nil {
		if err := room.Acquire(ctx, int64(batch)); err != nil {
			return
		}
		visibility := 6 * timeout
		if e.Held != nil {
			visibility = e.Visibility
		}
		msgs, err := e.Queue.Receive(ctx, queue.ReceiveParams{Max: batch, VisibilityTimeout: visibility, Wait: wait})
		room.Release(int64(batch - len(msgs)))
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
		invocations.Go(func() {
			defer room.Release(int64(len(msgs)))
			e.invoke(ctx, msgs, timeout)
		})
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
	if e.Held != nil {
		stop := e.keepHeld(ctx, msgs)
		defer stop()
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
		if e.Held != nil {
			e.Held.release(m.ReceiptHandle)
		}
		if err := e.Queue.Delete(dctx, m.ReceiptHandle); err != nil && !errors.Is(err, queue.ErrNotFound) {
			e.Log.Error("delete work message", slog.String("message", m.ID), slog.Any("err", err))
		}
	}
}

// keepHeld renews the visibility of msgs every third of e.Visibility until
// the returned stop is called; stop ends the renewal of any message still
// held (failed ones keep the visibility last set and come back then).
func (e *EventSource) keepHeld(ctx context.Context, msgs []queue.Message) (stop func()) {
	handles := make([]string, len(msgs))
	for i, m := range msgs {
		handles[i] = m.ReceiptHandle
	}
	e.Held.hold(handles)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(e.Visibility / 3)
		defer t.Stop()
		rctx := context.WithoutCancel(ctx)
		for {
			select {
			case <-done:
				return
			case <-t.C:
				e.Held.renew(rctx, handles, e.Visibility, e.Log)
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
		for _, h := range handles {
			e.Held.release(h)
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
