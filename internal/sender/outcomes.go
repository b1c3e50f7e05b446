package sender

import (
	"context"
	"slices"
	"time"

	"github.com/qunfa/qunfa/internal/alert"
	"github.com/qunfa/qunfa/internal/store"
)

// maxOutcomesBytes bounds the size of one ItemOutcomes event's items
// (outcomeSize): an event stays within one 64 KB chunk, what EventBridge
// bills as one event, and far below its 256 KB entry limit. About 300
// outcomes of a typical size.
const maxOutcomesBytes = 48 << 10

// outcomeSize is an upper bound of an outcome's size in JSON for the
// usual recipient ids and references (keys, seq and time take ~140 bytes;
// a character JSON escapes is counted once).
func outcomeSize(o alert.ItemOutcome) int {
	return 160 + len(o.Account) + len(o.To) + len(o.Ref) + len(o.Status) + len(o.Category) + len(o.Code) + len(o.MsgID)
}

// outcomesMaxHold is how long the turn holds the outcomes of a batch for
// the next ones before publishing them: outcomes go out in events of up to
// maxOutcomesBytes, at the latest this long after the first one was
// recorded, before any job event of the turn (paused, canary ready,
// finished) and when the turn ends. One event per batch of ten cost as
// much as the rest of a message's delivery on AWS.
const outcomesMaxHold = 5 * time.Second

// publishOutcomes adds the final outcomes of one recorded batch to the
// outcomes the turn holds (nothing when Sender.Outcomes is nil or nothing
// in the batch became final), and publishes them when they are many or
// old enough (flushOutcomesDue). Updates the store rejected are left out:
// another claimer owns those items now.
func (tr *turn) publishOutcomes(ctx context.Context, calls []*pendingCall, updates []store.ItemUpdate, rejected []int64, now time.Time) {
	if tr.s.Outcomes == nil {
		return
	}
	items := map[int64]store.Item{}
	for _, pc := range calls {
		for _, it := range pc.c.items {
			items[it.Seq] = it
		}
	}
	var out []alert.ItemOutcome
	for _, u := range updates {
		switch u.To {
		case store.ItemConfirmed, store.ItemFailed, store.ItemAbandoned:
		default:
			continue
		}
		it, ok := items[u.Seq]
		if !ok || slices.Contains(rejected, u.Seq) {
			continue
		}
		o := alert.ItemOutcome{Seq: u.Seq, Account: it.Account, To: it.To, Ref: it.Ref, Status: string(u.To), MsgID: u.MsgID, At: now}
		if u.Error != nil {
			o.Category, o.Code = u.Error.Category, u.Error.Code
		}
		out = append(out, o)
	}
	if len(out) == 0 {
		return
	}
	if len(tr.heldOutcomes) == 0 {
		tr.heldSince = now
	}
	tr.heldOutcomes = append(tr.heldOutcomes, out...)
	for _, o := range out {
		tr.heldBytes += outcomeSize(o)
	}
	tr.flushOutcomesDue(ctx)
}

// flushOutcomesDue publishes the held outcomes when they fill an event or
// the first has waited outcomesMaxHold.
func (tr *turn) flushOutcomesDue(ctx context.Context) {
	if tr.heldBytes >= maxOutcomesBytes ||
		(len(tr.heldOutcomes) > 0 && tr.s.Clock.Now().Sub(tr.heldSince) >= outcomesMaxHold) {
		tr.flushOutcomes(ctx)
	}
}

// flushOutcomes publishes every held outcome, in events of at most
// maxOutcomesBytes, in the order recorded. An event's time is that of its
// last outcome, not of the flush: a job event that follows the flush but
// was timed before it (finishShard's) still comes after the outcomes in
// time order, the order webhooks deliver in.
func (tr *turn) flushOutcomes(ctx context.Context) {
	for len(tr.heldOutcomes) > 0 {
		n, size := 0, 0
		var last time.Time
		for n < len(tr.heldOutcomes) && (n == 0 || size+outcomeSize(tr.heldOutcomes[n]) <= maxOutcomesBytes) {
			size += outcomeSize(tr.heldOutcomes[n])
			last = maxTime(last, tr.heldOutcomes[n].At)
			n++
		}
		alert.Emit(ctx, tr.s.Outcomes, tr.log, alert.Event{Type: alert.ItemOutcomes, Tenant: tr.job.Tenant, Time: last,
			Detail: alert.ItemOutcomesDetail{JobID: tr.job.ID, Items: slices.Clone(tr.heldOutcomes[:n])}})
		tr.heldOutcomes = tr.heldOutcomes[n:]
	}
	tr.heldOutcomes, tr.heldBytes = nil, 0
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
