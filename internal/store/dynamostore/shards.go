package dynamostore

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/qunfa/qunfa/internal/store"
)

// Count attributes of a shard record, and the prefix of its per-category
// failure counters (top-level numbers, so ADD works on them).
var countAttrs = [5]string{"cP", "cS", "cC", "cF", "cA"}

const failurePrefix = "f_"

// staleBucket is the granularity of the running index key: the key changes
// at most once a minute per shard, so AdvanceShard rarely writes the index.
const staleBucket = int64(time.Minute)

const runningPK = "RUNNING"

// dirtyPK is the running index's partition of shards in a final status
// that need the sweep (store.NeedsSweep, ListDirtyShards), keyed
// <job>#<index>. A shard enters it when it is marked dirty, made final
// while it needs the sweep, or ended by a turn that leaves it so, and
// leaves it when its marks are cleared. Entries of shards that no longer
// need it are skipped by the listing and dropped by their next index
// write.
const dirtyPK = "DIRTY"

func dirtyKey(jobID string, index int) string { return fmt.Sprintf("%s#%06d", jobID, index) }

// g2For sets the running index entry of a shard whose status and pause
// reason will be as given, and whose need of the sweep (store.NeedsSweep)
// is dirty: the RUNNING partition (keyed by the minute of lastAdv) for
// shards ListStaleShards watches, the DIRTY partition for final shards
// that need the sweep, none otherwise.
func (u *updateBuilder) g2For(st store.ShardStatus, reason store.PauseReason, dirty bool, lastAdv int64, jobID string, index int) {
	switch {
	case watchedForStaleness(st, reason):
		u.Set("g2pk", attrS(runningPK))
		u.Set("g2sk", attrS(staleKey(lastAdv, jobID, index)))
	case dirty && store.ShardFinal(st):
		u.Set("g2pk", attrS(dirtyPK))
		u.Set("g2sk", attrS(dirtyKey(jobID, index)))
	default:
		u.Remove("g2pk")
		u.Remove("g2sk")
	}
}

// Cumulative attempt counters of a shard record (absent = 0). They are
// only ever ADDed, never part of a recount.
const (
	attrAttempts        = "att"
	attrAttemptFailures = "attF"
)

// The outcomes watermark of a shard (Unix nanoseconds; absent = never
// published), its replay mark (absent = false) and its count of outside
// changes under way (absent = 0), see store.Shard.OutcomesPublishedTo.
const (
	attrOutcomesTo      = "ocTo"
	attrOutcomesReplay  = "ocRe"
	attrOutcomesOutside = "ocOut"
	// attrTurnOpen: store.Shard.TurnOpen (absent = false).
	attrTurnOpen = "tOpen"
	// attrOutcomesOutsideAt: store.Shard.OutcomesOutsideSeenAt (Unix
	// nanoseconds, absent = zero).
	attrOutcomesOutsideAt = "ocOutAt"
)

// watchedForStaleness reports whether a shard in this state belongs in the
// running index, which ListStaleShards queries: running shards, and shards
// paused by their breaker (the reconciler resumes or probes them).
func watchedForStaleness(st store.ShardStatus, reason store.PauseReason) bool {
	return st == store.ShardRunning || (st == store.ShardPaused && reason == store.PauseBreaker)
}

func countValues(c store.Counts) [5]int64 {
	return [5]int64{c.Pending, c.Submitted, c.Confirmed, c.Failed, c.Abandoned}
}

func staleKey(lastAdv int64, jobID string, index int) string {
	b := lastAdv - lastAdv%staleBucket
	if lastAdv < 0 {
		b = 0
	}
	return fmt.Sprintf("%020d#%s#%06d", b, jobID, index)
}

