// Package storetest is the conformance suite of the store port. Every
// adapter's tests call Run with a factory of fresh, isolated stores; an
// adapter that passes keeps the promises qunfa rests on (no item claimed
// twice, outcomes recorded only by the claimer, counts that add up, token
// buckets that never grant over rate).
//
// The doc comments of internal/store are the specification. Where they leave
// room, the suite enforces these readings, chosen to protect the rules of
// DESIGN.md:
//
//   - Failure categories. An item counts in its shard's Failures, under
//     Error.Category, when it is failed or abandoned and carries an error, or
//     when it is submitted and carries the category uncertain (under review).
//     FailureCategory is that rule. UpdateItems' FailuresDelta is, for every
//     applied update, −1 for the category the item counted under before
//     (if any) and +1 for the one it counts under after (if any); entries
//     that net to zero may be present or absent. RecountShard and the repair
//     in BeginTurn count the same way, so folding every delta keeps
//     Failures equal to a recount.
//   - Confirmed items with more than one attempt count in Failures under
//     store.TallyConfirmedAfterRetry, by the same delta rule.
//   - ClaimItems returns no FailuresDelta, so a claim must not change what an
//     item counts under: it keeps the item's Error, and callers never put an
//     item back to pending while keeping an uncertain error (the suite
//     never does).
//   - ClaimItems returns the lowest due seqs of the shard, in seq order.
//     "Fewer than Max (even none)" is allowed, but a lone caller on a shard
//     with due items gets at least one (otherwise a sender could never make
//     progress).
//   - ClaimItems' NextDueAt is checked exactly when every due item was
//     claimed (the earliest NextAttemptAt of the remaining, all future,
//     pending items, or zero when none is pending). When Max cut a claim
//     short it must not be later than the earliest future item.
//   - An update naming an item of another shard changes nothing: the call
//     either fails or lists the seq in Rejected.
//   - Shards are created with the counts the caller gives (NewJob gives
//     Pending = Size).
//   - Token buckets grant whole tokens, possibly fewer than Want. Over any
//     run the total granted never exceeds floor(Burst + RatePerSec ×
//     elapsed) from the bucket's first use. Each call's RatePerSec and Burst
//     apply from that call on; a lowered Burst caps the stored tokens at
//     once. When tokens are short RetryAfter is positive and taking one
//     token after waiting RetryAfter succeeds.
//   - Times survive a round trip to the millisecond: the suite uses whole
//     milliseconds and compares with time.Equal, and waits RetryAfter
//     rounded up to a whole millisecond.
//   - Cross-job queries (ListStaleShards, ListSubmittedItems) and
//     cross-tenant ones (ListBreakers, ListCampaigns("")) see the whole
//     fixture, which each subtest gets fresh, so the suite asserts exact
//     sets. The order of ListBreakers and ListCampaigns("") is not checked.
//   - SaveBreaker of an empty State stores a closed breaker. Negative
//     attempt counts in AdvanceShard are ErrInvalidArgument.
//   - SuppressedAmong maps each suppressed recipient asked about to true;
//     others may be absent or false. PutSuppressions of an entry already on
//     the list (even twice in one call) leaves one entry.
//
// The suite drives time only through the Now and At parameters; it never
// sleeps.
package storetest

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/store"
)

// Capabilities declares how a backend differs, so the suite can adapt
// without being forked.
type Capabilities struct {
	// SlowWrites marks a backend that takes about a millisecond per
	// conditional write (an emulator): the suite shrinks its concurrency
	// and property-test sizes, keeping every check.
	SlowWrites bool
}

// sizes are the workload sizes of the heavier subtests.
type sizes struct {
	claimItems     int // items claimed concurrently from one shard
	workers        int // concurrent goroutines
	propertyChecks int // rapid cases run against the store, at most
	propertyItems  int // items in the property test's shard
	propertySteps  int // operations per property case, at most
	tokenSteps     int // fake-time steps of the concurrent token test
}

func (c Capabilities) sizes() sizes {
	sz := sizes{claimItems: 500, workers: 16, propertyChecks: 100, propertyItems: 12, propertySteps: 40, tokenSteps: 10}
	if c.SlowWrites {
		sz = sizes{claimItems: 120, workers: 16, propertyChecks: 15, propertyItems: 8, propertySteps: 20, tokenSteps: 4}
	}
	if raceEnabled {
		sz.propertyChecks = max(sz.propertyChecks/5, 5)
	}
	return sz
}

