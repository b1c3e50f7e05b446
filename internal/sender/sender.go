// Package sender works one turn of one shard: the handler behind every
// work-queue message, in Lambda and in the local runtime alike.
//
// A turn loops over batches. At every batch boundary it re-reads the job and
// shard (pause, cancel and breaker take effect there, never mid-call), takes
// tokens from the account's bucket, reserves budget, claims items (pending →
// submitted) *before* calling the provider, calls the provider, records the
// outcomes and advances the shard. It never waits long: when tokens or due
// items are more than MaxWait away, it hands the shard back to the queue
// with a delay. When its time is up it enqueues a continuation turn. When
// the shard has nothing pending or submitted it finishes the shard and,
// with the last shard, the job.
package sender

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/qunfa/qunfa/internal/alert"
	"github.com/qunfa/qunfa/internal/breaker"
	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/content"
	"github.com/qunfa/qunfa/internal/dispatch"
	"github.com/qunfa/qunfa/internal/metrics"
	"github.com/qunfa/qunfa/internal/provider"
	"github.com/qunfa/qunfa/internal/queue"
	"github.com/qunfa/qunfa/internal/store"
)

// Config tunes the sender. Zero values take the defaults.
type Config struct {
	// ClaimBatch is the most items claimed per batch (default 10). It
	// bounds how many items a crash can leave submitted.
	ClaimBatch int
	// Concurrency is the most provider calls in flight per turn (default 16).
	Concurrency int
	// MaxWait is the longest in-handler wait for tokens or due items
	// (default 300 ms); longer waits hand the shard back with a delay.
	MaxWait time.Duration
	// TurnDuration bounds one turn (default 60 s); then a continuation turn
	// is enqueued so other shards get the worker.
	TurnDuration time.Duration
	// DeadlineMargin: stop this long before the context deadline (default 3 s).
	DeadlineMargin time.Duration
	// Backoff of retryable failures: full jitter over Base·2^(attempt−1),
	// capped; after MaxAttempts the item is exhausted. Defaults 1 s, 30 s, 5.
	BackoffBase time.Duration
	BackoffCap  time.Duration
	MaxAttempts int
	// MinSlowFactor is the floor of the multiplicative slow-down (default 0.05).
	MinSlowFactor float64
	// RenewAfterReceives: a message handed back this many times is replaced
	// by a fresh continuation, so hand-backs never reach the queue's
	// max-receive count (default 4).
	RenewAfterReceives int
	// StragglerWait is how long a batch waits for its slowest provider
	// calls (default 1 s). Then the answered ones are recorded and the turn
	// goes on; the stragglers' items stay submitted until they answer
	// (at the latest after the provider's response timeout), and are
	// recorded at a later batch boundary and always before the turn ends.
	// A slow call therefore never stalls its shard.
	StragglerWait time.Duration
	// MaxStragglers bounds the calls left running that way (default:
	// Concurrency); at the bound the turn waits for them before claiming.
	MaxStragglers int
	// StatePoll is how long a turn that waits for its account's tokens
	// trusts the job state it read (default 100 ms).
	StatePoll time.Duration
	// AccountRefresh is how long a turn trusts the account's limits and
	// breaker state it read (default 1 s): rate changes and breakers opened
	// by other shards take effect within it. The job's status is read at
	// every batch (pause and cancel act at the next item boundary).
	AccountRefresh time.Duration
	// MaxHandBack caps the delay of a hand-back (default 15 min): a shard
	// whose next token is further away comes back earlier and hands itself
	// back again, so no delay ever exceeds the queue's visibility limit
	// (12 h on SQS), however small the rate.
	MaxHandBack time.Duration
}

func (c Config) withDefaults() Config {
	if c.ClaimBatch <= 0 {
		c.ClaimBatch = 10
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 16
	}
	if c.MaxWait <= 0 {
		c.MaxWait = 300 * time.Millisecond
	}
	if c.TurnDuration <= 0 {
		c.TurnDuration = 60 * time.Second
	}
	if c.DeadlineMargin <= 0 {
		c.DeadlineMargin = 3 * time.Second
	}
	if c.BackoffBase <= 0 {
		c.BackoffBase = time.Second
	}
	if c.BackoffCap <= 0 {
		c.BackoffCap = 30 * time.Second
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = 5
	}
	if c.MinSlowFactor <= 0 {
		c.MinSlowFactor = 0.05
	}
	if c.RenewAfterReceives <= 0 {
		c.RenewAfterReceives = 4
	}
	if c.StragglerWait <= 0 {
		c.StragglerWait = time.Second
	}
	if c.MaxStragglers <= 0 {
		c.MaxStragglers = c.Concurrency
	}
	if c.AccountRefresh <= 0 {
		c.AccountRefresh = time.Second
	}
	if c.StatePoll <= 0 {
		c.StatePoll = 100 * time.Millisecond
	}
	if c.MaxHandBack <= 0 {
		c.MaxHandBack = 15 * time.Minute
	}
	return c
}

// errSuperseded: a newer turn owns the shard; this one stops.
var errSuperseded = errors.New("turn superseded by a newer one")

// Sender runs shard turns.
type Sender struct {
	Store    store.Store
	Queue    queue.Queue
	Provider provider.Provider
	Clock    clock.Sleeper
	Log      *slog.Logger
	Config   Config
	// Alerts receives JobPaused and JobFinished events (nil: none).
	Alerts alert.Publisher
	// Outcomes receives one ItemOutcomes event per recorded batch with
	// final outcomes (nil: none); webhooks deliver them as items.outcomes.
	Outcomes alert.Publisher
	// Breakers is the accounts' circuit breakers (nil: no breaker).
	Breakers *breaker.Breakers
	// Metrics receives token waits, hand-backs and active shards (nil:
	// none). Sends, failures and provider latency are measured by wrapping
	// the Provider with metrics.Provider.
	Metrics metrics.Recorder
	// Rand draws backoff jitter in [0,1); nil uses math/rand/v2.
	Rand func() float64
}

// Message is the queue message of a turn.
type Message struct {
	ID            string
	Body          []byte
	ReceiptHandle string
	ReceiveCount  int
}

// Disposition tells the caller what to do with the turn's message.
type Disposition int

const (
	// Done: delete the message (the turn ended, a continuation — if any —
	// has been enqueued).
	Done Disposition = iota
	// HandedBack: keep the message; its visibility was set to the delay, so
	// it comes back then (report it as a batch item failure).
	HandedBack
)

// Result is the end of a turn.
type Result struct {
	Disposition Disposition
	Delay       time.Duration // for HandedBack
	Sent        int           // items claimed and sent in this turn
	Reason      string        // why the turn ended, for logs
}