func shardItem(sh store.Shard) map[string]types.AttributeValue {
	m := map[string]types.AttributeValue{
		attrPK: attrS(jobPK(sh.JobID)), attrSK: attrS(skShard(sh.Index)),
		"job": attrS(sh.JobID), "idx": attrN(int64(sh.Index)), "account": attrS(sh.Account),
		"status": attrS(string(sh.Status)), "size": attrN(sh.Size), "cursor": attrN(sh.Cursor),
		"lastAdv": attrN(nanos(sh.LastAdvancedAt)), "slow": attrF(sh.SlowFactor),
		"turn": attrN(sh.Turn), "dirty": attrBool(sh.Dirty), "sv": attrN(1), "epoch": attrN(sh.Epoch),
	}
	if !sh.OutcomesPublishedTo.IsZero() {
		m[attrOutcomesTo] = attrN(nanos(sh.OutcomesPublishedTo))
	}
	if sh.OutcomesReplay {
		m[attrOutcomesReplay] = attrBool(true)
	}
	if sh.OutcomesOutside != 0 {
		m[attrOutcomesOutside] = attrN(sh.OutcomesOutside)
	}
	if sh.TurnOpen {
		m[attrTurnOpen] = attrBool(true)
	}
	if !sh.OutcomesOutsideSeenAt.IsZero() {
		m[attrOutcomesOutsideAt] = attrN(nanos(sh.OutcomesOutsideSeenAt))
	}
	if sh.Attempts != 0 || sh.AttemptFailures != 0 {
		m[attrAttempts] = attrN(sh.Attempts)
		m[attrAttemptFailures] = attrN(sh.AttemptFailures)
	}
	if sh.PauseReason != "" {
		m["pause"] = attrS(string(sh.PauseReason))
	}
	if sh.TurnMessage != "" {
		m["turnMsg"] = attrS(sh.TurnMessage)
	}
	for i, v := range countValues(sh.Counts) {
		m[countAttrs[i]] = attrN(v)
	}
	for cat, n := range sh.Failures {
		if n != 0 {
			m[failurePrefix+cat] = attrN(n)
		}
	}
	switch {
	case watchedForStaleness(sh.Status, sh.PauseReason):
		m["g2pk"] = attrS(runningPK)
		m["g2sk"] = attrS(staleKey(nanos(sh.LastAdvancedAt), sh.JobID, sh.Index))
	case sh.Dirty && store.ShardFinal(sh.Status):
		m["g2pk"] = attrS(dirtyPK)
		m["g2sk"] = attrS(dirtyKey(sh.JobID, sh.Index))
	}
	return m
}

func shardFrom(m map[string]types.AttributeValue) store.Shard {
	sh := store.Shard{
		JobID: getS(m, "job"), Index: int(getN(m, "idx")), Account: getS(m, "account"),
		Status: store.ShardStatus(getS(m, "status")), PauseReason: store.PauseReason(getS(m, "pause")),
		Size: getN(m, "size"), Cursor: getN(m, "cursor"), LastAdvancedAt: fromNanos(getN(m, "lastAdv")),
		Counts: store.Counts{
			Pending: getN(m, "cP"), Submitted: getN(m, "cS"), Confirmed: getN(m, "cC"),
			Failed: getN(m, "cF"), Abandoned: getN(m, "cA"),
		},
		Failures:   map[string]int64{},
		SlowFactor: getF(m, "slow"), Turn: getN(m, "turn"), TurnMessage: getS(m, "turnMsg"),
		Dirty: getBool(m, "dirty"), Epoch: getN(m, "epoch"),
		Attempts: getN(m, attrAttempts), AttemptFailures: getN(m, attrAttemptFailures),
		OutcomesReplay: getBool(m, attrOutcomesReplay), OutcomesOutside: getN(m, attrOutcomesOutside), TurnOpen: getBool(m, attrTurnOpen),
	}
	if n := getN(m, attrOutcomesTo); n != 0 {
		sh.OutcomesPublishedTo = fromNanos(n)
	}
	if n := getN(m, attrOutcomesOutsideAt); n != 0 {
		sh.OutcomesOutsideSeenAt = fromNanos(n)
	}
	for name := range m {
		if cat, ok := strings.CutPrefix(name, failurePrefix); ok {
			if n := getN(m, name); n != 0 {
				sh.Failures[cat] = n
			}
		}
	}
	return sh
}

func (s *Store) readShard(ctx context.Context, jobID string, index int) (map[string]types.AttributeValue, error) {
	if jobID == "" || index < 0 {
		return nil, fmt.Errorf("shard %s/%d: %w", jobID, index, store.ErrNotFound)
	}
	rec, err := s.getItem(ctx, jobPK(jobID), skShard(index))
	if err != nil {
		return nil, fmt.Errorf("read shard %s/%d: %w", jobID, index, err)
	}
	if rec == nil {
		s.cache.dropShard(jobID, index)
		return nil, fmt.Errorf("shard %s/%d: %w", jobID, index, store.ErrNotFound)
	}
	s.cache.putShard(jobID, index, rec)
	return rec, nil
}

