// Package metrics measures qunfa's sending with one set of metric names for
// both runtimes: the local stack serves them as Prometheus text at /metrics
// (package prom), and the Lambda functions print them as CloudWatch
// Embedded Metric Format lines on stdout (NewEMF). This package needs only
// the standard library, so the core may import it for Recorder. The core reports events
// to a Recorder; which one is wiring, decided in main.
//
// The names, their labels and what they count:
//
//	qunfa_messages_sent_total{account}              recipients the provider accepted
//	qunfa_messages_failed_total{account,category}   recipients the provider refused or left unanswered, by provider category (rate limits excluded)
//	qunfa_rate_limited_total{account}               recipients refused for frequency or concurrency (retried without using an attempt)
//	qunfa_provider_latency_seconds{account}         histogram of provider call durations
//	qunfa_token_wait_seconds                        histogram of waits for rate-limit tokens
//	qunfa_handbacks_total                           shard turns handed back to the queue to continue later
//	qunfa_queue_depth{queue,state}                  gauge of queued messages, state visible or in_flight
//	qunfa_active_shards                             gauge of shard turns being worked
//	qunfa_account_batch_size{account}               gauge: recipients per call of identical content the sender chose
//	qunfa_account_concurrency{account}              gauge: provider calls in flight the sender allows the account
//	qunfa_account_p99_latency_seconds{account}      gauge: the P99 call latency those were chosen from
//	qunfa_oldest_submitted_age_seconds              gauge (reconciler): age of the oldest item left submitted
//	qunfa_oldest_stuck_shard_age_seconds            gauge (reconciler): time without progress of the stalest re-driven shard
package metrics

import (
	"context"
	"time"
)

// Metric names, shared by every Recorder.
const (
	MessagesSent    = "qunfa_messages_sent_total"
	MessagesFailed  = "qunfa_messages_failed_total"
	RateLimited     = "qunfa_rate_limited_total"
	ProviderLatency = "qunfa_provider_latency_seconds"
	TokenWait       = "qunfa_token_wait_seconds"
	Handbacks       = "qunfa_handbacks_total"
	QueueDepth      = "qunfa_queue_depth"
	ActiveShards    = "qunfa_active_shards"
	// OldestSubmitted is the age in seconds of the oldest item left
	// submitted (claimed, its outcome not recorded), as the reconciler
	// last saw it: a backlog of unsettled items shows as a growing age.
	OldestSubmitted = "qunfa_oldest_submitted_age_seconds"
	// AccountBatchSize, AccountConcurrency and AccountP99Latency are the
	// sizing the sender chose for an account from its measured latency
	// (issue 13), as last decided by this process.
	AccountBatchSize   = "qunfa_account_batch_size"
	AccountConcurrency = "qunfa_account_concurrency"
	AccountP99Latency  = "qunfa_account_p99_latency_seconds"

	// OldestStuckShard is how long, in seconds, the stalest running shard
	// the reconciler last re-drove had gone without progress (0: none was
	// stale): a shard that keeps growing here is stuck despite re-drives.
	OldestStuckShard = "qunfa_oldest_stuck_shard_age_seconds"
)

// Label (Prometheus) and dimension (CloudWatch) names.
const (
	LabelAccount  = "account"
	LabelCategory = "category"
	LabelQueue    = "queue"
	LabelState    = "state"
)

// Values of LabelState for QueueDepth.
const (
	StateVisible  = "visible"
	StateInFlight = "in_flight"
)

// Recorder receives the events qunfa measures. Implementations are safe for
// concurrent use and never fail the caller: a metric that cannot be
// recorded is dropped, not returned as an error.
type Recorder interface {
	// MessagesSent counts n recipients of account accepted by the provider.
	MessagesSent(ctx context.Context, account string, n int)
	// MessagesFailed counts n recipients of account that the provider
	// refused, or did not answer for, with the failure's category
	// (provider.Category). Rate limits are counted by RateLimited instead.
	MessagesFailed(ctx context.Context, account, category string, n int)
	// RateLimited counts n recipients of account refused for frequency or
	// concurrency.
	RateLimited(ctx context.Context, account string, n int)
	// ProviderLatency observes how long one provider call of account took.
	ProviderLatency(ctx context.Context, account string, d time.Duration)
	// TokenWait observes how long a turn waited for rate-limit tokens (in
	// the handler, or until a hand-back brings the shard back).
	TokenWait(ctx context.Context, d time.Duration)
	// Handback counts one shard turn handed back to the queue.
	Handback(ctx context.Context)
	// QueueDepth sets how many messages the named queue holds, visible and
	// in flight.
	QueueDepth(ctx context.Context, queue string, visible, inFlight int)
	// AddActiveShards moves the number of shard turns being worked by delta:
	// +1 when a turn starts, -1 when it ends.
	AddActiveShards(ctx context.Context, delta int)
}

// Nop is a Recorder that records nothing, for tests and for wiring that has
// no metrics.
type Nop struct{}

var _ Recorder = Nop{}

func (Nop) MessagesSent(context.Context, string, int)              {}
func (Nop) MessagesFailed(context.Context, string, string, int)    {}
func (Nop) RateLimited(context.Context, string, int)               {}
func (Nop) ProviderLatency(context.Context, string, time.Duration) {}
func (Nop) TokenWait(context.Context, time.Duration)               {}
func (Nop) Handback(context.Context)                               {}
func (Nop) QueueDepth(context.Context, string, int, int)           {}
func (Nop) AddActiveShards(context.Context, int)                   {}

// OldestSubmittedAge implements the reconciler's gauge.
func (Nop) OldestSubmittedAge(context.Context, time.Duration) {}

// SizingRecorder is implemented by Recorders that show the sender's sizing
// of each account (the sender checks for it, so other Recorders need not).
type SizingRecorder interface {
	// AccountSizing sets the account's batch size (recipients per call of
	// identical content), calls in flight and the P99 call latency they
	// were chosen from.
	AccountSizing(ctx context.Context, account string, batchSize, concurrency int, p99 time.Duration)
}

var _ SizingRecorder = Nop{}

// AccountSizing implements SizingRecorder.
func (Nop) AccountSizing(context.Context, string, int, int, time.Duration) {}

// OldestStuckShardAge implements the reconciler's gauge.
func (Nop) OldestStuckShardAge(context.Context, time.Duration) {}

// QueueStatsFunc reads a queue's depth: messages waiting to be received
// (visible) and messages received and not yet deleted (in flight). The
// local stack passes a closure over sqlitequeue.Queue.Stats.
type QueueStatsFunc func(ctx context.Context) (visible, inFlight int, err error)