// HandleTurn works one turn. An error means the turn stopped on an
// infrastructure failure with the shard consistent (claimed items are
// recorded or left submitted for reconciliation); the message should be
// retried by the queue.
func (s *Sender) HandleTurn(ctx context.Context, m Message) (Result, error) {
	cfg := s.Config.withDefaults()
	log := s.logger()
	t, err := dispatch.Decode(m.Body)
	if err != nil {
		log.Error("drop malformed turn message", slog.String("message", m.ID), slog.Any("err", err))
		return Result{Disposition: Done, Reason: "malformed"}, nil
	}
	log = log.With(slog.String("job", t.JobID), slog.Int("shard", t.Shard), slog.Int64("turn", t.Turn))
	start := s.Clock.Now()
	shard, err := s.Store.BeginTurn(ctx, store.BeginTurnParams{
		JobID: t.JobID, Index: t.Shard, Turn: t.Turn, MessageID: m.ID, At: start,
	})
	switch {
	case errors.Is(err, store.ErrConflict):
		log.Debug("drop stale turn message")
		return Result{Disposition: Done, Reason: "stale"}, nil
	case errors.Is(err, store.ErrNotFound):
		log.Warn("drop turn of unknown shard")
		return Result{Disposition: Done, Reason: "unknown shard"}, nil
	case err != nil:
		return Result{}, fmt.Errorf("begin turn: %w", err)
	}
	s.metrics().AddActiveShards(ctx, 1)
	defer s.metrics().AddActiveShards(context.WithoutCancel(ctx), -1)
	tr := &turn{s: s, cfg: cfg, log: log, msg: m, t: t, shard: shard, start: start, shardReadAt: start}
	if dl, ok := ctx.Deadline(); ok {
		tr.deadline = dl.Add(-cfg.DeadlineMargin)
	}
	if d := start.Add(cfg.TurnDuration); tr.deadline.IsZero() || d.Before(tr.deadline) {
		tr.deadline = d
	}
	res, err := tr.run(ctx)
	if err != nil {
		// Calls still running went out: wait for their answers and record
		// them, so an item the provider answered for is not left submitted
		// for the reconciler to look up.
		tr.recordStragglers(context.WithoutCancel(ctx))
	}
	if errors.Is(err, errSuperseded) {
		log.Info("turn superseded by a newer one")
		return Result{Disposition: Done, Sent: tr.sent, Reason: "superseded"}, nil
	}
	if err != nil {
		// Fold what we know; the next turn repairs the rest (Dirty).
		if ferr := tr.flush(context.WithoutCancel(ctx), false); ferr != nil && !errors.Is(ferr, errSuperseded) {
			log.Warn("fold progress of a failed turn", slog.Any("err", ferr))
		}
		return res, err
	}
	log.Info("turn ended", slog.String("reason", res.Reason), slog.Int("sent", res.Sent),
		slog.Duration("took", s.Clock.Now().Sub(start)))
	return res, nil
}

func (s *Sender) metrics() metrics.Recorder {
	if s.Metrics == nil {
		return metrics.Nop{}
	}
	return s.Metrics
}

func (s *Sender) logger() *slog.Logger {
	if s.Log != nil {
		return s.Log
	}
	return slog.Default()
}

func (s *Sender) rand() float64 {
	if s.Rand != nil {
		return s.Rand()
	}
	return rand.Float64()
}

// turn is the state of one running turn.
type turn struct {
	s        *Sender
	cfg      Config
	log      *slog.Logger
	msg      Message
	t        dispatch.Turn
	shard    store.Shard
	job      store.Job
	account  store.Account
	tmpl     content.Template
	start    time.Time
	deadline time.Time
	sent     int

	// probe: the breaker is half-open and this shard sends its probe.
	probe bool
	// streak holds the failed outcomes since the last success, to restore
	// them if they trip the breaker.
	streak []store.ItemUpdate
	// attempts and attemptFailures since the last flush.
	attempts, attemptFailures int64
	// stragglers are provider calls still running after their batch was
	// recorded (see Config.StragglerWait).
	stragglers []*pendingCall
	// accountReadAt and gateReadAt are when the account and its breaker
	// decision were last read (zero: read at the next batch); shardReadAt
	// when the shard was last read or returned by a flush.
	accountReadAt, gateReadAt, shardReadAt time.Time
	gateDecision                           breaker.Decision

	// lastAnswerAt is when the last provider call was answered.
	lastAnswerAt time.Time
	// tokenWaiting: the last iteration waited for tokens; stateReadAt is
	// when the job and shard state was last checked.
	tokenWaiting bool
	stateReadAt  time.Time

	// canaryBase is the shard's first seq and canaryEnd one past its last
	// canary seq, once canaryKnown.
	canaryBase, canaryEnd int64
	canaryKnown           bool

	// progress not yet folded into the shard
	delta    store.Counts
	failures map[string]int64
	cursor   int64
	slow     float64
}

// run loops over batches. The handler's ctx only signals shutdown: it is
// checked at batch boundaries, where the turn hands the shard on with a
// continuation; store writes and provider calls of a batch in hand are
// never cut off by it.
func (tr *turn) run(stopCtx context.Context) (Result, error) {
	ctx := context.WithoutCancel(stopCtx)
	tr.slow = tr.shard.SlowFactor
	if tr.slow <= 0 || tr.slow > 1 {
		tr.slow = 1
	}
	for {
		if stopCtx.Err() != nil {
			return tr.continueLater(ctx, "shutting down")
		}
		if err := tr.collectStragglers(ctx, len(tr.stragglers) >= tr.cfg.MaxStragglers); err != nil {
			return Result{}, err
		}
		// A turn polling its account's bucket re-reads the job at most every
		// StatePoll: many shards of one account wait side by side, and the
		// reads would cost more than the sends. Before any claim the state
		// is at most that old, so pause and cancel still act at the next
		// item boundary, at most StatePoll later.
		if !tr.tokenWaiting || tr.s.Clock.Now().Sub(tr.stateReadAt) >= tr.cfg.StatePoll {
			stop, res, err := tr.checkState(ctx)
			if err != nil || stop {
				return res, err
			}
			tr.stateReadAt = tr.s.Clock.Now()
		}
		tr.tokenWaiting = false
		now := tr.s.Clock.Now()
		if !now.Before(tr.deadline) {
			return tr.continueLater(ctx, "turn time up")
		}
		if tr.shard.Counts.Pending == 0 && len(tr.stragglers) == 0 {
			// Nothing left to send, by the counts: no token is needed to
			// find out whether that is true.
			if res, stop, err := tr.nothingPending(stopCtx, now); stop || err != nil {
				return res, err
			}
			continue
		}
		// Every call of a batch starts at once (no more items than call
		// slots), so no call starts long after its claim: the reconciler's
		// settle delay, measured from the claim, always covers it.
		want := tr.claimSize()
		if n := tr.account.Breaker.ConsecutiveFailures; n > 0 && tr.s.Breakers != nil {
			// Outcomes are judged when they arrive: never have more sends
			// without an answer than the streak that must open the breaker.
			inFlight := tr.stragglerItems()
			if inFlight >= n {
				if err := tr.collectStragglers(ctx, true); err != nil {
					return Result{}, err
				}
				continue
			}
			want = min(want, n-inFlight)
		}
		if tr.probe {
			if len(tr.stragglers) > 0 {
				// One probe at a time: wait for the answers before another.
				if err := tr.collectStragglers(ctx, true); err != nil {
					return Result{}, err
				}
				continue
			}
			want = min(want, breaker.ProbeSize)
		}
		if tr.inCanary() {
			left, err := tr.canaryLeft(ctx)
			if err != nil {
				return Result{}, err
			}
			if left <= 0 {
				return tr.canarySent(ctx)
			}
			want = min(want, int(left))
		}
		if wait := tr.spacing(now) - spacingLead; wait > 0 {
			if res, done, err := tr.wait(stopCtx, wait, "spacing sends"); done || err != nil {
				return res, err
			}
			continue
		}
		granted, wait, err := tr.takeTokens(ctx, want, now)
		if err != nil {
			return Result{}, err
		}
		if granted == 0 {
			tr.s.metrics().TokenWait(ctx, wait)
			if res, done, err := tr.wait(stopCtx, wait, "waiting for tokens"); done || err != nil {
				return res, err
			}
			tr.tokenWaiting = true
			continue
		}
		budget, err := tr.reserveBudget(ctx, granted)
		if err != nil {
			return Result{}, err
		}
		if budget == 0 {
			if tr.shard.Counts.Pending == 0 {
				// Nothing left to send here: finishing the shard (or
				// waiting for reconciliation) needs no budget.
				if res, stop, err := tr.nothingDue(stopCtx, time.Time{}, now); stop || err != nil {
					return res, err
				}
				continue
			}
			if stop, res, err := tr.pauseForBudget(ctx); stop || err != nil {
				return res, err
			}
			continue
		}
		claimID := tr.claimID()
		// The claim time is the item's submitted-at, from which the
		// reconciler's settle delay counts: take it now, after tokens and
		// budget (and their store retries), not at the top of the batch.
		now = tr.s.Clock.Now()
		claim, err := tr.s.Store.ClaimItems(ctx, store.ClaimItemsParams{
			JobID: tr.job.ID, Index: tr.shard.Index, Max: int(budget), Now: now, ClaimID: claimID,
		})
		if err != nil {
			return Result{}, tr.claimFailed(ctx, claimID, budget, err)
		}
		tr.fold(claim.Delta, nil)
		tr.giveBackBudget(ctx, budget-int64(len(claim.Items)))
		if len(claim.Items) == 0 {
			// Tokens taken but unused are lost: the account stays under its rate.
			if res, stop, err := tr.nothingDue(stopCtx, claim.NextDueAt, now); stop || err != nil {
				return res, err
			}
			continue
		}
		claimed := tr.s.Clock.Now()
		if err := tr.sendBatch(ctx, claimID, claim.Items); err != nil {
			return Result{}, err
		}
		tr.log.Debug("batch", slog.Int("items", len(claim.Items)), slog.Duration("claim", claimed.Sub(now)),
			slog.Duration("send_and_record", tr.s.Clock.Now().Sub(claimed)))
		if res, stop, err := tr.pace(stopCtx, len(claim.Items)); stop || err != nil {
			return res, err
		}
	}
}