// GetShard reads one shard record.
func (s *Store) GetShard(ctx context.Context, jobID string, index int) (store.Shard, error) {
	rec, err := s.readShard(ctx, jobID, index)
	if err != nil {
		return store.Shard{}, err
	}
	return shardFrom(rec), nil
}

// recount tallies a shard's items from its status pages (one Query).
func (s *Store) recount(ctx context.Context, jobID string, index int) (store.Counts, map[string]int64, error) {
	recs, err := s.query(ctx, &dynamodb.QueryInput{
		KeyConditionExpression: aws.String("pk = :pk AND begins_with(sk, :p)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":pk": attrS(jobPK(jobID)), ":p": attrS(fmt.Sprintf("P#%06d#", index)),
		},
		ConsistentRead: aws.Bool(true),
	}, 0)
	if err != nil {
		return store.Counts{}, nil, fmt.Errorf("recount shard %s/%d: %w", jobID, index, err)
	}
	var c store.Counts
	failures := map[string]int64{}
	for _, r := range recs {
		pg, err := pageFrom(r)
		if err != nil {
			return store.Counts{}, nil, fmt.Errorf("recount shard %s/%d: %w", jobID, index, err)
		}
		pg.counts(&c, failures)
	}
	return c, failures, nil
}

// BeginTurn reads the shard, checks the turn, recounts a dirty shard from
// its status pages (next epoch), and writes the turn on condition the shard
// version is unchanged, retrying after a jittered wait when it changed.
func (s *Store) BeginTurn(ctx context.Context, p store.BeginTurnParams) (store.Shard, error) {
	// The previous turn may have run in another process: work this one
	// from fresh reads, and cache the shard's records until it ends (see
	// recordCache).
	s.cache.beginTurn(p.JobID, p.Index)
	for attempt := 0; attempt < s.opts.MaxRetries; attempt++ {
		if attempt > 0 {
			if err := contendedBackoff(ctx, attempt); err != nil {
				return store.Shard{}, err
			}
		}
		rec, err := s.readShard(ctx, p.JobID, p.Index)
		if err != nil {
			return store.Shard{}, err
		}
		sh := shardFrom(rec)
		newTurn := p.Turn == sh.Turn+1
		redelivery := p.Turn == sh.Turn && p.MessageID == sh.TurnMessage
		if !newTurn && !redelivery {
			return store.Shard{}, fmt.Errorf("begin turn %d of shard %s/%d (current %d): %w", p.Turn, p.JobID, p.Index, sh.Turn, store.ErrConflict)
		}
		u := newUpdate()
		u.Set("turn", attrN(p.Turn))
		if p.MessageID != "" {
			u.Set("turnMsg", attrS(p.MessageID))
		} else {
			u.Remove("turnMsg")
		}
		u.Set("dirty", attrBool(true))
		if store.ShardFinal(sh.Status) {
			u.g2For(sh.Status, sh.PauseReason, true, getN(rec, "lastAdv"), p.JobID, p.Index)
		}
		u.Add("sv", 1)
		if sh.TurnOpen {
			u.Set(attrOutcomesReplay, attrBool(true))
		}
		u.Set(attrTurnOpen, attrBool(true))
		if sh.Dirty {
			c, f, err := s.recount(ctx, p.JobID, p.Index)
			if err != nil {
				return store.Shard{}, err
			}
			u.setRecount(rec, c, f)
		}
		u.values[":sv"] = attrN(getN(rec, "sv"))
		out, err := s.updateItem(ctx, u.input(p.JobID, p.Index, "sv = :sv"))
		if isConditionFailed(err) {
			continue
		}
		if err != nil {
			return store.Shard{}, fmt.Errorf("begin turn of shard %s/%d: %w", p.JobID, p.Index, err)
		}
		s.cache.putShard(p.JobID, p.Index, out)
		return shardFrom(out), nil
	}
	return store.Shard{}, fmt.Errorf("begin turn of shard %s/%d: %w", p.JobID, p.Index, store.ErrConflict)
}

