package storetest

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/qunfa/qunfa/internal/store"
)

// modelItem is what the property test expects of one item.
type modelItem struct {
	status   store.ItemStatus
	attempts int
	claimID  string
	category string // "" = no error
	next     time.Time
}

func (m modelItem) asItem() store.Item {
	it := store.Item{Status: m.status, Attempts: m.attempts}
	if m.category != "" {
		it.Error = &store.ItemError{Category: m.category}
	}
	return it
}

// shardModel drives one shard through random sender, reconciler and
// operator actions and keeps what the store must show.
type shardModel struct {
	s     store.Store
	jobID string
	size  int64
	items map[int64]*modelItem
	now   time.Time
	turn  int64
	// inTurn: a sender turn is running; unfolded is what it has not yet
	// folded into the shard, relative to the count epoch it holds (epoch).
	inTurn          bool
	unfolded        store.Counts
	unfoldedFailure map[string]int64
	epoch           int64
	// storeEpoch is the shard's count epoch as the store must report it.
	storeEpoch int64
	// uncounted is what item changes since the last fold or recount added:
	// the part of unfolded the shard does not hold yet (after a recount in
	// the middle of a turn, unfolded is stale and uncounted is zero).
	uncounted        store.Counts
	uncountedFailure map[string]int64
	// consistent: every change since the last repair is folded or
	// uncounted, so the shard record plus uncounted must equal the items.
	consistent bool
	claims     int
}

func (m *shardModel) recount() (store.Counts, map[string]int64) {
	items := make([]store.Item, 0, len(m.items))
	for _, it := range m.items {
		items = append(items, it.asItem())
	}
	return Recount(items)
}

// checkTruth compares the shard plus what the running turn has not yet
// counted with the model and with a recount of the items the store lists.
func (m *shardModel) checkTruth(rt *rapid.T, sh store.Shard, after string) {
	got, gotF := sh.Counts.Add(m.uncounted), map[string]int64{}
	for k, v := range sh.Failures {
		gotF[k] += v
	}
	for k, v := range m.uncountedFailure {
		gotF[k] += v
	}
	c, f := m.recount()
	if got != c || !sameFailures(gotF, f) {
		rt.Fatalf("after %s: shard counts %+v failures %v (+ uncounted %+v %v), model %+v %v",
			after, sh.Counts, nonZero(sh.Failures), m.uncounted, nonZero(m.uncountedFailure), c, f)
	}
	lc, lf := Recount(shardItems(rt, m.s, m.jobID, 0))
	if got != lc || !sameFailures(gotF, lf) {
		rt.Fatalf("after %s: shard counts %+v failures %v (+ uncounted %+v %v), listed items recount to %+v %v",
			after, sh.Counts, nonZero(sh.Failures), m.uncounted, nonZero(m.uncountedFailure), lc, lf)
	}
}

// fold records a delta of the running turn, to be folded by its next
// advance.
func (m *shardModel) fold(d store.Counts, f map[string]int64) {
	m.unfolded = m.unfolded.Add(d)
	m.uncounted = m.uncounted.Add(d)
	for k, v := range f {
		m.unfoldedFailure[k] += v
		m.uncountedFailure[k] += v
	}
}

// adoptEpoch checks the epoch of a shard the store returned: a later one
// than before when the operation recounted, the same one otherwise. A
// recount leaves the shard equal to the items.
func (m *shardModel) adoptEpoch(rt *rapid.T, sh store.Shard, after string, recounted bool) {
	switch {
	case recounted && sh.Epoch <= m.storeEpoch:
		rt.Fatalf("after %s (a recount): Epoch %d, was %d", after, sh.Epoch, m.storeEpoch)
	case !recounted && sh.Epoch != m.storeEpoch:
		rt.Fatalf("after %s (no recount): Epoch %d, want %d", after, sh.Epoch, m.storeEpoch)
	}
	m.storeEpoch = sh.Epoch
	if recounted {
		m.consistent = true
		m.uncounted, m.uncountedFailure = store.Counts{}, map[string]int64{}
	}
}