// Epoch is the fake time the suite's fixtures start at. It is a whole
// second, far from the wall clock, so a store that reads the wall clock
// instead of the parameters is caught.
var Epoch = time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC)

var fixtureSeq atomic.Int64

// uniqueID returns an id unique within the test process.
func uniqueID(prefix string) string {
	return fmt.Sprintf("%s-%06d", prefix, fixtureSeq.Add(1))
}

// NewJob returns the parameters of a new job of tenant with the given number
// of shards, and its item snapshot: itemsPerShard items per shard, seqs
// numbered from 1 and dealt to shards round-robin (seq s is in shard
// (s−1) mod shards), so a shard's items are interleaved with others'. Each
// shard has its own account ("acct-<index>"), status pending, SlowFactor 1
// and Counts.Pending = its size. The job's ID, idempotency key and request
// hash are unique in the process; CreatedAt is Epoch.
func NewJob(tenant string, shards, itemsPerShard int) (store.CreateJobParams, []store.Item) {
	id := uniqueID("job")
	p := store.CreateJobParams{
		Job: store.Job{
			ID:             id,
			Tenant:         tenant,
			Name:           "name of " + id,
			Template:       "Hi {{name}}",
			IdempotencyKey: "key-" + id,
			RequestHash:    "hash-" + id,
			Status:         store.JobCreating,
			Total:          int64(shards * itemsPerShard),
			ShardCount:     shards,
			CreatedBy:      "storetest",
			CreatedAt:      Epoch,
			Meta:           map[string]string{"source": "storetest"},
		},
	}
	for i := range shards {
		p.Shards = append(p.Shards, store.Shard{
			JobID:      id,
			Index:      i,
			Account:    fmt.Sprintf("acct-%d", i),
			Status:     store.ShardPending,
			Size:       int64(itemsPerShard),
			Counts:     store.Counts{Pending: int64(itemsPerShard)},
			SlowFactor: 1,
		})
	}
	items := make([]store.Item, 0, shards*itemsPerShard)
	for s := int64(1); s <= int64(shards*itemsPerShard); s++ {
		shard := int((s - 1) % int64(shards))
		items = append(items, store.Item{
			JobID:   id,
			Shard:   shard,
			Seq:     s,
			Account: fmt.Sprintf("acct-%d", shard),
			To:      fmt.Sprintf("user-%d", s),
			Vars:    map[string]string{"name": fmt.Sprintf("Name %d", s)},
			Status:  store.ItemPending,
		})
	}
	return p, items
}

// FailureCategory tells under which error category an item counts in its
// shard's Failures, and whether it counts at all: failed and abandoned
// items with an error count under its category, submitted items only under
// the category uncertain (under review), pending and confirmed items never.
func FailureCategory(it store.Item) (string, bool) {
	if it.Error == nil || it.Error.Category == "" {
		return "", false
	}
	switch it.Status {
	case store.ItemFailed, store.ItemAbandoned:
		return it.Error.Category, true
	case store.ItemSubmitted:
		return it.Error.Category, it.Error.Category == store.CategoryUncertain
	}
	return "", false
}

// Recount computes counts and failures (per FailureCategory, and
// store.TallyConfirmedAfterRetry for confirmed items with more than one
// attempt) from items:
// the truth a shard's Counts and Failures must match after RecountShard.
func Recount(items []store.Item) (store.Counts, map[string]int64) {
	var c store.Counts
	f := map[string]int64{}
	for _, it := range items {
		switch it.Status {
		case store.ItemPending:
			c.Pending++
		case store.ItemSubmitted:
			c.Submitted++
		case store.ItemConfirmed:
			c.Confirmed++
		case store.ItemFailed:
			c.Failed++
		case store.ItemAbandoned:
			c.Abandoned++
		}
		if cat, ok := FailureCategory(it); ok {
			f[cat]++
		}
		if store.ConfirmedAfterRetry(it.Status, it.Attempts) {
			f[store.TallyConfirmedAfterRetry]++
		}
	}
	return c, f
}

func negate(c store.Counts) store.Counts {
	return store.Counts{Pending: -c.Pending, Submitted: -c.Submitted, Confirmed: -c.Confirmed, Failed: -c.Failed, Abandoned: -c.Abandoned}
}