// AdvanceShard reads the shard, checks the turn, and writes the advance on
// condition the shard version is unchanged (retrying after a jittered wait
// when it changed). The delta is folded when the caller's epoch is still
// the shard's and the result is possible; otherwise the counts are
// recounted from the status pages instead. The update records a request id
// (see requests.go), so an applied update whose answer was lost is never
// applied twice by a retry.
func (s *Store) AdvanceShard(ctx context.Context, p store.AdvanceShardParams) (store.Shard, error) {
	if p.Cursor < 0 || p.SlowFactor < 0 || p.Attempts < 0 || p.AttemptFailures < 0 {
		return store.Shard{}, fmt.Errorf("advance shard %s/%d: %w", p.JobID, p.Index, store.ErrInvalidArgument)
	}
	if p.JobID == "" || p.Index < 0 {
		return store.Shard{}, fmt.Errorf("shard %s/%d: %w", p.JobID, p.Index, store.ErrNotFound)
	}
	if p.Delta.Total() != 0 {
		return store.Shard{}, fmt.Errorf("advance shard %s/%d: %w: count delta sums to %d", p.JobID, p.Index, store.ErrInvalidArgument, p.Delta.Total())
	}
	rid := newRequestID()
	if p.EndTurn {
		defer s.cache.endTurn(p.JobID, p.Index)
	}
	return s.casShard(ctx, p.JobID, p.Index, rid, "advance shard", func(rec map[string]types.AttributeValue, u *updateBuilder) error {
		if getN(rec, "turn") != p.Turn {
			return fmt.Errorf("advance shard %s/%d: turn %d is not current (%d): %w", p.JobID, p.Index, p.Turn, getN(rec, "turn"), store.ErrConflict)
		}
		sh := shardFrom(rec)
		u.Set("cursor", attrN(max(getN(rec, "cursor"), p.Cursor)))
		folded, err := s.foldOrRecount(ctx, rec, u, p.JobID, p.Index, p.Epoch, p.Delta, p.FailuresDelta)
		if err != nil {
			return err
		}
		after := sh
		store.AdvanceOutcomes(&after, p, folded)
		if p.EndTurn {
			after.Dirty = false
		}
		u.setAdvance(p, sh, after)
		if !after.OutcomesPublishedTo.Equal(sh.OutcomesPublishedTo) {
			u.Set(attrOutcomesTo, attrN(nanos(after.OutcomesPublishedTo)))
		}
		setOutcomeMarks(u, sh, after)
		return nil
	})
}

// setAdvance sets what AdvanceShard moves besides counts and cursor,
// including the attempt counters, which are added whatever the epoch. sh
// is the shard as read, after the shard as the advance leaves it: a final
// shard (a redelivered turn ending) is not put back in the RUNNING
// partition of the index, and is in the DIRTY one while it needs the
// sweep.
func (u *updateBuilder) setAdvance(p store.AdvanceShardParams, sh, after store.Shard) {
	u.Add(attrAttempts, p.Attempts)
	u.Add(attrAttemptFailures, p.AttemptFailures)
	u.Set("lastAdv", attrN(nanos(p.At)))
	if store.ShardFinal(sh.Status) {
		u.g2For(sh.Status, sh.PauseReason, store.NeedsSweep(after), nanos(p.At), p.JobID, p.Index)
	} else {
		u.Set("g2pk", attrS(runningPK))
		u.Set("g2sk", attrS(staleKey(nanos(p.At), p.JobID, p.Index)))
	}
	if p.SlowFactor > 0 {
		u.Set("slow", attrF(p.SlowFactor))
	}
	if p.EndTurn {
		u.Set("dirty", attrBool(false))
		u.Remove(attrTurnOpen)
	}
}

// foldOrRecount adds the delta to u when epoch is still rec's and the
// result is possible (no negative count, the counts add up to the size);
// otherwise it recounts the shard from its status pages into u (next
// epoch). It reports whether the delta was folded.
func (s *Store) foldOrRecount(ctx context.Context, rec map[string]types.AttributeValue, u *updateBuilder, jobID string, index int,
	epoch int64, d store.Counts, f map[string]int64) (bool, error) {
	sh := shardFrom(rec)
	if sh.Epoch == epoch && !sh.Counts.Add(d).Impossible(sh.Size) {
		u.addDelta(d, f)
		return true, nil
	}
	c, fs, err := s.recount(ctx, jobID, index)
	if err != nil {
		return false, err
	}
	u.setRecount(rec, c, fs)
	u.Add("sv", 1)
	return false, nil
}