func (m *shardModel) claim(rt *rapid.T) {
	max := rapid.IntRange(1, 5).Draw(rt, "max")
	m.claims++
	claimID := fmt.Sprintf("claim-%d", m.claims)
	var due []int64
	for seq, it := range m.items {
		if it.status == store.ItemPending && !it.next.After(m.now) {
			due = append(due, seq)
		}
	}
	slices.Sort(due)
	res := claim(rt, m.s, m.jobID, 0, max, m.now, claimID)
	got := seqsOf(res.Items)
	if len(got) > max || !slices.Equal(got, due[:len(got)]) || (len(due) > 0 && len(got) == 0) {
		rt.Fatalf("ClaimItems(max %d) = %v; due in seq order: %v", max, got, due)
	}
	for _, it := range res.Items {
		mi := m.items[it.Seq]
		mi.status, mi.claimID = store.ItemSubmitted, claimID
		mi.attempts++
		if it.Attempts != mi.attempts || it.ClaimID != claimID {
			rt.Fatalf("claimed item %d: attempts %d claim %q, want %d %q", it.Seq, it.Attempts, it.ClaimID, mi.attempts, claimID)
		}
	}
	if want := (store.Counts{Pending: -int64(len(got)), Submitted: int64(len(got))}); res.Delta != want {
		rt.Fatalf("ClaimItems delta %+v, want %+v", res.Delta, want)
	}
	m.fold(res.Delta, nil)
	m.checkNextDue(rt, res.NextDueAt, len(got) == len(due))
}

// checkNextDue checks a claim's NextDueAt against the pending items left:
// exactly the earliest of their (all future) next-attempt times, or zero
// when none is pending, after a claim that took every due item; not later
// than the earliest (now for one due) after one that Max cut short.
func (m *shardModel) checkNextDue(rt *rapid.T, next time.Time, tookAll bool) {
	var earliest time.Time
	pending := false
	for _, it := range m.items {
		if it.status != store.ItemPending {
			continue
		}
		due := it.next
		if due.Before(m.now) {
			due = m.now
		}
		if !pending || due.Before(earliest) {
			earliest = due
		}
		pending = true
	}
	switch {
	case tookAll && !next.Equal(earliest):
		rt.Fatalf("NextDueAt %v after a claim of every due item, want %v (pending left: %v)", next, earliest, pending)
	case !tookAll && next.After(earliest):
		rt.Fatalf("NextDueAt %v after a short claim, later than the earliest pending item (%v)", next, earliest)
	}
}

// updateKinds are the item changes qunfa makes, by the status they start
// from.
var updateKinds = map[store.ItemStatus][]string{
	store.ItemPending:   {"cancel", "reschedule", "wrong-from"},
	store.ItemSubmitted: {"confirm", "fail", "retry", "rate-limited", "review", "cancel", "wrong-claim", "resolve-delivered"},
	store.ItemFailed:    {"redrive", "cancel-keep", "wrong-from"},
	store.ItemConfirmed: {"wrong-from"},
	store.ItemAbandoned: {"wrong-from"},
}