// claimFailed handles a ClaimItems that returned an error: the claim may
// still have been applied (a page written before the failure, an answer
// lost), leaving items submitted that were never sent. Those items, found
// by their claim id, go back to pending with their attempt given back, and
// then the batch's budget is given back too. When they cannot be found
// (the store still fails) the budget stays reserved: the reconciler finds
// such items unknown at the provider, re-pends them and gives their budget
// back then, so it is never given back twice.
func (tr *turn) claimFailed(ctx context.Context, claimID string, budget int64, cause error) error {
	released, err := tr.releaseClaim(ctx, claimID)
	if err != nil {
		tr.log.Warn("claim failed and its items could not be checked; the reconciler settles any it left submitted",
			slog.String("claim", claimID), slog.Any("err", err))
		return fmt.Errorf("claim items: %w", cause)
	}
	if released > 0 {
		tr.log.Warn("claim failed after claiming items; released them unsent", slog.Int("items", released))
	}
	tr.giveBackBudget(ctx, budget)
	return fmt.Errorf("claim items: %w", cause)
}

// releaseClaim returns the items still held by claimID (none sent) to
// pending. The claim's count delta was never folded and the release is its
// inverse, so neither is folded.
func (tr *turn) releaseClaim(ctx context.Context, claimID string) (int, error) {
	idx := tr.shard.Index
	var ups []store.ItemUpdate
	cursor := ""
	for {
		page, err := tr.s.Store.ListItems(ctx, store.ListItemsParams{
			JobID: tr.job.ID, Status: store.ItemSubmitted, Shard: &idx, Cursor: cursor, Limit: store.MaxPutItems,
		})
		if err != nil {
			return 0, fmt.Errorf("list submitted items: %w", err)
		}
		for _, it := range page.Items {
			if it.ClaimID == claimID {
				ups = append(ups, store.ItemUpdate{
					Seq: it.Seq, From: store.ItemSubmitted, ClaimID: claimID, To: store.ItemPending,
					AttemptsDelta: -1, NextAttemptAt: tr.s.Clock.Now(), KeepError: true,
				})
			}
		}
		if page.NextCursor == "" {
			break
		}
		cursor = page.NextCursor
	}
	if len(ups) == 0 {
		return 0, nil
	}
	res, err := tr.s.Store.UpdateItems(ctx, store.UpdateItemsParams{JobID: tr.job.ID, Index: idx, Updates: ups, At: tr.s.Clock.Now()})
	if err != nil {
		return 0, fmt.Errorf("release claimed items: %w", err)
	}
	if len(res.Rejected) > 0 {
		return 0, fmt.Errorf("release claimed items: %d changed meanwhile", len(res.Rejected))
	}
	return len(ups), nil
}

// checkState re-reads the job record at a batch boundary and stops the turn
// when the job is paused, cancelled or finished, or the shard is paused.
// The shard itself comes back from every flush; it is read again only when
// no flush refreshed it within AccountRefresh (outside changes: redrive,
// resume, reconciliation). So a batch costs the same whatever the job's
// shard count.
func (tr *turn) checkState(ctx context.Context) (bool, Result, error) {
	job, err := tr.s.Store.GetJobRecord(ctx, tr.t.JobID)
	if err != nil {
		return true, Result{}, fmt.Errorf("read job: %w", err)
	}
	if tr.job.ID == "" {
		tr.tmpl, err = content.Parse(job.Template)
		if err != nil {
			return true, Result{}, fmt.Errorf("parse template of job %s: %w", job.ID, err)
		}
	}
	tr.job = job
	if now := tr.s.Clock.Now(); now.Sub(tr.shardReadAt) >= tr.cfg.AccountRefresh {
		cur, err := tr.s.Store.GetShard(ctx, tr.t.JobID, tr.t.Shard)
		if errors.Is(err, store.ErrNotFound) {
			return true, Result{Disposition: Done, Reason: "unknown shard"}, nil
		}
		if err != nil {
			return true, Result{}, fmt.Errorf("read shard: %w", err)
		}
		tr.shard.Status, tr.shard.PauseReason, tr.shard.Turn = cur.Status, cur.PauseReason, cur.Turn
		tr.shard.Counts = cur.Counts.Add(tr.delta)
		tr.shardReadAt = now
	}
	if tr.shard.Turn != tr.t.Turn {
		// A newer turn took over (redrive); this one must not continue.
		return true, Result{Disposition: Done, Reason: "superseded"}, nil
	}
	switch {
	case tr.job.Status == store.JobCancelled:
		res, err := tr.cancelShard(ctx)
		return true, res, err
	case tr.job.Status == store.JobPaused:
		res, err := tr.end(ctx, "job paused ("+string(tr.job.PauseReason)+")")
		return true, res, err
	case tr.job.Status != store.JobRunning:
		res, err := tr.end(ctx, "job "+string(tr.job.Status))
		return true, res, err
	case tr.shard.Status == store.ShardPaused && tr.shard.PauseReason != store.PauseBreaker:
		res, err := tr.end(ctx, "shard paused ("+string(tr.shard.PauseReason)+")")
		return true, res, err
	case tr.shard.Status == store.ShardPending:
		if _, err := tr.s.Store.TransitionShard(ctx, store.TransitionShardParams{
			JobID: tr.job.ID, Index: tr.shard.Index, From: []store.ShardStatus{store.ShardPending},
			To: store.ShardRunning, At: tr.s.Clock.Now(),
		}); err != nil && !errors.Is(err, store.ErrInvalidTransition) {
			return true, Result{}, fmt.Errorf("start shard: %w", err)
		}
		tr.shard.Status = store.ShardRunning
	case tr.shard.Status != store.ShardCancelled && store.ShardFinal(tr.shard.Status) && tr.shard.Counts.Pending > 0:
		// Items went back to pending after the shard finished (a redrive,
		// a re-pend, a resend racing the finish): run it again.
		if _, err := tr.s.Store.TransitionShard(ctx, store.TransitionShardParams{
			JobID: tr.job.ID, Index: tr.shard.Index, From: []store.ShardStatus{store.ShardCompleted, store.ShardFailed},
			To: store.ShardRunning, At: tr.s.Clock.Now(),
		}); err != nil && !errors.Is(err, store.ErrInvalidTransition) {
			return true, Result{}, fmt.Errorf("reopen shard: %w", err)
		}
		tr.log.Info("finished shard has pending items; running it again", slog.Int64("pending", tr.shard.Counts.Pending))
		tr.shard.Status = store.ShardRunning
	case store.ShardFinal(tr.shard.Status):
		// A redelivery after a crash between finishing the shard and the
		// job: end the turn (its dirty mark would keep the job from
		// finishing), then finish the job.
		res, err := tr.end(ctx, "shard "+string(tr.shard.Status))
		if err != nil {
			return true, res, err
		}
		if err := FinishJob(ctx, tr.s.Store, tr.s.Alerts, tr.log, tr.job.ID, tr.s.Clock.Now()); err != nil {
			return true, Result{}, err
		}
		return true, res, nil
	}
	if now := tr.s.Clock.Now(); tr.accountReadAt.IsZero() || now.Sub(tr.accountReadAt) >= tr.cfg.AccountRefresh {
		acct, err := tr.s.Store.GetAccount(ctx, tr.job.Tenant, tr.shard.Account)
		if err != nil {
			return true, Result{}, fmt.Errorf("read account %q: %w", tr.shard.Account, err)
		}
		tr.account, tr.accountReadAt = acct, now
	}
	return tr.gate(ctx)
}

