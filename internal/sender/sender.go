// Package sender works one turn of one shard: the handler behind every
// work-queue message, in Lambda and in the local runtime alike.
//
// A turn loops over batches. At every batch boundary it re-reads the job and
// shard (pause, cancel and breaker take effect there, never mid-call), takes
// tokens from the account's bucket, reserves budget, claims items (pending →
// submitted) *before* calling the provider, calls the provider, records the
// outcomes and, every FoldEvery recordings, advances the shard. It never
// waits long: when tokens or due items are more than MaxWait away, it hands
// the shard back to the queue with a delay. When its time is up it
// enqueues a continuation turn. When the shard has nothing pending or
// submitted it finishes the shard and, with the last shard, the job.
package sender

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
	// by other shards take effect within it. The turns of one process
	// share the account's read (Sender.Accounts). The job's status is read at
	// every batch (pause and cancel act at the next item boundary).
	AccountRefresh time.Duration
	// AccountConcurrency is the most provider calls in flight per account
	// in this process, across its turns (default 4 × Concurrency). Within
	// it, Little's law sets the account's calls in flight from its measured
	// latency (see sizing.go).
	AccountConcurrency int
	// MaxHandBack caps the delay of a hand-back (default 15 min): a shard
	// whose next token is further away comes back earlier and hands itself
	// back again, so no delay ever exceeds the queue's visibility limit
	// (12 h on SQS), however small the rate.
	MaxHandBack time.Duration
	// FoldEvery is how many batches' outcomes a turn folds into its shard
	// record with one AdvanceShard (default 2), and always all of them
	// when the turn ends, hands back or continues. The shard record is one
	// of the four writes of a batch (tokens, claim, outcomes, shard):
	// folding every second batch takes single-recipient sends from 0.4 to
	// 0.35 write units per message on DynamoDB. The shard's counts and
	// last-advanced time lag by at most FoldEvery−1 batches, and a newer
	// turn is noticed at the next fold (or AccountRefresh's read of the
	// shard); a turn that dies with outcomes not folded leaves its shard
	// Dirty, so the next turn recounts it from the items (store.Store).
	FoldEvery int
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
	if c.AccountConcurrency <= 0 {
		c.AccountConcurrency = 4 * c.Concurrency
	}
	if c.MaxHandBack <= 0 {
		c.MaxHandBack = 15 * time.Minute
	}
	if c.FoldEvery <= 0 {
		c.FoldEvery = 2
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
	// Outcomes receives ItemOutcomes events of the final outcomes the turns
	// record, up to maxOutcomesBytes each, at most outcomesMaxHold
	// after the first (nil: none); webhooks deliver them as items.outcomes.
	Outcomes alert.Publisher
	// Breakers is the accounts' circuit breakers (nil: no breaker).
	Breakers *breaker.Breakers
	// Metrics receives token waits, hand-backs and active shards (nil:
	// none). Sends, failures and provider latency are measured by wrapping
	// the Provider with metrics.Provider.
	Metrics metrics.Recorder
	// Rand draws backoff jitter in [0,1); nil uses math/rand/v2.
	Rand func() float64
	// MsgCalls records calls accepted under a provider message id whose
	// result comes later (nil: their items go to review after the settle
	// delay).
	MsgCalls store.MsgCallStore
	// Sizers measures each account's calls and chooses its batch size and
	// calls in flight (see sizing.go), shared by the process's turns and
	// by every copy of the Sender (nil: no measurement; calls of identical
	// content carry 80% of the account's max_recipients_per_call and only
	// Concurrency bounds a turn's calls in flight).
	Sizers *Sizers
	// Accounts holds each account as this process last read it, shared
	// by the process's turns and every copy of the Sender (nil: each turn
	// reads its account once per AccountRefresh on its own).
	Accounts *AccountReads
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
	// The shard's earlier turns ended with every call answered, before
	// this one began: to a paced account's first calls, the turn's start
	// stands for the last two calls' starts and answers (dispatchAtSlots).
	before := &pendingCall{started: make(chan struct{}), done: make(chan struct{}), startedAt: start, answeredAt: start}
	close(before.started)
	close(before.done)
	tr.lastCalls = [2]*pendingCall{before, before}
	if dl, ok := ctx.Deadline(); ok {
		tr.deadline = dl.Add(-cfg.DeadlineMargin)
	}
	if d := start.Add(cfg.TurnDuration); tr.deadline.IsZero() || d.Before(tr.deadline) {
		tr.deadline = d
	}
	res, err := tr.run(ctx)
	tr.returnSlots()
	// The calls answered last (stragglers recorded as the turn ended) may
	// have changed the account's sizing after the last batch noted it.
	tr.noteSizing(context.WithoutCancel(ctx))
	if err != nil {
		// Calls still running went out: wait for their answers and record
		// them, so an item the provider answered for is not left submitted
		// for the reconciler to look up.
		tr.recordStragglers(context.WithoutCancel(ctx))
	}
	tr.flushOutcomes(context.WithoutCancel(ctx))
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
	// unfolded counts the batches recorded since the last flush
	// (Config.FoldEvery).
	unfolded int
	// stragglers are provider calls still running after their batch was
	// recorded (see Config.StragglerWait).
	stragglers []*pendingCall
	// accountReadAt and gateReadAt are when the account and its breaker
	// decision were last read (zero: read at the next batch); shardReadAt
	// when the shard was last read or returned by a flush.
	accountReadAt, gateReadAt, shardReadAt time.Time
	// suppMark is the tenant's SuppressionsChangedAt, read at suppReadAt.
	suppMark, suppReadAt time.Time
	gateDecision         breaker.Decision

	// lastAnswerAt is when the last provider call was answered.
	lastAnswerAt time.Time
	// slots are the send slots of a paced account's next batch (one per
	// call), lastSlot the latest slot taken, and jobTokens the job's tokens
	// taken for slots not granted yet (see takeSlots).
	slots     []time.Time
	lastSlot  time.Time
	jobTokens int
	// dispatching is closed when the last paced batch has started all its
	// calls; lastCalls are the last two paced calls started, the last
	// first (used only by the batches' dispatchers, one after the other).
	dispatching chan struct{}
	lastCalls   [2]*pendingCall
	// answerTime is the paced calls' usual answer time (quick to fall,
	// slow to rise; kept by the dispatchers).
	answerTime time.Duration
	// tokenWaiting: the last iteration waited for tokens; stateReadAt is
	// when the job and shard state was last checked.
	tokenWaiting bool
	stateReadAt  time.Time

	// sizing is the process's sizer of the account (set with the account);
	// callSlots are the account's call slots this batch holds, not yet
	// given to a call.
	sizing    *accountSizer
	callSlots int

	// canaryBase is the shard's first seq and canaryEnd one past its last
	// canary seq, once canaryKnown.
	canaryBase, canaryEnd int64
	canaryKnown           bool

	// heldOutcomes are final outcomes not published yet, the first
	// recorded at heldSince, heldBytes their outcomeSize (see
	// publishOutcomes).
	heldOutcomes []alert.ItemOutcome
	heldSince    time.Time
	heldBytes    int
	// replayed: the turn published the shard's outcomes again at its
	// start and its next fold clears the marks, if folded at the epoch
	// the turn read (see flush).
	replayed bool

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
	tr.replayOutcomes(ctx)
	for {
		tr.returnSlots() // call slots not given to a call last batch
		tr.flushOutcomesDue(ctx)
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
		paced := tr.account.Pacing.Random()
		if wait := tr.spacing(now) - spacingLead; wait > 0 && !paced {
			if res, done, err := tr.wait(stopCtx, wait, "spacing sends"); done || err != nil {
				return res, err
			}
			continue
		}
		if paced && tr.shard.Counts.Pending == 0 {
			// Only calls in flight are left: a slot taken now would go
			// unused and delay the account's other shards. Their answers
			// may return items to pending.
			if err := tr.collectStragglers(ctx, true); err != nil {
				return Result{}, err
			}
			continue
		}
		// Call slots before tokens and the claim: every call of the batch
		// then starts at once, right after its claim.
		want, ok := tr.takeCallSlots(want)
		if !ok {
			if res, done, err := tr.waitForCallSlot(stopCtx); done || err != nil {
				return res, err
			}
			tr.tokenWaiting = true // poll the job state as when waiting for tokens
			continue
		}
		var granted int
		var wait time.Duration
		var err error
		if paced {
			tr.slots = nil // slots of a batch that claimed nothing are lost
			granted, wait, err = tr.takeSlots(ctx, want, now)
		} else {
			granted, wait, err = tr.takeTokens(ctx, want, now)
		}
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
			// Tokens (and slots) taken but unused are lost: the account
			// stays under its rate.
			tr.slots = nil
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
		tr.noteSizing(ctx)
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
	err := store.WorkItems(ctx, tr.s.Store, store.ListItemsParams{JobID: tr.job.ID, Status: store.ItemPending, Shard: &idx, Limit: store.MaxPutItems},
		func(items []store.Item) (bool, bool, error) {
			ups := make([]store.ItemUpdate, 0, len(items))
			for _, it := range items {
				ups = append(ups, store.ItemUpdate{
					Seq: it.Seq, From: store.ItemPending, To: store.ItemAbandoned,
					Error: &store.ItemError{Category: store.CategoryCancelled, Message: "job cancelled"},
				})
			}
			res, err := tr.s.Store.UpdateItems(ctx, store.UpdateItemsParams{JobID: tr.job.ID, Index: idx, Updates: ups, At: tr.s.Clock.Now()})
			if err != nil {
				return false, false, fmt.Errorf("abandon items: %w", err)
			}
			tr.fold(res.Delta, res.FailuresDelta)
			return len(res.Rejected) < len(ups), false, tr.flush(ctx, false)
		})
	if err != nil {
		return Result{}, err
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
	tr.flushOutcomes(ctx) // the items' outcomes before the job's end
	if err := FinishJob(ctx, tr.s.Store, tr.s.Alerts, tr.log, tr.job.ID, now); err != nil {
		return Result{}, err
	}
	return Result{Disposition: Done, Sent: tr.sent, Reason: "shard completed"}, nil
}