// update applies a random batch of item changes, checks the result against
// the model and returns it.
func (m *shardModel) update(rt *rapid.T, outsideTurn bool) store.UpdateItemsResult {
	all := slices.Sorted(maps.Keys(m.items))
	picked := rapid.SliceOfNDistinct(rapid.SampledFrom(all), 1, 4, rapid.ID[int64]).Draw(rt, "seqs")
	var (
		ups       []store.ItemUpdate
		rejected  []int64
		delta     store.Counts
		failDelta = map[string]int64{}
		after     = map[int64]modelItem{}
	)
	for _, seq := range picked {
		cur := *m.items[seq]
		kinds := updateKinds[cur.status]
		if outsideTurn {
			// Operators and the reconciler only cancel, redrive and resolve.
			kinds = slices.DeleteFunc(slices.Clone(kinds), func(k string) bool {
				return k != "cancel" && k != "redrive" && k != "cancel-keep" && k != "wrong-from" && k != "resolve-delivered"
			})
			if len(kinds) == 0 {
				kinds = []string{"wrong-from"}
			}
		}
		kind := rapid.SampledFrom(kinds).Draw(rt, "kind")
		up := store.ItemUpdate{Seq: seq, From: cur.status}
		next := cur
		ok := true
		switch kind {
		case "confirm":
			up.ClaimID, up.To = cur.claimID, store.ItemConfirmed
			next.status, next.category = store.ItemConfirmed, ""
		case "fail":
			cat := rapid.SampledFrom([]string{store.CategoryPermanent, store.CategoryExhausted, store.CategoryRetryable}).Draw(rt, "category")
			up.ClaimID, up.To, up.Error = cur.claimID, store.ItemFailed, &store.ItemError{Category: cat}
			next.status, next.category = store.ItemFailed, cat
		case "retry", "rate-limited":
			cat, give := store.CategoryRetryable, 0
			if kind == "rate-limited" {
				cat, give = store.CategoryRateLimited, -1
			}
			due := m.now.Add(time.Duration(rapid.IntRange(0, 3000).Draw(rt, "retry_ms")) * time.Millisecond)
			up.ClaimID, up.To, up.Error, up.AttemptsDelta, up.NextAttemptAt = cur.claimID, store.ItemPending, &store.ItemError{Category: cat}, give, due
			next.status, next.category, next.next = store.ItemPending, cat, due
			next.attempts += give
		case "review":
			up.To, up.Error = store.ItemSubmitted, &store.ItemError{Category: store.CategoryUncertain}
			next.category = store.CategoryUncertain
		case "resolve-delivered":
			up.To = store.ItemConfirmed
			next.status, next.category = store.ItemConfirmed, ""
		case "cancel":
			up.To, up.Error = store.ItemAbandoned, &store.ItemError{Category: store.CategoryCancelled}
			next.status, next.category = store.ItemAbandoned, store.CategoryCancelled
		case "cancel-keep":
			up.To, up.KeepError = store.ItemAbandoned, true
			next.status = store.ItemAbandoned
		case "reschedule":
			due := m.now.Add(time.Duration(rapid.IntRange(0, 3000).Draw(rt, "reschedule_ms")) * time.Millisecond)
			up.To, up.KeepError, up.NextAttemptAt = store.ItemPending, true, due
			next.next = due
		case "redrive":
			up.To, up.ResetAttempts, up.NextAttemptAt = store.ItemPending, true, m.now
			next.status, next.category, next.attempts, next.next = store.ItemPending, "", 0, m.now
		case "wrong-claim":
			up.ClaimID, up.To = cur.claimID+"-stale", store.ItemConfirmed
			ok = false
		case "wrong-from":
			up.From = store.ItemSubmitted
			if cur.status == store.ItemSubmitted {
				up.From = store.ItemPending
			}
			up.To = store.ItemConfirmed
			ok = false
		}
		ups = append(ups, up)
		if !ok {
			rejected = append(rejected, seq)
			continue
		}
		after[seq] = next
		delta.Move(cur.status, next.status)
		if c, counted := FailureCategory(cur.asItem()); counted {
			failDelta[c]--
		}
		if c, counted := FailureCategory(next.asItem()); counted {
			failDelta[c]++
		}
		if store.ConfirmedAfterRetry(cur.status, cur.attempts) {
			failDelta[store.TallyConfirmedAfterRetry]--
		}
		if store.ConfirmedAfterRetry(next.status, next.attempts) {
			failDelta[store.TallyConfirmedAfterRetry]++
		}
	}
	res := update(rt, m.s, m.jobID, 0, m.now, ups...)
	if got := sortedSeqs(res.Rejected); !slices.Equal(got, sortedSeqs(rejected)) {
		rt.Fatalf("UpdateItems rejected %v, want %v", got, sortedSeqs(rejected))
	}
	if res.Delta != delta || !sameFailures(res.FailuresDelta, failDelta) {
		rt.Fatalf("UpdateItems delta %+v failures %v, want %+v %v", res.Delta, nonZero(res.FailuresDelta), delta, nonZero(failDelta))
	}
	for seq, next := range after {
		*m.items[seq] = next
	}
	return res
}