// shardName identifies the shard to the breaker (the half-open probe
// belongs to one shard).
func (tr *turn) shardName() string {
	return tr.t.JobID + "/" + strconv.Itoa(tr.t.Shard)
}

// gate asks the account's breaker whether this shard may send now. While it
// is open the shard pauses (reason breaker) and is handed back until the
// cool-down ends; after it, one shard probes with a few items.
func (tr *turn) gate(ctx context.Context) (bool, Result, error) {
	tr.probe = false
	if tr.s.Breakers == nil {
		return false, Result{}, nil
	}
	dec := tr.gateDecision
	// A closed breaker read a moment ago is trusted (it is the common case,
	// read at every batch otherwise); anything else is asked again.
	if now := tr.s.Clock.Now(); !dec.Allow || dec.Probe || tr.gateReadAt.IsZero() || now.Sub(tr.gateReadAt) >= tr.cfg.AccountRefresh {
		var err error
		if dec, err = tr.s.Breakers.Gate(ctx, tr.job.Tenant, tr.shard.Account, tr.shardName()); err != nil {
			return true, Result{}, err
		}
		tr.gateDecision, tr.gateReadAt = dec, now
	}
	if !dec.Allow {
		if err := tr.pauseShardForBreaker(ctx); err != nil {
			return true, Result{}, err
		}
		res, err := tr.handBack(ctx, dec.Wait, "breaker "+string(dec.State.State)+" for "+tr.shard.Account)
		return true, res, err
	}
	if tr.shard.Status == store.ShardPaused {
		if _, err := tr.s.Store.TransitionShard(ctx, store.TransitionShardParams{
			JobID: tr.job.ID, Index: tr.shard.Index, From: []store.ShardStatus{store.ShardPaused},
			To: store.ShardRunning, At: tr.s.Clock.Now(),
		}); err != nil && !errors.Is(err, store.ErrInvalidTransition) {
			return true, Result{}, fmt.Errorf("resume shard after breaker: %w", err)
		}
		tr.shard.Status, tr.shard.PauseReason = store.ShardRunning, ""
	}
	tr.probe = dec.Probe
	return false, Result{}, nil
}

func (tr *turn) pauseShardForBreaker(ctx context.Context) error {
	if tr.shard.Status == store.ShardPaused {
		return nil
	}
	if _, err := tr.s.Store.TransitionShard(ctx, store.TransitionShardParams{
		JobID: tr.job.ID, Index: tr.shard.Index, From: []store.ShardStatus{store.ShardRunning, store.ShardPending},
		To: store.ShardPaused, PauseReason: store.PauseBreaker, At: tr.s.Clock.Now(),
	}); err != nil && !errors.Is(err, store.ErrInvalidTransition) {
		return fmt.Errorf("pause shard for the breaker: %w", err)
	}
	tr.shard.Status, tr.shard.PauseReason = store.ShardPaused, store.PauseBreaker
	return nil
}

// takeTokens takes up to want tokens from the account bucket (and the job's,
// when the job caps its rate). It returns how long until more when none.
//
// Buckets always refill at their configured rate, whoever takes from them;
// a shard's slow-down is applied as pacing after its batches (see pace).
// The sender's bucket holds at most half the account's burst: requests
// granted together can reach the provider closer together than they were
// granted (connection set-up, scheduling), and the other half absorbs that
// jitter so the provider's own bucket never overflows.
//
// When the bucket is empty the wait is for a batch, not a token: as many
// tokens as a batch wants, up to half the sender's bucket and to what
// MaxWait brings in. A slow account then sends a batch every few hundred
// milliseconds instead of one item at every token, so the store writes per
// message stay low at any rate. The rate is the same: the bucket is only
// half full when we come back, so a late wake-up loses no tokens.
func (tr *turn) takeTokens(ctx context.Context, want int, now time.Time) (int, time.Duration, error) {
	rate := tr.account.BatchRate()
	if rate <= 0 {
		return 0, time.Second, nil
	}
	burst := tr.account.Burst
	if burst <= 0 {
		burst = rate
	}
	burst = math.Max(1, math.Floor(burst/2))
	if tr.job.RatePerSec > 0 {
		jb := math.Max(1, math.Min(burst, math.Floor(tr.job.RatePerSec/2)))
		res, err := tr.s.Store.TakeTokens(ctx, store.TakeTokensParams{
			Bucket: "job:" + tr.job.ID, Want: want, RatePerSec: tr.job.RatePerSec, Burst: jb, Now: now,
		})
		if err != nil {
			return 0, 0, fmt.Errorf("take job tokens: %w", err)
		}
		if res.Granted == 0 {
			return 0, res.RetryAfter + tr.batchWait(want, tr.job.RatePerSec, jb), nil
		}
		want = res.Granted
	}
	// One bucket per provider account, whichever tenant's job sends (an
	// account has one owner, but the provider counts the guid's sends).
	res, err := tr.s.Store.TakeTokens(ctx, store.TakeTokensParams{
		Bucket: AccountBucket(tr.shard.Account), Want: want,
		RatePerSec: rate, Burst: burst, Now: now, WarmupSec: float64(tr.account.WarmupSec),
	})
	if err != nil {
		return 0, 0, fmt.Errorf("take account tokens: %w", err)
	}
	if res.Granted == 0 {
		return 0, res.RetryAfter + tr.batchWait(want, rate, burst), nil
	}
	return res.Granted, res.RetryAfter, nil
}

// spacing is how long to wait before the next send of an account whose
// bucket holds a single token (a burst under 4). A token bucket spaces its
// grants, but a send can start later than its grant (a busy machine, a slow
// store write, a new connection) and arrive right before the next one:
// with no burst to spare the provider would see two sends closer than
// 1/rate. So such an account's next send also waits 1/rate from the
// previous answer, which came after the previous send arrived.
func (tr *turn) spacing(now time.Time) time.Duration {
	if tr.lastAnswerAt.IsZero() {
		return 0
	}
	rate := tr.account.BatchRate()
	if tr.job.RatePerSec > 0 {
		rate = math.Min(rate, tr.job.RatePerSec)
	}
	burst := tr.account.Burst
	if burst <= 0 {
		burst = rate
	}
	if rate <= 0 || math.Floor(burst/2) > 1 {
		return 0
	}
	return tr.lastAnswerAt.Add(time.Duration(float64(time.Second) / rate)).Sub(now)
}

