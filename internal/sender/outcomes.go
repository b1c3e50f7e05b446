package sender

import (
	"context"
	"slices"
	"time"

	"github.com/qunfa/qunfa/internal/alert"
	"github.com/qunfa/qunfa/internal/store"
)

// publishOutcomes publishes the final outcomes of one recorded batch as one
// ItemOutcomes event (nothing when Sender.Outcomes is nil or nothing in the
// batch became final). Updates the store rejected are left out: another
// claimer owns those items now.
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
	alert.Emit(ctx, tr.s.Outcomes, tr.log, alert.Event{Type: alert.ItemOutcomes, Tenant: tr.job.Tenant, Time: now,
		Detail: alert.ItemOutcomesDetail{JobID: tr.job.ID, Items: out}})
}