// casShard reads the shard record, lets build fill an update from it, and
// writes it with request id rid on condition the shard version is
// unchanged, retrying after a jittered wait when it changed. If the record
// already carries rid (an earlier attempt was applied but its answer was
// lost) it returns the record as it is. The first attempt starts from the
// record as this process last wrote or read it, when cached (the sender's
// every batch folds its progress here): every write of a shard moves its
// version, so a stale one fails the condition and is read again, at once.
func (s *Store) casShard(ctx context.Context, jobID string, index int, rid, op string,
	build func(rec map[string]types.AttributeValue, u *updateBuilder) error) (store.Shard, error) {
	cached := s.cache.shard(jobID, index)
	for attempt := 0; attempt < s.opts.MaxRetries; attempt++ {
		if attempt > 0 {
			if err := contendedBackoff(ctx, attempt); err != nil {
				return store.Shard{}, err
			}
		}
		rec := cached
		if rec == nil {
			var err error
			if rec, err = s.readShard(ctx, jobID, index); err != nil {
				return store.Shard{}, err
			}
		}
		if applied(rec, rid) {
			return shardFrom(rec), nil
		}
		u := newUpdate()
		if err := build(rec, u); err != nil {
			return store.Shard{}, err
		}
		u.recordRequest(rec, rid)
		u.values[":sv"] = attrN(getN(rec, "sv"))
		out, err := s.updateItem(ctx, u.input(jobID, index, "sv = :sv"))
		if isConditionFailed(err) {
			if cached != nil {
				// The cached record was stale, not a lost race: read it
				// again and retry without waiting.
				cached = nil
				s.cache.dropShard(jobID, index)
				attempt--
			}
			continue
		}
		cached = nil
		if err != nil {
			s.cache.dropShard(jobID, index)
			// The answer may be lost after the update was applied: look.
			if rec, rerr := s.readShard(ctx, jobID, index); rerr == nil && applied(rec, rid) {
				return shardFrom(rec), nil
			}
			return store.Shard{}, fmt.Errorf("%s %s/%d: %w", op, jobID, index, err)
		}
		s.cache.putShard(jobID, index, out)
		return shardFrom(out), nil
	}
	return store.Shard{}, fmt.Errorf("%s %s/%d: %w", op, jobID, index, store.ErrConflict)
}

// AddShardCounts folds a delta into the shard outside a turn (or recounts
// it when the caller's epoch moved or the result would be impossible), as a
// compare-and-swap with a request id like AdvanceShard.
func (s *Store) AddShardCounts(ctx context.Context, p store.AddShardCountsParams) (store.Shard, error) {
	if p.JobID == "" || p.Index < 0 {
		return store.Shard{}, fmt.Errorf("shard %s/%d: %w", p.JobID, p.Index, store.ErrNotFound)
	}
	if p.Delta.Total() != 0 {
		return store.Shard{}, fmt.Errorf("add shard counts %s/%d: %w: count delta sums to %d", p.JobID, p.Index, store.ErrInvalidArgument, p.Delta.Total())
	}
	rid := newRequestID()
	return s.casShard(ctx, p.JobID, p.Index, rid, "add shard counts", func(rec map[string]types.AttributeValue, u *updateBuilder) error {
		folded, err := s.foldOrRecount(ctx, rec, u, p.JobID, p.Index, p.Epoch, p.Delta, p.FailuresDelta)
		if err != nil {
			return err
		}
		sh := shardFrom(rec)
		after := sh
		if folded && p.ClearDirty {
			u.Set("dirty", attrBool(false))
			after.Dirty = false
		}
		store.AddOutsideOutcomes(&after, p, folded)
		if getS(rec, "g2pk") == dirtyPK && !store.NeedsSweep(after) {
			u.Remove("g2pk")
			u.Remove("g2sk")
		}
		setOutcomeMarks(u, sh, after)
		return nil
	})
}

