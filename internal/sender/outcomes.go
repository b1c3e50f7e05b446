package sender

import (
	"context"
	"errors"
	"log/slog"
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
// old enough (flushOutcomesDue). The items updated are those of calls and,
// for updates decided without a call (a suppressed or frequency-capped
// recipient, abandoned unsent), of others. Updates the store rejected are
// left out: another claimer owns those items now.
func (tr *turn) publishOutcomes(ctx context.Context, calls []*pendingCall, others []store.Item, updates []store.ItemUpdate, rejected []int64, now time.Time) {
	if tr.s.Outcomes == nil {
		return
	}
	n := len(others)
	for _, pc := range calls {
		n += len(pc.c.items)
	}
	// Pointers: an Item is large, and copying each into the map was most
	// of this function's cost at 100 recipients per call.
	items := make(map[int64]*store.Item, n)
	for i := range others {
		items[others[i].Seq] = &others[i]
	}
	for _, pc := range calls {
		for i := range pc.c.items {
			items[pc.c.items[i].Seq] = &pc.c.items[i]
		}
	}
	out := make([]alert.ItemOutcome, 0, len(updates))
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
	tr.holdOutcomes(now, out...)
	tr.flushOutcomesDue(ctx)
}

// flushOutcomesDue publishes the held outcomes when they fill an event or
// the first has waited outcomesMaxHold (since the last failed publish,
// when one failed).
func (tr *turn) flushOutcomesDue(ctx context.Context) {
	if tr.heldBytes >= maxOutcomesBytes ||
		(len(tr.heldOutcomes) > 0 && tr.s.Clock.Now().Sub(tr.heldSince) >= outcomesMaxHold) {
		tr.flushOutcomes(ctx)
	}
}

// flushOutcomes publishes every held outcome, in events of at most
// maxOutcomesBytes, in the order recorded, and reports whether all went
// out. An event's time is that of its last outcome, not of the flush: a
// job event that follows the flush but was timed before it
// (finishShard's) still comes after the outcomes in time order, the order
// webhooks deliver in. An event the publisher refuses stays held, with
// those after it, to be published again outcomesMaxHold later or when the
// turn ends; what the turn ends with unpublished, the next turn publishes
// again (the shard's replay mark, see flush).
func (tr *turn) flushOutcomes(ctx context.Context) bool {
	for len(tr.heldOutcomes) > 0 {
		n, size := 0, 0
		var last time.Time
		for n < len(tr.heldOutcomes) && (n == 0 || size+outcomeSize(tr.heldOutcomes[n]) <= maxOutcomesBytes) {
			size += outcomeSize(tr.heldOutcomes[n])
			last = maxTime(last, tr.heldOutcomes[n].At)
			n++
		}
		ev := alert.Event{Type: alert.ItemOutcomes, Tenant: tr.job.Tenant, Time: last,
			Detail: alert.ItemOutcomesDetail{JobID: tr.job.ID, Items: slices.Clone(tr.heldOutcomes[:n])}}
		if err := tr.s.Outcomes.Publish(context.WithoutCancel(ctx), ev); err != nil {
			tr.log.Error("publish outcomes; kept to publish again", slog.Int("outcomes", len(tr.heldOutcomes)), slog.Any("err", err))
			tr.heldSince = tr.s.Clock.Now()
			return false
		}
		tr.heldBytes -= size
		tr.heldOutcomes = tr.heldOutcomes[n:]
	}
	tr.heldOutcomes, tr.heldBytes = nil, 0
	return true
}

// outcomesWatermark is the time up to which every outcome this turn
// recorded has been published, for the shard's watermark at a fold at
// now: just before the first held outcome, else now (the turn times its
// outcomes by the same clock, so those it records later finish after).
// The store moves the shard's only while no outside change is unfinished
// (their outcomes may not be out). Zero (the shard's stays) without a
// publisher.
func (tr *turn) outcomesWatermark(now time.Time) time.Time {
	if tr.s.Outcomes == nil {
		return time.Time{}
	}
	if len(tr.heldOutcomes) == 0 {
		return now
	}
	first := tr.heldOutcomes[0].At
	for _, o := range tr.heldOutcomes[1:] {
		if o.At.Before(first) {
			first = o.At
		}
	}
	return first.Add(-time.Nanosecond)
}

// replayOutcomes publishes again, before the turn sends anything, the
// outcomes of the shard's items that finished after its watermark less
// store.OutcomesReplayMargin, when the shard is marked for it
// (store.OutcomesNeedReplay): the previous turn died between recording
// outcomes and publishing them or could not publish them, or an outside
// change (the reconciler, a provider event, an operator) began and did
// not end for a minute, as one that died before publishing would. Outcomes are at least
// once: a subscriber dedupes on job id and seq. When every one went out,
// the turn's next fold clears the mark; otherwise the next turn tries
// again. The turn reads its job record first (the events' tenant).
func (tr *turn) replayOutcomes(ctx context.Context) {
	if !store.OutcomesNeedReplay(tr.shard, tr.start) {
		return
	}
	if tr.s.Outcomes == nil {
		tr.replayed = true
		return
	}
	job, err := tr.s.Store.GetJobRecord(ctx, tr.t.JobID)
	if err != nil {
		tr.log.Error("replay outcomes: read job", slog.Any("err", err))
		return
	}
	if err := tr.adoptJob(job); err != nil {
		tr.log.Error("replay outcomes", slog.Any("err", err))
		return
	}
	from := store.ReplayOutcomesFrom(tr.shard)
	n := 0
	errUnpublished := errors.New("outcomes not published")
	err = store.ListOutcomesSince(ctx, tr.s.Store, tr.t.JobID, tr.t.Shard, from, func(items []store.Item) error {
		for _, it := range items {
			tr.holdOutcomes(tr.s.Clock.Now(), outcomeOfItem(it))
		}
		n += len(items)
		if tr.heldBytes >= maxOutcomesBytes && !tr.flushOutcomes(ctx) {
			return errUnpublished
		}
		return nil
	})
	if err == nil && !tr.flushOutcomes(ctx) {
		err = errUnpublished
	}
	if err != nil {
		tr.log.Error("replay outcomes", slog.Time("from", from), slog.Any("err", err))
		return
	}
	tr.replayed = true
	tr.log.Info("outcomes published again", slog.Time("from", from), slog.Int("outcomes", n))
}

// outcomeOfItem is the outcome a final item reports.
func outcomeOfItem(it store.Item) alert.ItemOutcome {
	o := alert.ItemOutcome{Seq: it.Seq, Account: it.Account, To: it.To, Ref: it.Ref, Status: string(it.Status), MsgID: it.MsgID, At: it.FinishedAt}
	if it.Error != nil {
		o.Category, o.Code = it.Error.Category, it.Error.Code
	}
	return o
}

// holdOutcomes adds outcomes to those the turn holds.
func (tr *turn) holdOutcomes(now time.Time, out ...alert.ItemOutcome) {
	if len(tr.heldOutcomes) == 0 {
		tr.heldSince = now
	}
	tr.heldOutcomes = append(tr.heldOutcomes, out...)
	for _, o := range out {
		tr.heldBytes += outcomeSize(o)
	}
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