// spacingLead is how much earlier than the gap a spaced turn wakes up to
// take its token and claim, before waiting out the rest right before the
// call.
const spacingLead = 100 * time.Millisecond

// AccountBucket names the token bucket of a provider account.
func AccountBucket(account string) string { return "acct:" + account }

// batchWait is how much longer than for its next token an empty bucket of
// rate and burst is waited for, so that a batch of want finds its tokens.
func (tr *turn) batchWait(want int, rate, burst float64) time.Duration {
	target := math.Min(float64(want), math.Min(math.Floor(burst/2), math.Floor(rate*tr.cfg.MaxWait.Seconds())))
	if p := tr.shard.Counts.Pending; p > 0 {
		target = math.Min(target, float64(p)) // the last batch waits for what it needs
	}
	if target <= 1 {
		return 0
	}
	return time.Duration((target - 1) / rate * float64(time.Second))
}

// pace slows a shard that was told to slow down: after a batch of n items
// it waits as long as sending n at the slowed rate takes beyond sending
// them at the full rate, leaving the tokens to the account's other shards.
func (tr *turn) pace(ctx context.Context, n int) (Result, bool, error) {
	rate := tr.account.BatchRate()
	if tr.job.RatePerSec > 0 {
		rate = math.Min(rate, tr.job.RatePerSec)
	}
	if tr.slow >= 1 || rate <= 0 || n == 0 {
		return Result{}, false, nil
	}
	extra := time.Duration(float64(n) / rate * (1/tr.slow - 1) * float64(time.Second))
	return tr.wait(ctx, extra, "slowed down after rate limiting")
}

// wait waits d in the handler when short, else hands the shard back.
func (tr *turn) wait(ctx context.Context, d time.Duration, why string) (Result, bool, error) {
	wctx := context.WithoutCancel(ctx)
	if d <= tr.cfg.MaxWait {
		if err := tr.s.Clock.Sleep(ctx, d); err != nil {
			res, err := tr.continueLater(wctx, "shutting down")
			return res, true, err
		}
		return Result{}, false, nil
	}
	res, err := tr.handBack(wctx, d, why)
	return res, true, err
}

// nothingDue decides what to do when a claim found nothing.
func (tr *turn) nothingDue(ctx context.Context, nextDue, now time.Time) (Result, bool, error) {
	// Calls still running hold submitted items: record them first, so the
	// counts below say what is really left.
	if err := tr.collectStragglers(context.WithoutCancel(ctx), true); err != nil {
		return Result{}, true, err
	}
	if tr.probe {
		// Nothing to probe with here: let another shard of the account probe.
		if err := tr.s.Breakers.ReleaseProbe(context.WithoutCancel(ctx), tr.job.Tenant, tr.shard.Account, tr.shardName()); err != nil {
			return Result{}, true, err
		}
		tr.probe = false
	}
	counts := tr.shard.Counts
	switch {
	case !nextDue.IsZero():
		return tr.wait(ctx, nextDue.Sub(now), "waiting for backoff")
	case counts.Pending > 0 || counts.Impossible(tr.shard.Size):
		// Counts say pending but nothing is claimable, or they cannot be
		// true (negative, or not adding up to the shard's size): a turn
		// never ends "waiting for reconciliation" on such counts.
		// Make them true from the items and look again.
		sh, err := tr.s.Store.RecountShard(context.WithoutCancel(ctx), tr.t.JobID, tr.t.Shard)
		if err != nil {
			return Result{}, true, fmt.Errorf("recount shard: %w", err)
		}
		tr.log.Warn("shard counts were off; recounted", slog.Int64("pending_was", counts.Pending), slog.Int64("pending", sh.Counts.Pending))
		tr.shard.Counts, tr.shard.Epoch, tr.delta, tr.failures = sh.Counts, sh.Epoch, store.Counts{}, nil
		if sh.Counts.Pending > 0 {
			res, err := tr.handBack(context.WithoutCancel(ctx), time.Second, "pending items not claimable")
			return res, true, err
		}
		return Result{}, false, nil
	case counts.Submitted > 0:
		// Items await reconciliation; the reconciler re-drives the shard.
		res, err := tr.end(context.WithoutCancel(ctx), "waiting for reconciliation of submitted items")
		return res, true, err
	default:
		res, err := tr.finishShard(context.WithoutCancel(ctx))
		return res, true, err
	}
}

// nothingPending makes the counts true from the items when they say
// nothing is pending (outside changes may not be folded yet), then
// finishes the shard or ends the turn to wait for reconciliation; when
// items are pending after all, the turn goes on (stop false).
func (tr *turn) nothingPending(ctx context.Context, now time.Time) (Result, bool, error) {
	sh, err := tr.s.Store.RecountShard(context.WithoutCancel(ctx), tr.t.JobID, tr.t.Shard)
	if err != nil {
		return Result{}, true, fmt.Errorf("recount shard: %w", err)
	}
	tr.shard.Counts, tr.shard.Epoch, tr.delta, tr.failures = sh.Counts, sh.Epoch, store.Counts{}, nil
	if sh.Counts.Pending > 0 {
		tr.log.Warn("shard counts said nothing pending; recounted", slog.Int64("pending", sh.Counts.Pending))
		return Result{}, false, nil
	}
	return tr.nothingDue(ctx, time.Time{}, now)
}

// sendBatch renders and sends the claimed items and records outcomes.
func (tr *turn) sendBatch(ctx context.Context, claimID string, items []store.Item) error {
	// Recipients suppressed since the job was submitted are abandoned, not
	// sent (checked per batch, right before sending).
	keys := make([]store.RecipientKey, len(items))
	for i, it := range items {
		keys[i] = store.RecipientKey{Account: it.Account, To: it.To}
	}
	suppressed, err := tr.s.Store.SuppressedAmong(ctx, tr.job.Tenant, keys)
	if err != nil {
		return fmt.Errorf("suppression look-up: %w", err)
	}
	var skipped []store.ItemUpdate
	if len(suppressed) > 0 {
		keep := items[:0:0]
		for i, it := range items {
			if suppressed[keys[i]] {
				skipped = append(skipped, store.ItemUpdate{Seq: it.Seq, From: store.ItemSubmitted, ClaimID: claimID, To: store.ItemAbandoned,
					Error: &store.ItemError{Category: store.CategorySuppressed, Message: "recipient is on the suppression list"}})
				continue
			}
			keep = append(keep, it)
		}
		items = keep
	}
	items, capped, err := tr.chargeFrequency(ctx, claimID, items)
	if err != nil {
		return err
	}
	skipped = append(skipped, capped...)
	tr.giveBackBudget(ctx, int64(len(skipped))) // never sent
	calls, updates := tr.buildCalls(items)
	updates = append(updates, skipped...)
	tr.sent += len(items)
	for _, it := range items {
		if it.Seq+1 > tr.cursor {
			tr.cursor = it.Seq + 1
		}
	}
	if d := tr.spacing(tr.s.Clock.Now()); d > 0 && len(calls) > 0 {
		// The exact gap, right before the call: the wait at the top of the
		// batch ended spacingLead early, so the batch's own store work
		// does not add to the gap.
		_ = tr.s.Clock.Sleep(context.WithoutCancel(ctx), d)
	}
	pending := make([]*pendingCall, len(calls))
	answered := make(chan int, len(calls))
	sem := make(chan struct{}, tr.cfg.Concurrency)
	// Calls run to completion even if ctx is cancelled (shutdown): a request
	// in flight is never cut off mid-call by us.
	callCtx := context.WithoutCancel(ctx)
	for i, c := range calls {
		pc := &pendingCall{c: c, claimID: claimID, done: make(chan struct{})}
		pending[i] = pc
		go func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			r, err := tr.s.Provider.Send(callCtx, c.req)
			if err != nil {
				r = provider.SendResult{}
				for range c.req.To {
					r.Recipients = append(r.Recipients, provider.RecipientResult{
						Category: provider.Uncertain, Message: err.Error(),
					})
				}
			}
			pc.result = r
			close(pc.done)
			answered <- i
		}()
	}
	var done []*pendingCall
	var deadline <-chan time.Time // a probe waits for all its answers
	if !tr.probe {
		deadline = tr.s.Clock.After(tr.cfg.StragglerWait)
	}