// Run runs the conformance suite against the store newStore returns. Each
// subtest runs in parallel and calls newStore once for a fresh, isolated
// fixture.
func Run(t *testing.T, newStore func(t *testing.T) store.Store, caps Capabilities) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, s store.Store, caps Capabilities)
	}{
		{"CreateJob", testCreateJob},
		{"CreateJobIdempotent", testCreateJobIdempotent},
		{"CreateJobConcurrent", testCreateJobConcurrent},
		{"InvalidArguments", testInvalidArguments},
		{"PutItems", testPutItems},
		{"ListJobs", testListJobs},
		{"TransitionJobAllPairs", testTransitionJobAllPairs},
		{"TransitionJobFromAndTimes", testTransitionJobFromAndTimes},
		{"TransitionJobConcurrent", testTransitionJobConcurrent},
		{"TransitionJobFromPauseReason", testTransitionJobFromPauseReason},
		{"Canary", testCanary},
		{"UpdateJobLimits", testUpdateJobLimits},
		{"ReserveBudget", testReserveBudget},
		{"ReserveBudgetConcurrent", testReserveBudgetConcurrent},
		{"TransitionShardAllPairs", testTransitionShardAllPairs},
		{"TransitionShardFromAndPause", testTransitionShardFromAndPause},
		{"TransitionShardConcurrent", testTransitionShardConcurrent},
		{"BeginTurn", testBeginTurn},
		{"BeginTurnConcurrent", testBeginTurnConcurrent},
		{"BeginTurnRepairsDirtyShard", testBeginTurnRepairsDirtyShard},
		{"AdvanceShard", testAdvanceShard},
		{"AddShardCounts", testAddShardCounts},
		{"RecountShard", testRecountShard},
		{"EpochStaleAdvance", testEpochStaleAdvance},
		{"EpochRedeliveredTurn", testEpochRedeliveredTurn},
		{"EpochRedeliveredTurnConcurrent", testEpochRedeliveredTurnConcurrent},
		{"EpochStaleAddShardCounts", testEpochStaleAddShardCounts},
		{"EpochReported", testEpochReported},
		{"MarkShardDirty", testMarkShardDirty},
		{"ListDirtyShards", testListDirtyShards},
		{"ListDirtyShardsAfterLastTurn", testListDirtyShardsAfterLastTurn},
		{"ImpossibleCountsRecounted", testImpossibleCountsRecounted},
		{"ListStaleShards", testListStaleShards},
		{"AttemptCounters", testAttemptCounters},
		{"ClaimItems", testClaimItems},
		{"ClaimItemsConcurrent", testClaimItemsConcurrent},
		{"UpdateItems", testUpdateItems},
		{"UpdateItemsManyAtOnce", testUpdateItemsManyAtOnce},
		{"UpdateItemsOtherShard", testUpdateItemsOtherShard},
		{"UpdateItemsPastAForeignSeq", testUpdateItemsPastAForeignSeq},
		{"ListItems", testListItems},
		{"ListSubmittedItems", testListSubmittedItems},
		{"JobMetadata", testJobMetadata},
		{"ItemRefs", testItemRefs},
		{"ItemRefsLargeJob", testItemRefsLargeJob},
		{"ItemOutcomes", testItemOutcomes},
		{"OutcomesWatermark", testOutcomesWatermark},
		{"GetItems", testGetItems},
		{"GetItemsFullBatch", testGetItemsFullBatch},
		{"RunsClaimAndSettle", testRunsClaimAndSettle},
		{"RunsReplan", testRunsReplan},
		{"RunsProperty", testRunsProperty},
		{"TakeTokens", testTakeTokens},
		{"TakeTokensRateChange", testTakeTokensRateChange},
		{"TakeTokensProperty", testTakeTokensProperty},
		{"TakeTokensConcurrent", testTakeTokensConcurrent},
		{"TakeTokensWarmup", testTakeTokensWarmup},
		{"TakeTokensWarmupProperty", testTakeTokensWarmupProperty},
		{"TakeSlots", testTakeSlots},
		{"TakeSlotsConcurrent", testTakeSlotsConcurrent},
		{"Accounts", testAccounts},
		{"AccountSizing", testAccountSizing},
		{"APITokens", testAPITokens},
		{"Tenants", testTenants},
		{"Quotas", testQuotas},
		{"Audit", testAudit},
		{"JobByIdempotencyKey", testJobByIdempotencyKey},
		{"Breakers", testBreakers},
		{"SaveBreakerConcurrent", testSaveBreakerConcurrent},
		{"BreakerHistory", testBreakerHistory},
		{"BreakerHistoryConcurrent", testBreakerHistoryConcurrent},
		{"ListBreakers", testListBreakers},
		{"Suppressions", testSuppressions},
		{"ListSuppressions", testListSuppressions},
		{"SuppressionsChangedAt", testSuppressionsChangedAt},
		{"FrequencyCap", testFrequencyCap},
		{"FrequencyCapConcurrent", testFrequencyCapConcurrent},
		{"FrequencyCapProperty", testFrequencyCapProperty},
		{"Campaigns", testCampaigns},
		{"Webhooks", testWebhooks},
		{"MsgCalls", testMsgCalls},
		{"Staging", testStaging},
		{"ConfirmedAfterRetry", testConfirmedAfterRetry},
		{"Series", testSeries},
		{"ShardCountsProperty", testShardCountsProperty},
		{"Leases", testLeases},
		{"MsgIDsOfManyConfirmations", testMsgIDsOfManyConfirmations},
		{"SubmittedFoundWhenClaimClockIsBehind", testSubmittedFoundWhenClaimClockIsBehind},
		{"ConfirmedAfterRetryRedriven", testConfirmedAfterRetryRedriven},
		{"ClaimItemsRefusesBadArguments", testClaimItemsRefusesBadArguments},
		{"MsgIDOnlyWhenConfirmed", testMsgIDOnlyWhenConfirmed},
		{"NextDueAtAcrossPages", testNextDueAtAcrossPages},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newStore(t), caps)
		})
	}
}

