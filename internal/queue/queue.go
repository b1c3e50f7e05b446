// Package queue is the work-queue port: a FIFO queue with message groups,
// visibility timeouts, deduplication and a dead-letter queue, with the
// semantics of SQS FIFO. Adapters (sqlitequeue, sqsqueue) prove them with
// the shared conformance suite in queuetest.
//
// FIFO rules every adapter keeps:
//   - messages of one group are delivered in the order they were sent;
//   - while a message of a group is in flight (received, not yet deleted,
//     visibility not expired), no other message of that group is delivered;
//   - a message sent with a deduplication id already seen in the last
//     DedupWindow is accepted but dropped;
//   - a message received more than MaxReceiveCount times moves to the
//     dead-letter queue instead of being delivered again.
package queue

import (
	"context"
	"errors"
	"time"
)

// DedupWindow is how long a deduplication id is remembered.
const DedupWindow = 5 * time.Minute

// Sentinel errors.
var (
	// ErrNotFound: the receipt handle is unknown or no longer valid (the
	// message was deleted, or its visibility expired and it was received
	// again).
	ErrNotFound = errors.New("queue: not found")
	// ErrInvalidArgument: malformed parameters (empty group or dedup id,
	// too many messages, timeout out of range).
	ErrInvalidArgument = errors.New("queue: invalid argument")
)

// MaxReceive is the largest batch Receive returns (as SQS).
const MaxReceive = 10

// Parameter limits every adapter enforces with ErrInvalidArgument, so the
// embedded queue refuses exactly what SQS FIFO refuses.
const (
	// MaxIDLength bounds a group or deduplication id (SQS: 128 characters
	// of alphanumerics and ASCII punctuation, '!' to '~'; no spaces).
	MaxIDLength = 128
	// MaxBodyBytes bounds a message body (SQS: 256 KiB). A body must not
	// be empty, and must be UTF-8 text in the SQS character set (#x9, #xA,
	// #xD, #x20-#xD7FF, #xE000-#xFFFD, #x10000-#x10FFFF): SQS refuses other
	// bytes, and the Lambda event source hands bodies over as strings.
	MaxBodyBytes = 256 << 10
	// MaxVisibilityTimeout bounds a visibility timeout (SQS: 12 hours).
	MaxVisibilityTimeout = 12 * time.Hour
	// MaxWait bounds a Receive long poll (SQS: 20 seconds).
	MaxWait = 20 * time.Second
)

// Queue is the work-queue port. Safe for concurrent use.
type Queue interface {
	// Send appends a message to a group. A duplicate dedup id within
	// DedupWindow is dropped without error (Duplicate reports it where the
	// backend says so; SQS does not).
	Send(ctx context.Context, p SendParams) (SendResult, error)
	// Receive returns up to p.Max available messages, each made invisible
	// for p.VisibilityTimeout. It waits up to p.Wait for one to arrive.
	Receive(ctx context.Context, p ReceiveParams) ([]Message, error)
	// Delete removes a received message.
	Delete(ctx context.Context, receiptHandle string) error
	// ChangeVisibility makes a received message visible again after d
	// (0 = now; at most MaxVisibilityTimeout), keeping its group locked
	// until then. The receipt handle stays valid.
	ChangeVisibility(ctx context.Context, receiptHandle string, d time.Duration) error
}

// MaxSendBatch is the most messages one SendBatch request carries (SQS
// SendMessageBatch: 10).
const MaxSendBatch = 10

// BatchSender is the capability of a queue that sends several messages in
// one request (SQS SendMessageBatch), for the callers that enqueue many at
// once (a submit's first turns, one per shard). Each message keeps its own
// group and deduplication id, and the FIFO rules are those of Send: in a
// group, messages keep the order of the slice. Queues without it are sent
// to one Send at a time (dispatch.SendTurns).
type BatchSender interface {
	// SendBatch sends every message in p, any number of them (the adapter
	// splits them into requests), and answers one SendBatchResult per
	// message, in order: a message refused or not sent after the
	// adapter's retries has its Err, and the others are sent all the same.
	// The error is for the call as a whole (invalid parameters before any
	// request, a cancelled context), when no result is given.
	SendBatch(ctx context.Context, p []SendParams) ([]SendBatchResult, error)
}

// SendBatchResult is the outcome of one message of a SendBatch.
type SendBatchResult struct {
	SendResult
	// Err is why the message was not sent; nil when it was.
	Err error
}

// SendParams is one message to send.
type SendParams struct {
	Group   string // 1..MaxIDLength characters
	DedupID string // 1..MaxIDLength characters
	Body    []byte // 1..MaxBodyBytes bytes of SQS-legal UTF-8 text (see MaxBodyBytes)
}

// SendResult identifies the sent message.
type SendResult struct {
	MessageID string
	// Duplicate is true when the message was dropped as a duplicate of one
	// sent with the same DedupID within DedupWindow. Only backends that
	// report it set it (SQS does not: there it is always false).
	Duplicate bool
}

// ReceiveParams asks for messages.
type ReceiveParams struct {
	Max               int           // 1..MaxReceive
	VisibilityTimeout time.Duration // 0..MaxVisibilityTimeout
	Wait              time.Duration // 0..MaxWait; 0 = return at once
}

// Message is a received message.
type Message struct {
	ID            string // stable across redeliveries
	Group         string
	DedupID       string
	Body          []byte
	ReceiptHandle string // valid for this receive only
	ReceiveCount  int    // 1 on first delivery
	SentAt        time.Time
}