// setOutcomeMarks writes the replay marks of after into u where they
// differ from sh's (the record as read; the update is conditional on its
// version).
func setOutcomeMarks(u *updateBuilder, sh, after store.Shard) {
	switch {
	case after.OutcomesReplay && !sh.OutcomesReplay:
		u.Set(attrOutcomesReplay, attrBool(true))
	case !after.OutcomesReplay && sh.OutcomesReplay:
		u.Remove(attrOutcomesReplay)
	}
	switch {
	case after.OutcomesOutside == sh.OutcomesOutside:
	case after.OutcomesOutside == 0:
		u.Remove(attrOutcomesOutside)
	default:
		u.Set(attrOutcomesOutside, attrN(after.OutcomesOutside))
	}
	switch {
	case after.OutcomesOutsideSeenAt.Equal(sh.OutcomesOutsideSeenAt):
	case after.OutcomesOutsideSeenAt.IsZero():
		u.Remove(attrOutcomesOutsideAt)
	default:
		u.Set(attrOutcomesOutsideAt, attrN(nanos(after.OutcomesOutsideSeenAt)))
	}
}

// RecountShard queries the shard's status pages and stores the tally on
// condition the shard version is unchanged.
func (s *Store) RecountShard(ctx context.Context, jobID string, index int) (store.Shard, error) {
	return s.recountShard(ctx, jobID, index, "recount shard")
}

// recountShard reads the shard, tallies its status pages and stores the
// tally (next epoch) on condition the shard version is unchanged, retrying
// with backoff when it changed meanwhile. op names the caller in errors.
func (s *Store) recountShard(ctx context.Context, jobID string, index int, op string) (store.Shard, error) {
	for attempt := 0; attempt < s.opts.MaxRetries; attempt++ {
		if attempt > 0 {
			if err := contendedBackoff(ctx, attempt); err != nil {
				return store.Shard{}, err
			}
		}
		rec, err := s.readShard(ctx, jobID, index)
		if err != nil {
			return store.Shard{}, err
		}
		c, f, err := s.recount(ctx, jobID, index)
		if err != nil {
			return store.Shard{}, err
		}
		u := newUpdate()
		u.setRecount(rec, c, f)
		u.Add("sv", 1)
		u.values[":sv"] = attrN(getN(rec, "sv"))
		out, err := s.updateItem(ctx, u.input(jobID, index, "sv = :sv"))
		if isConditionFailed(err) {
			continue
		}
		if err != nil {
			return store.Shard{}, fmt.Errorf("%s %s/%d: %w", op, jobID, index, err)
		}
		s.cache.putShard(jobID, index, out)
		return shardFrom(out), nil
	}
	return store.Shard{}, fmt.Errorf("%s %s/%d: %w", op, jobID, index, store.ErrConflict)
}

// TransitionShard reads the shard and writes the new status on condition it
// is unchanged; entering running puts the shard into the running index.
func (s *Store) TransitionShard(ctx context.Context, p store.TransitionShardParams) (store.Shard, error) {
	for attempt := 0; attempt < s.opts.MaxRetries; attempt++ {
		rec, err := s.readShard(ctx, p.JobID, p.Index)
		if err != nil {
			return store.Shard{}, err
		}
		cur := store.ShardStatus(getS(rec, "status"))
		if (len(p.From) > 0 && !slices.Contains(p.From, cur)) || !store.ShardTransitionAllowed(cur, p.To) {
			return store.Shard{}, fmt.Errorf("shard %s/%d %s → %s: %w", p.JobID, p.Index, cur, p.To, store.ErrInvalidTransition)
		}
		u := newUpdate()
		u.Set("status", attrS(string(p.To)))
		if p.To == store.ShardPaused && p.PauseReason != "" {
			u.Set("pause", attrS(string(p.PauseReason)))
		} else if p.To != store.ShardPaused {
			u.Remove("pause")
		}
		last := getN(rec, "lastAdv")
		if p.To == store.ShardRunning && !p.At.IsZero() {
			last = nanos(p.At)
			u.Set("lastAdv", attrN(last))
		}
		u.g2For(p.To, p.PauseReason, store.NeedsSweep(shardFrom(rec)), last, p.JobID, p.Index)
		// Every write of a shard moves its version: a compare-and-swap
		// begun on the record before (a cached one too) must read again.
		u.Add("sv", 1)
		// On condition the dirty flag (and, to a final status, the outcome
		// marks) are still the ones read, too: the index entry follows
		// them (a mark or a turn's end meanwhile must not leave a final
		// shard that needs the sweep out of the DIRTY partition).
		u.values[":from"] = attrS(string(cur))
		u.values[":dirty"] = attrBool(getBool(rec, "dirty"))
		cond := u.name("status") + " = :from AND dirty = :dirty"
		if !getBool(rec, "dirty") {
			cond = u.name("status") + " = :from AND (attribute_not_exists(dirty) OR dirty = :dirty)"
		}
		if store.ShardFinal(p.To) {
			cond += " AND " + u.sweepMarksAsRead(rec)
		}
		out, err := s.updateItem(ctx, u.input(p.JobID, p.Index, cond))
		if isConditionFailed(err) {
			continue
		}
		if err != nil {
			return store.Shard{}, fmt.Errorf("transition shard %s/%d: %w", p.JobID, p.Index, err)
		}
		s.cache.putShard(p.JobID, p.Index, out)
		return shardFrom(out), nil
	}
	return store.Shard{}, fmt.Errorf("transition shard %s/%d: %w", p.JobID, p.Index, store.ErrConflict)
}