func (m *shardModel) checkItems(rt *rapid.T) {
	listed := shardItems(rt, m.s, m.jobID, 0)
	if int64(len(listed)) != m.size {
		rt.Fatalf("listed %d items, want %d", len(listed), m.size)
	}
	for _, it := range listed {
		w := m.items[it.Seq]
		got := modelItem{status: it.Status, attempts: it.Attempts}
		if it.Error != nil {
			got.category = it.Error.Category
		}
		if it.Status == store.ItemSubmitted {
			got.claimID = it.ClaimID
		}
		if it.Status == store.ItemPending {
			got.next = it.NextAttemptAt.UTC().Round(0)
		}
		want := *w
		if want.status != store.ItemSubmitted {
			want.claimID = ""
		}
		if want.status != store.ItemPending {
			want.next = time.Time{}
		} else {
			want.next = want.next.UTC().Round(0)
		}
		// Fresh items have no due time yet: zero and Epoch-or-earlier are
		// both "due".
		if want.status == store.ItemPending && want.next.IsZero() && !got.next.After(Epoch) {
			got.next = time.Time{}
		}
		if got != want {
			rt.Fatalf("item %d = %+v, model %+v", it.Seq, got, want)
		}
	}
}

func testShardCountsProperty(t *testing.T, s store.Store, caps Capabilities) {
	sz := caps.sizes()
	checkProperty(t, sz.propertyChecks, func(rt *rapid.T) {
		p, items := runningJob(rt, s, "tenant-a", 1, sz.propertyItems)
		m := &shardModel{s: s, jobID: p.Job.ID, size: int64(len(items)), items: map[int64]*modelItem{}, now: Epoch, consistent: true,
			unfoldedFailure: map[string]int64{}, uncountedFailure: map[string]int64{}}
		for _, it := range items {
			m.items[it.Seq] = &modelItem{status: store.ItemPending}
		}
		steps := rapid.IntRange(1, sz.propertySteps).Draw(rt, "steps")
		dirty := false
		for range steps {
			var actions []string
			if m.inTurn {
				// redeliver: the turn's message is delivered again and its
				// BeginTurn recounts while this run goes on with its epoch.
				actions = []string{"claim", "claim", "update", "update", "advance", "end-turn", "crash", "tick",
					"redeliver", "recount", "operator"}
				if m.epoch > 0 {
					actions = append(actions, "stale-advance")
				}
			} else {
				actions = []string{"begin", "begin", "recount", "operator", "tick"}
			}
			if m.storeEpoch > 0 {
				actions = append(actions, "stale-operator")
			}
			switch action := rapid.SampledFrom(actions).Draw(rt, "action"); action {
			case "tick":
				m.now = m.now.Add(time.Duration(rapid.IntRange(0, 2000).Draw(rt, "tick_ms")) * time.Millisecond)
			case "claim":
				m.claim(rt)
			case "update":
				res := m.update(rt, false)
				m.fold(res.Delta, res.FailuresDelta)
			case "advance", "end-turn", "stale-advance":
				end := action == "end-turn"
				epoch := m.epoch
				if action == "stale-advance" {
					epoch = rapid.Int64Range(0, m.epoch-1).Draw(rt, "stale_epoch")
				}
				pre := getShard(rt, s, m.jobID, 0)
				sh, err := s.AdvanceShard(ctxOf(rt), store.AdvanceShardParams{JobID: m.jobID, Index: 0, Turn: m.turn, Epoch: epoch,
					Delta: m.unfolded, FailuresDelta: m.unfoldedFailure, At: m.now, EndTurn: end})
				if err != nil {
					rt.Fatalf("AdvanceShard(turn %d, epoch %d): %v", m.turn, epoch, err)
				}
				// A fold that would store impossible counts recounts.
				stale := epoch != m.storeEpoch || pre.Counts.Add(m.unfolded).Impossible(m.size)
				m.unfolded, m.unfoldedFailure = store.Counts{}, map[string]int64{}
				if !stale {
					m.uncounted, m.uncountedFailure = store.Counts{}, map[string]int64{}
				}
				m.adoptEpoch(rt, sh, action, stale)
				m.epoch = sh.Epoch
				if sh.Dirty == end {
					rt.Fatalf("AdvanceShard(EndTurn %v) left Dirty %v", end, sh.Dirty)
				}
				if m.consistent {
					m.checkTruth(rt, sh, action)
				}
				m.inTurn, dirty = !end, !end
			case "crash":
				m.inTurn, m.consistent = false, false
				m.unfolded, m.unfoldedFailure = store.Counts{}, map[string]int64{}
			case "begin":
				m.turn++
				sh := beginTurn(rt, s, m.jobID, 0, m.turn, fmt.Sprintf("msg-%d", m.turn), m.now)
				m.adoptEpoch(rt, sh, "BeginTurn", dirty)
				m.inTurn, m.epoch, dirty = true, sh.Epoch, true
				if !m.consistent {
					rt.Fatalf("BeginTurn left the shard inconsistent (dirty %v)", dirty)
				}
				m.checkTruth(rt, sh, "BeginTurn")
			case "redeliver":
				sh := beginTurn(rt, s, m.jobID, 0, m.turn, fmt.Sprintf("msg-%d", m.turn), m.now)
				m.adoptEpoch(rt, sh, "BeginTurn(redelivery)", true)
				m.checkTruth(rt, sh, "BeginTurn(redelivery)")
			case "recount":
				sh, err := s.RecountShard(ctxOf(rt), m.jobID, 0)
				if err != nil {
					rt.Fatalf("RecountShard: %v", err)
				}
				m.adoptEpoch(rt, sh, "RecountShard", true)
				m.checkTruth(rt, sh, "RecountShard")
			case "operator", "stale-operator":
				epoch := m.storeEpoch // read before the item operations
				if action == "stale-operator" {
					epoch = rapid.Int64Range(0, m.storeEpoch-1).Draw(rt, "stale_epoch")
				}
				pre := getShard(rt, s, m.jobID, 0)
				res := m.update(rt, true)
				sh, err := s.AddShardCounts(ctxOf(rt), store.AddShardCountsParams{JobID: m.jobID, Index: 0, Epoch: epoch, Delta: res.Delta, FailuresDelta: res.FailuresDelta})
				if err != nil {
					rt.Fatalf("AddShardCounts(epoch %d): %v", epoch, err)
				}
				// A fold that would store impossible counts recounts.
				m.adoptEpoch(rt, sh, action, epoch != m.storeEpoch || pre.Counts.Add(res.Delta).Impossible(m.size))
				if m.consistent {
					m.checkTruth(rt, sh, action)
				}
			}
			sh := getShard(rt, s, m.jobID, 0)
			if sh.Counts.Total() != m.size {
				rt.Fatalf("shard counts %+v add up to %d, size %d", sh.Counts, sh.Counts.Total(), m.size)
			}
			if sh.Epoch != m.storeEpoch {
				rt.Fatalf("GetShard: Epoch %d, the store returned %d last", sh.Epoch, m.storeEpoch)
			}
		}
		m.checkItems(rt)
	})
}
