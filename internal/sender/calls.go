package sender

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"strconv"
	"time"

	"github.com/qunfa/qunfa/internal/provider"
	"github.com/qunfa/qunfa/internal/store"
)

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
	// A paced account's calls each wait for their own slot (one per call,
	// in order), and the turn goes on meanwhile: their answers are
	// recorded as those of stragglers.
	slots := tr.slots
	tr.slots = nil
	paced := len(slots) > 0
	if paced && len(calls) > 0 {
		tr.lastSlot = slots[min(len(calls), len(slots))-1]
	}
	if d := tr.spacing(tr.s.Clock.Now()); d > 0 && len(calls) > 0 && !paced {
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
	start := func(i int, pc *pendingCall) {
		c := pc.c
		go func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			pc.startedAt = tr.s.Clock.Now()
			close(pc.started)
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
			pc.answeredAt = tr.s.Clock.Now()
			close(pc.done)
			answered <- i
		}()
	}
	for i, c := range calls {
		pending[i] = &pendingCall{c: c, claimID: claimID, started: make(chan struct{}), done: make(chan struct{})}
	}
	if paced {
		tr.dispatchAtSlots(pending, slots, start)
	} else {
		for i, pc := range pending {
			start(i, pc)
		}
	}
	var done []*pendingCall
	var deadline <-chan time.Time // a probe waits for all its answers
	switch {
	case tr.probe:
		if paced {
			tr.untilLastSlot(ctx)
		}
	case paced:
		now := make(chan time.Time)
		close(now)
		deadline = now
	default:
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
	if len(done) < len(calls) && !paced {
		tr.log.Warn("slow provider calls left running; the batch is recorded without them",
			slog.Int("calls", len(calls)-len(done)), slog.Duration("waited", tr.cfg.StragglerWait))
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
	// started is closed when the call starts (at startedAt), done when it
	// was answered (at answeredAt, with result).
	started, done         chan struct{}
	startedAt, answeredAt time.Time
	result                provider.SendResult
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
	if block {
		tr.untilLastSlot(ctx)
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

// dispatchAtSlots starts each call of a paced batch at its slot (one slot
// per call, in order: a batch claims one call's worth of items per slot),
// from one goroutine that follows the previous batch's, so the turn goes
// on meanwhile. The waits for the slots are set up before the turn moves
// on, so a fake clock moved by the turn wakes them in time.
//
// A slot is when a call may start, not when the provider sees it: a busy
// machine delays one call and not the next. So a call also waits for the
// answer to the call before it and starts no sooner than min_gap_ms after
// that answer, and 1/rate after the answer to the call two before: the
// provider received those calls before it answered them, so it never sees
// two sends closer than the min gap nor three within 1/rate, however late
// one of them went out. It waits for that answer only when it is overdue
// (three times the turn's usual answer time has passed: the machine or the
// provider stalls), at most StragglerWait; an answer not overdue is not
// waited for, so a provider that is slow but steady does not hold the
// account under its rate, and the schedule's floor and pair span from
// the starts before keep those calls apart.
func (tr *turn) dispatchAtSlots(calls []*pendingCall, slots []time.Time, start func(int, *pendingCall)) {
	wakes := make([]<-chan time.Time, len(calls))
	now := tr.s.Clock.Now()
	for i := range calls {
		if d := slots[min(i, len(slots)-1)].Sub(now); d > 0 {
			wakes[i] = tr.s.Clock.After(d)
		}
	}
	rate := tr.account.BatchRate()
	if tr.job.RatePerSec > 0 {
		rate = math.Min(rate, tr.job.RatePerSec)
	}
	minGap := time.Duration(tr.account.Pacing.MinGapMs) * time.Millisecond
	floor, pair, _ := store.PaceGaps(1/rate, minGap)
	window := time.Duration(float64(time.Second) / rate)
	prev, done := tr.dispatching, make(chan struct{})
	tr.dispatching = done
	wait := tr.cfg.StragglerWait
	go func() {
		defer close(done)
		if prev != nil {
			<-prev
		}
		for i, pc := range calls {
			if wakes[i] != nil {
				<-wakes[i]
			}
			last, before := tr.lastCalls[0], tr.lastCalls[1]
			// First the distance from the starts before...
			var earliest time.Time
			if last != nil {
				<-last.started
				earliest = last.startedAt.Add(time.Duration(floor * float64(time.Second)))
			}
			if before != nil {
				earliest = later(earliest, before.startedAt.Add(time.Duration(pair*float64(time.Second))))
			}
			tr.sleepUntil(earliest)
			// ...then from the answers, once they are due.
			if last != nil && tr.answered(last, wait) {
				tr.sleepUntil(last.answeredAt.Add(minGap))
			}
			if before != nil {
				select {
				case <-before.done:
					tr.sleepUntil(before.answeredAt.Add(window))
				default:
				}
			}
			tr.lastCalls = [2]*pendingCall{pc, last}
			start(i, pc)
		}
	}()
}

// answered tells whether pc has been answered, waiting for its answer
// when it is overdue (three times the usual answer time since it started:
// a stall), at most wait. It keeps the usual answer time, which falls
// fast and rises slowly, so the stalls it is there to catch do not raise
// it.
func (tr *turn) answered(pc *pendingCall, wait time.Duration) bool {
	select {
	case <-pc.done:
	default:
		if tr.s.Clock.Now().Sub(pc.startedAt) <= 3*tr.answerTime+5*time.Millisecond {
			return false // in flight, not overdue: a slow provider, not a stall
		}
		select {
		case <-pc.done:
		case <-tr.s.Clock.After(wait):
			return false
		}
	}
	if lat := pc.answeredAt.Sub(pc.startedAt); lat < tr.answerTime {
		tr.answerTime = (tr.answerTime + lat) / 2
	} else {
		tr.answerTime += (lat - tr.answerTime) / 16
	}
	return true
}

// sleepUntil waits until t (at once when t has passed).
func (tr *turn) sleepUntil(t time.Time) {
	if d := t.Sub(tr.s.Clock.Now()); d > 0 {
		_ = tr.s.Clock.Sleep(context.Background(), d)
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