// sweepMarksAsRead is a condition that the shard's outcome marks (its
// replay mark and count of outside changes under way) are still those of
// rec: with Dirty, they decide whether a final shard needs the sweep.
func (u *updateBuilder) sweepMarksAsRead(rec map[string]types.AttributeValue) string {
	re, out := u.name(attrOutcomesReplay), u.name(attrOutcomesOutside)
	replay, n := getBool(rec, attrOutcomesReplay), getN(rec, attrOutcomesOutside)
	u.values[":ocre"], u.values[":ocout"] = attrBool(replay), attrN(n)
	cond := re + " = :ocre"
	if !replay {
		cond = "(attribute_not_exists(" + re + ") OR " + cond + ")"
	}
	if n == 0 {
		return cond + " AND (attribute_not_exists(" + out + ") OR " + out + " = :ocout)"
	}
	return cond + " AND " + out + " = :ocout"
}

// ListStaleShards queries the running index up to the minute of p.Before
// and keeps the shards whose record is still running (or paused by its
// breaker) and older than p.Before.
func (s *Store) ListStaleShards(ctx context.Context, p store.ListStaleShardsParams) ([]store.ShardRef, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = 100
	}
	before := nanos(p.Before)
	upper := fmt.Sprintf("%020d", before-before%staleBucket+staleBucket)
	in := &dynamodb.QueryInput{
		TableName:              aws.String(s.table),
		IndexName:              aws.String(indexRunning),
		KeyConditionExpression: aws.String("g2pk = :pk AND g2sk < :up"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":pk": attrS(runningPK), ":up": attrS(upper),
		},
		Limit:                  aws.Int32(100),
		ReturnConsumedCapacity: s.capacity(),
	}
	refs, err := s.listIndexedShards(ctx, in, limit, func(r map[string]types.AttributeValue) bool {
		return watchedForStaleness(store.ShardStatus(getS(r, "status")), store.PauseReason(getS(r, "pause"))) &&
			getN(r, "lastAdv") < before
	})
	if err != nil {
		return nil, fmt.Errorf("list stale shards: %w", err)
	}
	return refs, nil
}