// ---- fixtures and assertions shared by the subtests ----

// tb is what the helpers need of a test: *testing.T and *rapid.T both
// provide it.
type tb interface {
	Helper()
	Fatalf(format string, args ...any)
	Context() context.Context
}

func ctxOf(t tb) context.Context { return t.Context() }

// at returns Epoch plus d.
func at(d time.Duration) time.Time { return Epoch.Add(d) }

// createJob creates the job and writes its snapshot in pages.
func createJob(t tb, s store.Store, p store.CreateJobParams, items []store.Item) store.Job {
	t.Helper()
	res, err := s.CreateJob(ctxOf(t), p)
	if err != nil {
		t.Fatalf("CreateJob(%s): %v", p.Job.ID, err)
	}
	if !res.Created {
		t.Fatalf("CreateJob(%s): Created = false for a new key", p.Job.ID)
	}
	for start := 0; start < len(items); start += store.MaxPutItems {
		page := items[start:min(start+store.MaxPutItems, len(items))]
		if err := s.PutItems(ctxOf(t), store.PutItemsParams{JobID: p.Job.ID, Items: page}); err != nil {
			t.Fatalf("PutItems(%s, from seq %d): %v", p.Job.ID, page[0].Seq, err)
		}
	}
	return res.Job
}

// runningJob creates a job with its snapshot and sets the job and all its
// shards running at Epoch.
func runningJob(t tb, s store.Store, tenant string, shards, perShard int) (store.CreateJobParams, []store.Item) {
	t.Helper()
	p, items := NewJob(tenant, shards, perShard)
	createJob(t, s, p, items)
	if _, err := s.TransitionJob(ctxOf(t), store.TransitionJobParams{JobID: p.Job.ID, To: store.JobRunning, At: Epoch}); err != nil {
		t.Fatalf("TransitionJob(%s → running): %v", p.Job.ID, err)
	}
	for i := range shards {
		if _, err := s.TransitionShard(ctxOf(t), store.TransitionShardParams{JobID: p.Job.ID, Index: i, To: store.ShardRunning, At: Epoch}); err != nil {
			t.Fatalf("TransitionShard(%s/%d → running): %v", p.Job.ID, i, err)
		}
	}
	return p, items
}

