package sender

import (
	"cmp"
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

// SuppressionMargin is how long before a job's creation an entry must
// have been added to its tenant's suppression list for the job's planning
// to have seen it for sure (the DynamoDB planner reads eventually
// consistently, and the API and the planner run on different clocks).
// The sender looks up the recipients of every batch of a job only when
// the list changed after its creation less this margin.
const SuppressionMargin = time.Minute

// suppressionsMayApply says whether an entry may have been added to the
// tenant's suppression list since the job was planned: then each batch is
// looked up before sending. The list's change mark is read at most every
// AccountRefresh, so an entry takes effect on running jobs within it.
func (tr *turn) suppressionsMayApply(ctx context.Context) (bool, error) {
	if now := tr.s.Clock.Now(); tr.suppReadAt.IsZero() || now.Sub(tr.suppReadAt) >= tr.cfg.AccountRefresh {
		at, err := tr.s.Store.SuppressionsChangedAt(ctx, tr.job.Tenant)
		if err != nil {
			return true, fmt.Errorf("suppression list: %w", err)
		}
		tr.suppMark, tr.suppReadAt = at, now
	}
	return !tr.suppMark.IsZero() && !tr.suppMark.Before(tr.job.CreatedAt.Add(-SuppressionMargin)), nil
}

// sendBatch renders and sends the claimed items and records outcomes.
func (tr *turn) sendBatch(ctx context.Context, claimID string, items []store.Item) error {
	claimed := items
	// The cursor passes every claimed item, sent or skipped below: the
	// canary counts items claimed by it, so a skipped one is part of the
	// canary (one of its failures), never replaced by a further item.
	for _, it := range items {
		if it.Seq+1 > tr.cursor {
			tr.cursor = it.Seq + 1
		}
	}
	// Recipients suppressed since the job was submitted are abandoned, not
	// sent (checked per batch, right before sending).
	keys := make([]store.RecipientKey, len(items))
	for i, it := range items {
		keys[i] = store.RecipientKey{Account: it.Account, To: it.To}
	}
	var suppressed map[store.RecipientKey]bool
	if may, err := tr.suppressionsMayApply(ctx); err != nil {
		return err
	} else if may {
		if suppressed, err = tr.s.Store.SuppressedAmong(ctx, tr.job.Tenant, keys); err != nil {
			return fmt.Errorf("suppression look-up: %w", err)
		}
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
	given := tr.giveSlots(len(calls))
	updates = append(updates, skipped...)
	// Updates decided without a call (unrenderable, suppressed, capped)
	// need their items for their outcomes: the claimed ones, only then.
	var uncalled []store.Item
	if len(updates) > 0 {
		uncalled = claimed
	}
	tr.sent += len(items)
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
	// The sizer as of this batch: a paced batch's calls start later, at
	// their slots, while the turn goes on (and may re-read the account).
	z := tr.sizing
	start := func(i int, pc *pendingCall) {
		c := pc.c
		go func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			if z != nil && !paced {
				if i >= given {
					// More calls than the slots taken before the claim
					// (claimSize keeps this from happening): wait for one.
					z.acquire()
				}
				defer z.release()
			}
			began := tr.s.Clock.Now()
			pc.startedAt = began
			close(pc.started)
			r, err := tr.s.Provider.Send(callCtx, c.req)
			if z != nil {
				z.observe(len(c.req.To), tr.s.Clock.Now().Sub(began), tr.s.Clock.Now())
			}
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
	return tr.record(ctx, done, updates, uncalled)
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
	return tr.record(ctx, ready, nil, nil)
}

// record turns answered calls into item outcomes, stores them (with extra,
// updates decided without a call, of some of extraItems: suppressed,
// frequency-capped), folds them into the shard and applies slow-down and
// breaker rules.
func (tr *turn) record(ctx context.Context, calls []*pendingCall, extra []store.ItemUpdate, extraItems []store.Item) error {
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
	if err := tr.recordMsgCalls(context.WithoutCancel(ctx), calls, now); err != nil {
		return err
	}
	res, err := tr.updateItems(context.WithoutCancel(ctx), updates, now)
	if err != nil {
		return fmt.Errorf("record outcomes: %w", err)
	}
	if len(res.Rejected) > 0 {
		tr.log.Error("outcomes rejected: items no longer held by this claim", slog.Int("rejected", len(res.Rejected)))
	}
	tr.publishOutcomes(ctx, calls, extraItems, updates, res.Rejected, now)
	tr.fold(res.Delta, res.FailuresDelta)
	tr.giveBackBudget(ctx, int64(notSent))
	if rateLimited > 0 {
		tr.slow = math.Max(tr.cfg.MinSlowFactor, tr.slow/2)
		tr.log.Warn("rate limited by provider; slowing down", slog.Int("items", rateLimited), slog.Float64("slow_factor", tr.slow))
	} else if tr.slow < 1 && len(calls) > 0 {
		// Additive recovery: from half speed to full in five clean batches.
		tr.slow = math.Min(1, tr.slow+0.1)
	}
	if tr.unfolded++; tr.unfolded >= tr.cfg.FoldEvery {
		if err := tr.flush(ctx, false); err != nil {
			return err
		}
	}
	if len(calls) == 0 {
		return nil
	}
	return tr.judgeBreaker(ctx, accountDown, batchFailed)
}

// recordMsgCalls stores, before their items are recorded, the calls
// accepted under a message id whose result comes later, so a provider
// event or the reconciler finds their items by it. Without a MsgCallStore
// such items stay submitted and go to review after the settle delay.
func (tr *turn) recordMsgCalls(ctx context.Context, calls []*pendingCall, now time.Time) error {
	if tr.s.MsgCalls == nil {
		return nil
	}
	for _, pc := range calls {
		byID := map[string]*store.MsgCall{}
		var order []string
		for j, it := range pc.c.items {
			if j >= len(pc.result.Recipients) {
				break
			}
			rr := pc.result.Recipients[j]
			if !rr.Accepted || !rr.AwaitConfirm || rr.MsgID == "" {
				continue
			}
			mc, ok := byID[rr.MsgID]
			if !ok {
				mc = &store.MsgCall{Account: cmp.Or(rr.EventAccount, it.Account), MsgID: rr.MsgID, JobID: it.JobID, Shard: it.Shard, ClaimID: pc.claimID, At: now}
				byID[rr.MsgID] = mc
				order = append(order, rr.MsgID)
			}
			mc.Seqs = append(mc.Seqs, it.Seq)
		}
		for _, id := range order {
			if err := tr.s.MsgCalls.PutMsgCall(ctx, *byID[id]); err != nil {
				return fmt.Errorf("record provider message id %s: %w", id, err)
			}
		}
	}
	return nil
}

// updateItems writes the updates in pages of store.MaxPutItems: the calls
// recorded together (a batch and the stragglers that answered since, or
// every straggler at the end of a turn) can hold more recipients than one
// UpdateItems takes (the SQLite store refuses over 1,000). A page that
// fails stops the rest and fails the turn, whose shard the next turn
// recounts (as for any failed write).
func (tr *turn) updateItems(ctx context.Context, updates []store.ItemUpdate, now time.Time) (store.UpdateItemsResult, error) {
	var out store.UpdateItemsResult
	for start := 0; start < len(updates); start += store.MaxPutItems {
		res, err := tr.s.Store.UpdateItems(ctx, store.UpdateItemsParams{
			JobID: tr.job.ID, Index: tr.shard.Index, Updates: updates[start:min(len(updates), start+store.MaxPutItems)], At: now,
		})
		if err != nil {
			return out, err
		}
		out.Delta = out.Delta.Add(res.Delta)
		for k, n := range res.FailuresDelta {
			if out.FailuresDelta == nil {
				out.FailuresDelta = map[string]int64{}
			}
			out.FailuresDelta[k] += n
		}
		out.Rejected = append(out.Rejected, res.Rejected...)
	}
	return out, nil
}

type call struct {
	req   provider.SendRequest
	items []store.Item
}

// claimSize is how many items a batch asks for. Every call of a batch
// starts at once, so a batch holds no more calls than call slots: one item
// per call in general. When the template has no variables every item
// renders the same text, and a batch makes calls of the account's batch
// size (callSize) each, so such a batch claims ClaimBatch calls' worth of
// items, in whole calls, up to store.MaxPutItems (the most one suppression
// look-up or outcome write takes) less one call: when the shard's pending
// items are within a call of that, the batch takes them all, so its last
// call is not left with a handful of recipients (buildCalls spreads them).
// Tokens are still taken one per recipient: the rate is never exceeded.
func (tr *turn) claimSize() int {
	return tr.claimSizeFor(min(tr.cfg.ClaimBatch, tr.cfg.Concurrency))
}

// claimSizeFor is claimSize for a batch of at most calls calls: the items
// it claims never make more calls than that (callsFor).
func (tr *turn) claimSizeFor(calls int) int {
	per := tr.callSize()
	if !tr.packed() {
		return calls
	}
	most := max(per, (store.MaxPutItems-per)/per*per)
	want := max(calls, min(calls*per, most))
	if p := int(tr.shard.Counts.Pending); p > want && p < want+per && p <= store.MaxPutItems && tr.callsFor(p) <= calls {
		return p
	}
	return want
}

// packed reports whether the turn's items all render the same text and
// the account takes several recipients per call.
func (tr *turn) packed() bool {
	return tr.callSize() > 1 && len(tr.tmpl.Vars()) == 0
}

// callsFor is how many calls n claimed items make at most (buildCalls).
func (tr *turn) callsFor(n int) int {
	if !tr.packed() {
		return n
	}
	size, hi := tr.callSize(), tr.callLimit()
	return max(1, (n+hi-1)/hi, n/size)
}

// callLimit is the most recipients buildCalls puts in one call: the
// account's limit while the batch size is its 80%, else the batch size.
func (tr *turn) callLimit() int {
	size, limit := tr.callSize(), tr.perCall()
	if size >= topCallSize(limit) {
		return limit
	}
	return size
}

// callSize is how many recipients a call of identical content carries:
// the account's batch size as measured (see sizing.go), 80% of its
// max_recipients_per_call before any measurement.
func (tr *turn) callSize() int {
	if tr.sizing != nil {
		return tr.sizing.batchSize()
	}
	return topCallSize(tr.perCall())
}

// topCallSize is the batch size of an account allowing limit recipients
// per call before latency lowers it: SizingShare of it, at least 1.
func topCallSize(limit int) int {
	return max(1, int(math.Floor(SizingShare*float64(limit))))
}

// perCall is how many recipients one call carries: the account's
// max_recipients_per_call, never more than its provider takes in a call.
func (tr *turn) perCall() int { return perCall(tr.account) }

// perCall is the most recipients a call of account a carries: its
// max_recipients_per_call, never more than its provider takes in a call.
func perCall(a store.Account) int {
	return max(1, min(a.MaxRecipientsPerCall, provider.KindOf(a.Provider).MaxPerCall()))
}

// buildCalls renders items and groups those with equal content into calls
// of about the account's batch size (callSize): a group of n items makes
// max(⌈n/hi⌉, ⌊n/size⌋, 1) calls of equal size (±1). While the batch size
// is its 80% (the latency is fine), hi is max_recipients_per_call: calls
// carry at least the batch size whenever the group has that many, and a
// group's remainder rides along in its calls, within the account's limit,
// instead of going out as a small call of its own. While the latency keeps
// the batch size lower, hi is the batch size: no call is larger. Items
// that cannot be rendered fail permanently (the template was checked at
// submit, so this is a bug guard, not a path).
func (tr *turn) buildCalls(items []store.Item) ([]call, []store.ItemUpdate) {
	size, hi := tr.callSize(), tr.callLimit()
	var failed []store.ItemUpdate
	var order []string
	groups := map[string][]store.Item{}
	for _, it := range items {
		text, err := tr.tmpl.Render(it.Vars)
		if err != nil {
			failed = append(failed, store.ItemUpdate{
				Seq: it.Seq, From: store.ItemSubmitted, ClaimID: it.ClaimID, To: store.ItemFailed,
				Error: &store.ItemError{Category: store.CategoryPermanent, Message: err.Error()},
			})
			continue
		}
		if _, ok := groups[text]; !ok {
			order = append(order, text)
		}
		groups[text] = append(groups[text], it)
	}
	var calls []call
	for _, text := range order {
		g := groups[text]
		n := len(g)
		k := max(1, (n+hi-1)/hi, n/size)
		for i, start := 0, 0; i < k; i++ {
			end := start + n/k
			if i < n%k {
				end++
			}
			c := call{req: provider.SendRequest{Account: g[start].Account, Content: text}, items: g[start:end:end]}
			for _, it := range c.items {
				c.req.To = append(c.req.To, it.To)
				c.req.Keys = append(c.req.Keys, MessageKey(it.JobID, it.Seq))
			}
			calls = append(calls, c)
			start = end
		}
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
	case rr.Accepted && rr.AwaitConfirm:
		// Accepted, not yet confirmed: the provider's event or a look-up
		// by its message id settles it (store.MsgCall).
		u.To, u.MsgID = store.ItemSubmitted, rr.MsgID
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