wait:
	for len(done) < len(calls) {
		select {
		case i := <-answered:
			done = append(done, pending[i])
		case <-deadline:
			break wait
		}
	}
	if len(done) < len(calls) {
		finished := map[*pendingCall]bool{}
		for _, pc := range done {
			finished[pc] = true
		}
		for _, pc := range pending {
			if !finished[pc] {
				tr.stragglers = append(tr.stragglers, pc)
			}
		}
		tr.log.Warn("slow provider calls left running; the batch is recorded without them",
			slog.Int("calls", len(calls)-len(done)), slog.Duration("waited", tr.cfg.StragglerWait))
	}
	return tr.record(ctx, done, updates)
}

// chargeFrequency charges the claimed items against the account's
// frequency cap, if it has one, right before they are sent: items whose
// recipient already had the cap's messages in its window are abandoned
// (category frequency_capped), not sent. The store charges atomically
// across every job of the tenant, so concurrent jobs never pass the cap
// together. A charge is kept when the send then fails (the cap counts
// messages handed to the provider); a retry of the same item is not
// charged again.
func (tr *turn) chargeFrequency(ctx context.Context, claimID string, items []store.Item) ([]store.Item, []store.ItemUpdate, error) {
	fc := tr.account.FrequencyCap
	if !fc.Capped() || len(items) == 0 {
		return items, nil, nil
	}
	capped := map[int64]bool{}
	now := tr.s.Clock.Now()
	for start := 0; start < len(items); start += store.MaxPutItems {
		chunk := items[start:min(len(items), start+store.MaxPutItems)]
		p := store.ChargeFrequencyParams{Tenant: tr.job.Tenant, Account: tr.shard.Account, JobID: tr.job.ID, Cap: fc, Now: now}
		for _, it := range chunk {
			p.Charges = append(p.Charges, store.FrequencyCharge{Seq: it.Seq, To: it.To})
		}
		res, err := tr.s.Store.ChargeFrequency(ctx, p)
		if err != nil {
			// The items stay submitted unsent; the claim's failure path
			// (the reconciler) settles them as for any lost claim.
			return nil, nil, fmt.Errorf("charge frequency cap: %w", err)
		}
		maps.Copy(capped, res.Capped)
	}
	if len(capped) == 0 {
		return items, nil, nil
	}
	keep := items[:0:0]
	var skipped []store.ItemUpdate
	for _, it := range items {
		if capped[it.Seq] {
			skipped = append(skipped, store.ItemUpdate{Seq: it.Seq, From: store.ItemSubmitted, ClaimID: claimID, To: store.ItemAbandoned,
				Error: &store.ItemError{Category: store.CategoryFrequencyCapped,
					Message: fmt.Sprintf("recipient already had %d messages of this account in %ds (frequency_cap)", fc.Max, fc.WindowSec)}})
			continue
		}
		keep = append(keep, it)
	}
	return keep, skipped, nil
}

// pendingCall is one provider call of a batch; result is set before done
// is closed.
type pendingCall struct {
	c       call
	claimID string
	done    chan struct{}
	result  provider.SendResult
}

// stragglerItems counts the items of the calls still running.
func (tr *turn) stragglerItems() int {
	n := 0
	for _, pc := range tr.stragglers {
		n += len(pc.c.items)
	}
	return n
}

// recordStragglers waits for the calls still running when a turn stops on
// an error or was superseded, and records their answers. A failure to
// record leaves their items submitted: the reconciler settles them.
func (tr *turn) recordStragglers(ctx context.Context) {
	if len(tr.stragglers) == 0 {
		return
	}
	n := tr.stragglerItems()
	if err := tr.collectStragglers(ctx, true); err != nil && !errors.Is(err, errSuperseded) {
		tr.log.Warn("record calls still running when the turn stopped; their items stay submitted for reconciliation",
			slog.Int("items", n), slog.Any("err", err))
	}
}

// collectStragglers records the calls left running by earlier batches that
// have answered since; with block, it waits for all of them.
func (tr *turn) collectStragglers(ctx context.Context, block bool) error {
	if len(tr.stragglers) == 0 {
		return nil
	}
	var ready, still []*pendingCall
	for _, pc := range tr.stragglers {
		if block {
			<-pc.done
			ready = append(ready, pc)
			continue
		}
		select {
		case <-pc.done:
			ready = append(ready, pc)
		default:
			still = append(still, pc)
		}
	}
	tr.stragglers = still
	if len(ready) == 0 {
		return nil
	}
	return tr.record(ctx, ready, nil)
}

// record turns answered calls into item outcomes, stores them (with extra,
// updates decided without a call), folds them into the shard and applies
// slow-down and breaker rules.
func (tr *turn) record(ctx context.Context, calls []*pendingCall, extra []store.ItemUpdate) error {
	updates := extra
	now := tr.s.Clock.Now()
	if len(calls) > 0 {
		tr.lastAnswerAt = now
	}
	rateLimited := 0
	notSent := 0 // refused before sending: rate limit, account down
	accountDown := false
	batchFailed := false
	for _, pc := range calls {
		c := pc.c
		for j := range c.items {
			var rr provider.RecipientResult
			if j < len(pc.result.Recipients) {
				rr = pc.result.Recipients[j]
			} else {
				rr = provider.RecipientResult{Category: provider.Uncertain, Message: "provider gave no result for this recipient"}
			}
			u := tr.outcome(pc.claimID, c.items[j], rr, now)
			updates = append(updates, u)
			switch rr.Category {
			case provider.RateLimited:
				rateLimited++
				notSent++
			case provider.AccountDown:
				accountDown = true
				notSent++
				tr.attempts++
				tr.attemptFailures++
			case provider.Retryable, provider.Uncertain:
				tr.attempts++
				tr.attemptFailures++
				tr.streak = append(tr.streak, u)
				batchFailed = true
			default: // accepted, or refused for this recipient only
				tr.attempts++
				if rr.Category != "" {
					tr.attemptFailures++
				}
				tr.streak = tr.streak[:0]
			}
		}
	}
	if len(updates) == 0 {
		return nil
	}
	res, err := tr.s.Store.UpdateItems(context.WithoutCancel(ctx), store.UpdateItemsParams{
		JobID: tr.job.ID, Index: tr.shard.Index, Updates: updates, At: now,
	})
	if err != nil {
		return fmt.Errorf("record outcomes: %w", err)
	}
	if len(res.Rejected) > 0 {
		tr.log.Error("outcomes rejected: items no longer held by this claim", slog.Int("rejected", len(res.Rejected)))
	}
	tr.publishOutcomes(ctx, calls, updates, res.Rejected, now)
	tr.fold(res.Delta, res.FailuresDelta)
	tr.giveBackBudget(ctx, int64(notSent))
	if rateLimited > 0 {
		tr.slow = math.Max(tr.cfg.MinSlowFactor, tr.slow/2)
		tr.log.Warn("rate limited by provider; slowing down", slog.Int("items", rateLimited), slog.Float64("slow_factor", tr.slow))
	} else if tr.slow < 1 && len(calls) > 0 {
		// Additive recovery: from half speed to full in five clean batches.
		tr.slow = math.Min(1, tr.slow+0.1)
	}
	if err := tr.flush(ctx, false); err != nil {
		return err
	}
	if len(calls) == 0 {
		return nil
	}
	return tr.judgeBreaker(ctx, accountDown, batchFailed)
}