// listAll pages through ListItems with the given page size and fails on a
// seq seen twice or out of order.
func listAll(t tb, s store.Store, p store.ListItemsParams) []store.Item {
	t.Helper()
	var all []store.Item
	for page := 0; ; page++ {
		if page > 10000 {
			t.Fatalf("ListItems(%s): cursor never ends", p.JobID)
		}
		res, err := s.ListItems(ctxOf(t), p)
		if err != nil {
			t.Fatalf("ListItems(%+v): %v", p, err)
		}
		for _, it := range res.Items {
			if n := len(all); n > 0 && it.Seq <= all[n-1].Seq {
				t.Fatalf("ListItems(%s): seq %d after seq %d (not in seq order, or repeated across pages)", p.JobID, it.Seq, all[n-1].Seq)
			}
			all = append(all, it)
		}
		if p.Limit > 0 && len(res.Items) > p.Limit {
			t.Fatalf("ListItems(%s): %d items in a page of limit %d", p.JobID, len(res.Items), p.Limit)
		}
		if res.NextCursor == "" {
			return all
		}
		if res.NextCursor == p.Cursor {
			t.Fatalf("ListItems(%s): NextCursor %q repeats the request cursor", p.JobID, res.NextCursor)
		}
		p.Cursor = res.NextCursor
	}
}

// shardItems lists all items of one shard.
func shardItems(t tb, s store.Store, jobID string, index int) []store.Item {
	t.Helper()
	return listAll(t, s, store.ListItemsParams{JobID: jobID, Shard: &index, Limit: 1000})
}

// itemBySeq lists all items of a job by seq.
func itemBySeq(t tb, s store.Store, jobID string) map[int64]store.Item {
	t.Helper()
	m := map[int64]store.Item{}
	for _, it := range listAll(t, s, store.ListItemsParams{JobID: jobID, Limit: 1000}) {
		m[it.Seq] = it
	}
	return m
}

func getShard(t tb, s store.Store, jobID string, index int) store.Shard {
	t.Helper()
	sh, err := s.GetShard(ctxOf(t), jobID, index)
	if err != nil {
		t.Fatalf("GetShard(%s/%d): %v", jobID, index, err)
	}
	return sh
}

func getJob(t tb, s store.Store, jobID string) store.JobView {
	t.Helper()
	v, err := s.GetJob(ctxOf(t), jobID)
	if err != nil {
		t.Fatalf("GetJob(%s): %v", jobID, err)
	}
	return v
}

// nonZero drops zero entries, so maps that differ only by explicit zeros
// compare equal.
func nonZero(m map[string]int64) map[string]int64 {
	out := map[string]int64{}
	for k, v := range m {
		if v != 0 {
			out[k] = v
		}
	}
	return out
}

func sameFailures(a, b map[string]int64) bool { return maps.Equal(nonZero(a), nonZero(b)) }

// checkShardMatchesItems fails unless the shard's counts and failures equal
// a recount of its items.
func checkShardMatchesItems(t tb, s store.Store, sh store.Shard) {
	t.Helper()
	items := shardItems(t, s, sh.JobID, sh.Index)
	c, f := Recount(items)
	if sh.Counts != c {
		t.Fatalf("shard %s/%d counts %+v, items recount to %+v", sh.JobID, sh.Index, sh.Counts, c)
	}
	if !sameFailures(sh.Failures, f) {
		t.Fatalf("shard %s/%d failures %v, items recount to %v", sh.JobID, sh.Index, nonZero(sh.Failures), f)
	}
	if c.Total() != sh.Size {
		t.Fatalf("shard %s/%d: %d items listed, size %d", sh.JobID, sh.Index, c.Total(), sh.Size)
	}
}

// sameTime compares instants, ignoring location and monotonic readings.
func sameTime(a, b time.Time) bool { return a.Equal(b) }

// normJob returns j with times in UTC without monotonic readings and a
// non-nil Meta, for deep comparison of two reads.
func normJob(j store.Job) store.Job {
	j.CreatedAt = j.CreatedAt.UTC().Round(0)
	j.StartedAt = j.StartedAt.UTC().Round(0)
	j.FinishedAt = j.FinishedAt.UTC().Round(0)
	if j.Meta == nil {
		j.Meta = map[string]string{}
	}
	return j
}

func normShard(s store.Shard) store.Shard {
	s.LastAdvancedAt = s.LastAdvancedAt.UTC().Round(0)
	s.Failures = nonZero(s.Failures)
	return s
}

func sameJob(a, b store.Job) bool     { return reflect.DeepEqual(normJob(a), normJob(b)) }
func sameShard(a, b store.Shard) bool { return reflect.DeepEqual(normShard(a), normShard(b)) }
func seqsOf(items []store.Item) []int64 {
	out := make([]int64, len(items))
	for i, it := range items {
		out[i] = it.Seq
	}
	return out
}

func sortedSeqs(s []int64) []int64 {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}