// listIndexedShards pages through the index entries in returns, reads
// their shard records (strongly consistent: an entry may lag its record)
// and keeps the first limit shards whose record keep accepts. An entry
// whose record is gone is skipped.
func (s *Store) listIndexedShards(ctx context.Context, in *dynamodb.QueryInput, limit int,
	keep func(rec map[string]types.AttributeValue) bool) ([]store.ShardRef, error) {
	refs := []store.ShardRef{}
	for {
		out, err := s.db.Query(ctx, in)
		if err != nil {
			return nil, err
		}
		s.consumed("Query", out.ConsumedCapacity)
		keys := make([]map[string]types.AttributeValue, len(out.Items))
		for i, k := range out.Items {
			keys[i] = key(getS(k, attrPK), getS(k, attrSK))
		}
		recs, err := s.batchGet(ctx, keys, true)
		if err != nil {
			return nil, err
		}
		for _, k := range keys {
			r, ok := recs[recordID(k)]
			if !ok || !keep(r) {
				continue
			}
			refs = append(refs, store.ShardRef{JobID: getS(r, "job"), Index: int(getN(r, "idx"))})
			if len(refs) == limit {
				return refs, nil
			}
		}
		if len(out.LastEvaluatedKey) == 0 {
			return refs, nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}

// MarkShardDirty sets the shard's dirty flag (and, for a final shard, its
// entry in the DIRTY partition of the running index) and starts its next
// count epoch, on condition the shard version is unchanged, and returns the
// record as it was. The version moves too: a compare-and-swap that read the
// shard before the mark (a turn's EndTurn, another change's fold clearing
// its own mark) fails and reads it again, instead of clearing this mark
// blind. A retry of it after a lost
// answer finds the shard already dirty, which only makes the caller
// recount instead of folding: safe.
func (s *Store) MarkShardDirty(ctx context.Context, jobID string, index int) (store.Shard, error) {
	for attempt := 0; attempt < s.opts.MaxRetries; attempt++ {
		if attempt > 0 {
			if err := contendedBackoff(ctx, attempt); err != nil {
				return store.Shard{}, err
			}
		}
		rec, err := s.readShard(ctx, jobID, index)
		if err != nil {
			return store.Shard{}, err
		}
		sh := shardFrom(rec)
		u := newUpdate()
		u.Set("dirty", attrBool(true))
		u.Set("epoch", attrN(sh.Epoch+1))
		u.Set(attrOutcomesOutside, attrN(sh.OutcomesOutside+1))
		if store.ShardFinal(sh.Status) {
			u.g2For(sh.Status, sh.PauseReason, true, getN(rec, "lastAdv"), jobID, index)
		}
		u.Add("sv", 1)
		u.values[":sv"] = attrN(getN(rec, "sv"))
		out, err := s.updateItem(ctx, u.input(jobID, index, "sv = :sv"))
		if isConditionFailed(err) {
			continue
		}
		if err != nil {
			return store.Shard{}, fmt.Errorf("mark shard %s/%d dirty: %w", jobID, index, err)
		}
		s.cache.putShard(jobID, index, out)
		return sh, nil
	}
	return store.Shard{}, fmt.Errorf("mark shard %s/%d dirty: %w", jobID, index, store.ErrConflict)
}

// ListDirtyShards queries the DIRTY partition of the running index and
// keeps the shards whose record is still final and needs the sweep.
func (s *Store) ListDirtyShards(ctx context.Context, p store.ListDirtyShardsParams) ([]store.ShardRef, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = 100
	}
	in := &dynamodb.QueryInput{
		TableName:                 aws.String(s.table),
		IndexName:                 aws.String(indexRunning),
		KeyConditionExpression:    aws.String("g2pk = :pk"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": attrS(dirtyPK)},
		Limit:                     aws.Int32(100),
		ReturnConsumedCapacity:    s.capacity(),
	}
	refs, err := s.listIndexedShards(ctx, in, limit, func(r map[string]types.AttributeValue) bool {
		if sh := shardFrom(r); !store.NeedsSweep(sh) || !store.ShardFinal(sh.Status) {
			s.dropDirtyEntry(ctx, r)
			return false
		}
		return true
	})
	if err != nil {
		return nil, fmt.Errorf("list dirty shards: %w", err)
	}
	return refs, nil
}

// dropDirtyEntry removes the DIRTY index entry of a shard that is no longer
// final or in need of the sweep (a race between a transition and a fold
// can leave one),
// on condition it still is in that state; best effort: the listing skips
// such entries anyway.
func (s *Store) dropDirtyEntry(ctx context.Context, rec map[string]types.AttributeValue) {
	u := newUpdate()
	u.Remove("g2pk")
	u.Remove("g2sk")
	u.Add("sv", 1)
	u.values[":pk"] = attrS(dirtyPK)
	u.values[":sv"] = attrN(getN(rec, "sv"))
	u.values[":st"] = attrS(getS(rec, "status"))
	u.values[":dirty"] = attrBool(getBool(rec, "dirty"))
	in := u.input(getS(rec, "job"), int(getN(rec, "idx")), "g2pk = :pk AND sv = :sv AND dirty = :dirty AND "+u.name("status")+" = :st")
	s.cache.dropShard(getS(rec, "job"), int(getN(rec, "idx")))
	if _, err := s.updateItem(ctx, in); err != nil && !isConditionFailed(err) {
		s.log.Warn("cannot drop a stale dirty-shard index entry", slog.String("job", getS(rec, "job")), slog.Int64("shard", getN(rec, "idx")), slog.Any("err", err))
	}
}