// judgeBreaker applies the breaker's fast path after a batch: an
// account-level error, or a streak of failures as long as the account's
// consecutive_failures, opens it; a half-open probe closes or reopens it.
// The items of the tripping streak go back to pending with their attempt
// given back, so the outage does not burn them.
func (tr *turn) judgeBreaker(ctx context.Context, accountDown, batchFailed bool) error {
	if tr.s.Breakers == nil {
		return nil
	}
	if tr.probe || accountDown || batchFailed {
		tr.gateReadAt = time.Time{} // the breaker may change now: ask it again
	}
	tenant, account := tr.job.Tenant, tr.shard.Account
	if tr.probe {
		ok := !accountDown && !batchFailed
		if err := tr.s.Breakers.ProbeResult(ctx, tenant, account, tr.shardName(), ok); err != nil {
			return fmt.Errorf("probe result: %w", err)
		}
		if ok {
			tr.probe, tr.streak = false, tr.streak[:0]
			return nil
		}
		return tr.restoreStreak(ctx)
	}
	n := tr.account.Breaker.ConsecutiveFailures
	switch {
	case accountDown:
		if _, err := tr.s.Breakers.Open(ctx, tenant, account, "the account refuses every call (credential expired or invalid)"); err != nil {
			return err
		}
	case n > 0 && len(tr.streak) >= n:
		if _, err := tr.s.Breakers.Open(ctx, tenant, account, fmt.Sprintf("%d failed sends in a row", len(tr.streak))); err != nil {
			return err
		}
	default:
		return nil
	}
	return tr.restoreStreak(ctx)
}

// restoreStreak returns the items of the failure streak that are not in
// flight to pending without using an attempt: retried items keep their
// place, exhausted ones come back. Items left submitted (no answer) stay
// for the reconciler.
func (tr *turn) restoreStreak(ctx context.Context) error {
	var ups []store.ItemUpdate
	for _, u := range tr.streak {
		switch u.To {
		case store.ItemPending, store.ItemFailed:
			ups = append(ups, store.ItemUpdate{
				Seq: u.Seq, From: u.To, To: store.ItemPending, AttemptsDelta: -1, NextAttemptAt: tr.s.Clock.Now(),
				Error: &store.ItemError{Category: store.CategoryRetryable, Code: "breaker",
					Message: "failed while the account's breaker tripped; will be sent again after the cool-down"},
			})
		}
	}
	tr.streak = tr.streak[:0]
	if len(ups) == 0 {
		return nil
	}
	res, err := tr.s.Store.UpdateItems(ctx, store.UpdateItemsParams{JobID: tr.job.ID, Index: tr.shard.Index, Updates: ups, At: tr.s.Clock.Now()})
	if err != nil {
		return fmt.Errorf("restore items of the tripping streak: %w", err)
	}
	tr.fold(res.Delta, res.FailuresDelta)
	tr.giveBackBudget(ctx, int64(len(ups)-len(res.Rejected))) // they get their attempt back, and their budget
	return tr.flush(ctx, false)
}

type call struct {
	req   provider.SendRequest
	items []store.Item
}

// claimSize is how many items a batch asks for. Every call of a batch
// starts at once, so a batch holds no more calls than call slots: one item
// per call in general. When the template has no variables every item
// renders the same text, and a batch of k·per items makes k calls of per
// recipients each, so such a batch claims ClaimBatch calls' worth of items
// and its calls go out full instead of carrying ClaimBatch recipients,
// up to store.MaxPutItems (the most one suppression look-up or outcome
// write takes). Tokens are still taken one per recipient: the rate is never
// exceeded.
func (tr *turn) claimSize() int {
	calls := min(tr.cfg.ClaimBatch, tr.cfg.Concurrency)
	if per := tr.account.MaxRecipientsPerCall; per > 1 && len(tr.tmpl.Vars()) == 0 {
		return max(calls, min(calls*per, store.MaxPutItems))
	}
	return calls
}

// buildCalls renders items and groups those with equal content into calls
// of up to the account's recipients per call. Items that cannot be rendered
// fail permanently (the template was checked at submit, so this is a bug
// guard, not a path).
func (tr *turn) buildCalls(items []store.Item) ([]call, []store.ItemUpdate) {
	per := tr.account.MaxRecipientsPerCall
	if per < 1 {
		per = 1
	}
	var calls []call
	var failed []store.ItemUpdate
	open := map[string]int{} // content → index of the open call
	for _, it := range items {
		text, err := tr.tmpl.Render(it.Vars)
		if err != nil {
			failed = append(failed, store.ItemUpdate{
				Seq: it.Seq, From: store.ItemSubmitted, ClaimID: it.ClaimID, To: store.ItemFailed,
				Error: &store.ItemError{Category: store.CategoryPermanent, Message: err.Error()},
			})
			continue
		}
		if i, ok := open[text]; ok && per > 1 && len(calls[i].items) < per {
			c := &calls[i]
			c.req.To = append(c.req.To, it.To)
			c.req.Keys = append(c.req.Keys, MessageKey(it.JobID, it.Seq))
			c.items = append(c.items, it)
			continue
		}
		open[text] = len(calls)
		calls = append(calls, call{
			req: provider.SendRequest{
				Account: it.Account, To: []string{it.To}, Keys: []string{MessageKey(it.JobID, it.Seq)}, Content: text,
			},
			items: []store.Item{it},
		})
	}
	return calls, failed
}

// MessageKey is the stable key of an item, sent to the provider as its
// idempotency key and used for status look-ups.
func MessageKey(jobID string, seq int64) string {
	return jobID + ":" + strconv.FormatInt(seq, 10)
}

// outcome maps a provider result to an item update.
func (tr *turn) outcome(claimID string, it store.Item, rr provider.RecipientResult, now time.Time) store.ItemUpdate {
	u := store.ItemUpdate{Seq: it.Seq, From: store.ItemSubmitted, ClaimID: claimID}
	perr := &store.ItemError{Category: string(rr.Category), Code: rr.Code, Message: rr.Message}
	switch {
	case rr.Accepted:
		u.To, u.MsgID = store.ItemConfirmed, rr.MsgID
	case rr.Category == provider.RateLimited || rr.Category == provider.AccountDown:
		// Nothing was sent: back to pending without using an attempt.
		u.To, u.AttemptsDelta, u.NextAttemptAt, u.Error = store.ItemPending, -1, now, perr
	case rr.Category == provider.Permanent:
		u.To, u.Error = store.ItemFailed, perr
	case rr.Category == provider.Uncertain:
		// The request may have been delivered: keep it submitted for the
		// reconciler. Never resend blindly.
		u.To, u.Error = store.ItemSubmitted, perr
	default: // retryable (and anything unknown: nothing was accepted)
		if it.Attempts >= tr.cfg.MaxAttempts {
			u.To = store.ItemFailed
			u.Error = &store.ItemError{Category: store.CategoryExhausted, Code: rr.Code,
				Message: fmt.Sprintf("gave up after %d attempts: %s", it.Attempts, rr.Message)}
		} else {
			u.To, u.Error = store.ItemPending, perr
			u.Error.Category = store.CategoryRetryable
			u.NextAttemptAt = now.Add(Backoff(tr.cfg.BackoffBase, tr.cfg.BackoffCap, it.Attempts, tr.s.rand()))
		}
	}
	return u
}

// Backoff is exponential backoff with full jitter: a uniformly random
// duration in [0, min(cap, base·2^(attempt−1))), drawn with r ∈ [0,1).
func Backoff(base, cap time.Duration, attempt int, r float64) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	ceil := float64(cap)
	if attempt < 62 {
		ceil = math.Min(ceil, float64(base)*math.Pow(2, float64(attempt-1)))
	}
	return time.Duration(r * ceil)
}

func (tr *turn) fold(d store.Counts, f map[string]int64) {
	tr.delta = tr.delta.Add(d)
	tr.shard.Counts = tr.shard.Counts.Add(d)
	for k, n := range f {
		if tr.failures == nil {
			tr.failures = map[string]int64{}
		}
		tr.failures[k] += n
	}
}

// flush folds pending progress into the shard. Ending the turn first waits
// for and records every call still running.
func (tr *turn) flush(ctx context.Context, endTurn bool) error {
	if endTurn {
		if err := tr.collectStragglers(ctx, true); err != nil {
			return err
		}
	}
	sh, err := tr.s.Store.AdvanceShard(ctx, store.AdvanceShardParams{
		JobID: tr.t.JobID, Index: tr.t.Shard, Turn: tr.t.Turn, Epoch: tr.shard.Epoch,
		Delta: tr.delta, FailuresDelta: tr.failures, Cursor: tr.cursor,
		SlowFactor: tr.slow, At: tr.s.Clock.Now(), EndTurn: endTurn,
		Attempts: tr.attempts, AttemptFailures: tr.attemptFailures,
	})
	if errors.Is(err, store.ErrConflict) {
		// A newer turn took the shard over; our unfolded delta is lost, so
		// make the counts true again from the items.
		if _, rerr := tr.s.Store.RecountShard(ctx, tr.t.JobID, tr.t.Shard); rerr != nil {
			return fmt.Errorf("recount superseded shard: %w", rerr)
		}
		return errSuperseded
	}
	if err != nil {
		return fmt.Errorf("advance shard: %w", err)
	}
	tr.delta, tr.failures = store.Counts{}, nil
	tr.attempts, tr.attemptFailures = 0, 0
	tr.shard.Counts, tr.shard.Epoch = sh.Counts, sh.Epoch
	tr.shard.Status, tr.shard.PauseReason, tr.shard.Turn = sh.Status, sh.PauseReason, sh.Turn
	tr.shardReadAt = tr.s.Clock.Now()
	return nil
}

func (tr *turn) claimID() string {
	return tr.msg.ID + "/" + strconv.FormatInt(tr.t.Turn, 10) + "/" + strconv.FormatInt(tr.s.Clock.Now().UnixNano(), 36) +
		strconv.FormatUint(rand.Uint64()&0xffffff, 36)
}

// end closes the turn without a continuation.
func (tr *turn) end(ctx context.Context, reason string) (Result, error) {
	if err := tr.flush(ctx, true); err != nil {
		return Result{}, err
	}
	return Result{Disposition: Done, Sent: tr.sent, Reason: reason}, nil
}

// continueLater ends the turn and enqueues the next one.
func (tr *turn) continueLater(ctx context.Context, reason string) (Result, error) {
	if err := tr.flush(ctx, true); err != nil {
		return Result{}, err
	}
	if err := dispatch.Send(context.WithoutCancel(ctx), tr.s.Queue, dispatch.Turn{JobID: tr.job.ID, Shard: tr.t.Shard, Turn: tr.t.Turn + 1}); err != nil {
		return Result{}, err
	}
	return Result{Disposition: Done, Sent: tr.sent, Reason: reason}, nil
}

// handBack returns the shard to the queue to be worked again after d:
// the message's visibility is set to d, or — when it has been handed back
// often — a fresh continuation replaces it (FIFO queues have no per-message
// delay, and every hand-back counts as a receive).
func (tr *turn) handBack(ctx context.Context, d time.Duration, why string) (Result, error) {
	if err := tr.flush(ctx, true); err != nil {
		return Result{}, err
	}
	tr.s.metrics().Handback(ctx)
	if tr.msg.ReceiveCount >= tr.cfg.RenewAfterReceives || tr.msg.ReceiptHandle == "" {
		return tr.continueLater(ctx, why+" (renewed)")
	}
	d = min(max(d, time.Second), tr.cfg.MaxHandBack)
	if err := tr.s.Queue.ChangeVisibility(context.WithoutCancel(ctx), tr.msg.ReceiptHandle, d); err != nil {
		return Result{}, fmt.Errorf("hand back shard: %w", err)
	}
	return Result{Disposition: HandedBack, Delay: d, Sent: tr.sent, Reason: why}, nil
}

// cancelShard abandons every pending item of the shard (cancel is
// irreversible and undoes nothing sent) and marks the shard cancelled.
func (tr *turn) cancelShard(ctx context.Context) (Result, error) {
	// Record the calls still running first: one that answers "retry"
	// returns its item to pending, and that item must be abandoned too.
	if err := tr.collectStragglers(ctx, true); err != nil {
		return Result{}, err
	}
	idx := tr.shard.Index
	for {
		page, err := tr.s.Store.ListItems(ctx, store.ListItemsParams{
			JobID: tr.job.ID, Status: store.ItemPending, Shard: &idx, Limit: store.MaxPutItems,
		})
		if err != nil {
			return Result{}, fmt.Errorf("list pending items: %w", err)
		}
		if len(page.Items) == 0 {
			break
		}
		ups := make([]store.ItemUpdate, 0, len(page.Items))
		for _, it := range page.Items {
			ups = append(ups, store.ItemUpdate{
				Seq: it.Seq, From: store.ItemPending, To: store.ItemAbandoned,
				Error: &store.ItemError{Category: store.CategoryCancelled, Message: "job cancelled"},
			})
		}
		res, err := tr.s.Store.UpdateItems(ctx, store.UpdateItemsParams{JobID: tr.job.ID, Index: idx, Updates: ups, At: tr.s.Clock.Now()})
		if err != nil {
			return Result{}, fmt.Errorf("abandon items: %w", err)
		}
		tr.fold(res.Delta, res.FailuresDelta)
		if err := tr.flush(ctx, false); err != nil {
			return Result{}, err
		}
	}
	if _, err := tr.s.Store.TransitionShard(ctx, store.TransitionShardParams{
		JobID: tr.job.ID, Index: idx, To: store.ShardCancelled, At: tr.s.Clock.Now(),
		From: []store.ShardStatus{store.ShardPending, store.ShardRunning, store.ShardPaused},
	}); err != nil && !errors.Is(err, store.ErrInvalidTransition) {
		return Result{}, fmt.Errorf("cancel shard: %w", err)
	}
	return tr.end(ctx, "job cancelled")
}

// finishShard marks the shard completed and, if it was the last one, ends
// the job: completed when everything was confirmed, partial when some items
// failed or were abandoned, failed when none was confirmed.
func (tr *turn) finishShard(ctx context.Context) (Result, error) {
	if err := tr.flush(ctx, true); err != nil {
		return Result{}, err
	}
	now := tr.s.Clock.Now()
	if _, err := tr.s.Store.TransitionShard(ctx, store.TransitionShardParams{
		JobID: tr.job.ID, Index: tr.shard.Index, From: []store.ShardStatus{store.ShardRunning, store.ShardPending},
		To: store.ShardCompleted, At: now,
	}); err != nil && !errors.Is(err, store.ErrInvalidTransition) {
		return Result{}, fmt.Errorf("complete shard: %w", err)
	}
	if err := FinishJob(ctx, tr.s.Store, tr.s.Alerts, tr.log, tr.job.ID, now); err != nil {
		return Result{}, err
	}
	return Result{Disposition: Done, Sent: tr.sent, Reason: "shard completed"}, nil
}
