package submit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"slices"
	"time"

	"github.com/qunfa/qunfa/internal/alert"
	"github.com/qunfa/qunfa/internal/dispatch"
	"github.com/qunfa/qunfa/internal/store"
)

// Planning a staged job runs as queue work, one step per planning message,
// each step checkpointed (store.PlanState) before the next is enqueued, so
// a crash repeats at most one step:
//
//  1. count: one pass over the parts counts recipients per account, which
//     fixes the shards (as Submit: an account above ShardSplit is split by
//     recipient hash) and groups consecutive shards into groups of about
//     Limits.PlanGroup recipients;
//  2. one step per group: a pass over the parts keeps the recipients of
//     the group's shards, drops duplicates (a recipient's shard depends on
//     account and to only, so duplicates always meet in one group), drops
//     suppressed recipients and writes the group's items. Memory is
//     bounded by the group, never the job;
//  3. release: install the shards with their sizes, run the job, enqueue
//     every shard's first turn, delete the parts.
//
// Seqs follow the parts only: shard after shard, the k-th distinct
// recipient of a shard at the shard's base + k, a suppressed one leaving a
// gap. A repeated group step therefore writes every recipient at the seq it
// had, so no item is ever written twice under two seqs. A repeated step
// does not drop suppressed recipients (one written by the interrupted
// attempt must stay counted); the sender skips them at its batch check.

// planState is the checkpoint of a staged job's planning.
type planState struct {
	Parts int `json:"parts"`
	// Accounts and the shard layout, set by the count step.
	Accounts []planAccount `json:"accounts,omitempty"`
	// Groups are consecutive shard ranges [from, to).
	Groups    [][2]int `json:"groups,omitempty"`
	Counted   bool     `json:"counted,omitempty"`
	NextGroup int      `json:"next_group"`
	// Attempted is the last group a step began (−1: none), so a repeated
	// step knows it is one.
	Attempted  int     `json:"attempted"`
	NextSeq    int64   `json:"next_seq"`
	Bases      []int64 `json:"bases,omitempty"`
	Sizes      []int64 `json:"sizes,omitempty"`
	Suppressed int64   `json:"suppressed"`
	Duplicates int64   `json:"duplicates"`
	// SavedAt (unix ns) is when planning last moved; Repairs how often
	// the watchdog re-sent its message since (RepairPlan).
	SavedAt int64 `json:"saved_at,omitempty"`
	Repairs int   `json:"repairs,omitempty"`
}

// planAccount is one account's place in the shard layout.
type planAccount struct {
	Account    string `json:"account"`
	Recipients int64  `json:"recipients"` // before dropping duplicates
	First      int    `json:"first"`      // its first shard
	Shards     int    `json:"shards"`
}

type loadedPlan struct {
	state   planState
	version int64
}

func (s *Submitter) loadPlan(ctx context.Context, ss store.StagingStore, jobID string) (loadedPlan, error) {
	ps, err := ss.GetPlanState(ctx, jobID)
	if err != nil {
		return loadedPlan{}, fmt.Errorf("read plan of job %s: %w", jobID, err)
	}
	var st planState
	if err := json.Unmarshal(ps.State, &st); err != nil {
		return loadedPlan{}, fmt.Errorf("decode plan of job %s: %w", jobID, err)
	}
	return loadedPlan{state: st, version: ps.Version}, nil
}

// savePlan checkpoints a step: planning moved.
func (s *Submitter) savePlan(ctx context.Context, ss store.StagingStore, jobID string, lp loadedPlan) (loadedPlan, error) {
	lp.state.SavedAt, lp.state.Repairs = s.Clock.Now().UnixNano(), 0
	return s.storePlan(ctx, ss, jobID, lp)
}

func (s *Submitter) storePlan(ctx context.Context, ss store.StagingStore, jobID string, lp loadedPlan) (loadedPlan, error) {
	b, err := json.Marshal(lp.state)
	if err != nil {
		return lp, fmt.Errorf("encode plan of job %s: %w", jobID, err)
	}
	saved, err := ss.SavePlanState(ctx, store.PlanState{JobID: jobID, Version: lp.version, State: b})
	if err != nil {
		return lp, fmt.Errorf("save plan of job %s: %w", jobID, err)
	}
	lp.version = saved.Version
	return lp, nil
}

func (s *Submitter) logger() *slog.Logger {
	if s.Log != nil {
		return s.Log
	}
	return slog.Default()
}

// Plan runs the next planning step of a starting job and enqueues the one
// after it. A job no longer starting is left alone (a cancelled one has
// its parts deleted; a running one gets its first turns enqueued again,
// which the queue's dedup and the store's turn fencing make harmless).
func (s *Submitter) Plan(ctx context.Context, jobID string) error {
	ss, err := s.staging()
	if err != nil {
		return err
	}
	job, err := s.Store.GetJobRecord(ctx, jobID)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("plan job %s: %w", jobID, err)
	}
	switch job.Status {
	case store.JobStarting:
	case store.JobCancelled, store.JobFailed:
		return ss.DeleteParts(ctx, jobID)
	case store.JobRunning:
		return s.repairRelease(ctx, ss, jobID)
	default:
		return nil
	}
	lp, err := s.loadPlan(ctx, ss, jobID)
	if err != nil {
		return err
	}
	lim := s.Limits.withDefaults()
	switch {
	case !lp.state.Counted:
		lp, err = s.planCount(ctx, ss, job, lp, lim)
	case lp.state.NextGroup < len(lp.state.Groups):
		lp, err = s.planGroup(ctx, ss, job, lp)
	default:
		return s.planRelease(ctx, ss, job, lp)
	}
	if errors.Is(err, store.ErrConflict) {
		return nil // another worker ran this step (a duplicate message)
	}
	if err != nil {
		return err
	}
	return dispatch.SendPlan(ctx, s.Queue, jobID, lp.version)
}

// eachPart reads parts 1..n one at a time.
func eachPart(ctx context.Context, ss store.StagingStore, jobID string, n int, fn func(storedLine) error) error {
	for part := 1; part <= n; part++ {
		data, err := ss.ReadPart(ctx, jobID, part)
		if err != nil {
			return fmt.Errorf("read part %d of job %s: %w", part, jobID, err)
		}
		if err := eachStored(data, fn); err != nil {
			return fmt.Errorf("part %d of job %s: %w", part, jobID, err)
		}
	}
	return nil
}

// planCount counts recipients per account and lays out shards and groups.
func (s *Submitter) planCount(ctx context.Context, ss store.StagingStore, job store.Job, lp loadedPlan, lim Limits) (loadedPlan, error) {
	counts := map[string]int64{}
	err := eachPart(ctx, ss, job.ID, lp.state.Parts, func(l storedLine) error {
		counts[string(l.account)]++ // the JSON-quoted account: one key per account
		return nil
	})
	if err != nil {
		return lp, err
	}
	st := &lp.state
	st.Accounts = st.Accounts[:0]
	for quoted, n := range counts {
		a, err := jsonString([]byte(quoted))
		if err != nil {
			return lp, err
		}
		st.Accounts = append(st.Accounts, planAccount{Account: a, Recipients: n})
	}
	slices.SortFunc(st.Accounts, func(a, b planAccount) int {
		switch {
		case a.Account < b.Account:
			return -1
		case a.Account > b.Account:
			return 1
		}
		return 0
	})
	shards := 0
	var est []int64 // estimated recipients per shard
	for i := range st.Accounts {
		a := &st.Accounts[i]
		a.First = shards
		a.Shards = int((a.Recipients + int64(lim.ShardSplit) - 1) / int64(lim.ShardSplit))
		shards += a.Shards
		for range a.Shards {
			est = append(est, a.Recipients/int64(a.Shards)+1)
		}
	}
	st.Groups = nil
	for from := 0; from < shards; {
		to, sum := from, int64(0)
		for to < shards && (to == from || sum+est[to] <= int64(lim.PlanGroup)) {
			sum += est[to]
			to++
		}
		st.Groups = append(st.Groups, [2]int{from, to})
		from = to
	}
	st.Bases, st.Sizes = make([]int64, shards), make([]int64, shards)
	st.Counted, st.NextGroup, st.Attempted, st.NextSeq = true, 0, -1, 0
	s.logger().Info("staged job counted", slog.String("job", job.ID), slog.Int("accounts", len(st.Accounts)),
		slog.Int("shards", shards), slog.Int("groups", len(st.Groups)))
	return s.savePlan(ctx, ss, job.ID, lp)
}

// shardOf is the shard of a recipient in the layout (account and to as
// their decoded bytes), -1 for an account not in it.
func shardOf(accounts []planAccount, account, to []byte) int {
	i, found := slices.BinarySearchFunc(accounts, account, func(a planAccount, t []byte) int {
		switch {
		case a.Account < string(t):
			return -1
		case a.Account > string(t):
			return 1
		}
		return 0
	})
	if !found {
		return -1
	}
	a := accounts[i]
	if a.Shards <= 1 {
		return a.First
	}
	h := fnv.New32a()
	h.Write(to)
	return a.First + int(h.Sum32()%uint32(a.Shards))
}

// rawString is the decoded content of a stored JSON string, the stored
// bytes themselves when it has no escapes (most do): a planning pass
// decodes every recipient of the job and keeps only its group's.
func rawString(b []byte) ([]byte, error) {
	if len(b) >= 2 && b[0] == '"' && b[len(b)-1] == '"' && bytes.IndexByte(b, '\\') < 0 {
		return b[1 : len(b)-1], nil
	}
	s, err := jsonString(b)
	return []byte(s), err
}

// groupShard holds one shard's distinct recipients during a group step:
// their stored lines back to back, and the recipients seen (the account
// is the shard's, so the recipient alone is the key). About 100 bytes a
// recipient.
type groupShard struct {
	lines []byte
	n     int64
	seen  map[string]struct{}
}

// planGroup writes the items of the next group of shards.
func (s *Submitter) planGroup(ctx context.Context, ss store.StagingStore, job store.Job, lp loadedPlan) (loadedPlan, error) {
	st := &lp.state
	g := st.NextGroup
	from, to := st.Groups[g][0], st.Groups[g][1]
	repeated := st.Attempted == g
	anySupp := false
	if !repeated {
		st.Attempted = g
		var err error
		if lp, err = s.savePlan(ctx, ss, job.ID, lp); err != nil {
			return lp, err
		}
		st = &lp.state
		if anySupp, err = s.anySuppressions(ctx, job.Tenant); err != nil {
			return lp, err
		}
	}
	shards := make([]groupShard, to-from)
	var dups int64
	err := eachPart(ctx, ss, job.ID, st.Parts, func(l storedLine) error {
		account, err := rawString(l.account)
		if err != nil {
			return err
		}
		rto, err := rawString(l.to)
		if err != nil {
			return err
		}
		sh := shardOf(st.Accounts, account, rto)
		if sh < from || sh >= to {
			return nil
		}
		g := &shards[sh-from]
		if g.seen == nil {
			g.seen = map[string]struct{}{}
		}
		if _, dup := g.seen[string(rto)]; dup {
			dups++
			return nil
		}
		g.seen[string(rto)] = struct{}{}
		// The line as stored, copied: the part's buffer is dropped after
		// the pass.
		g.lines = appendStored(g.lines, l)
		g.n++
		return nil
	})
	if err != nil {
		return lp, err
	}
	for i := range shards {
		shards[i].seen = nil
	}
	var page []store.Item
	flush := func() error {
		if len(page) == 0 {
			return nil
		}
		if err := s.Store.PutItems(ctx, store.PutItemsParams{JobID: job.ID, Items: page}); err != nil {
			return fmt.Errorf("write items of job %s: %w", job.ID, err)
		}
		page = page[:0]
		return nil
	}
	var suppressed int64
	chunk := make([]storedLine, 0, store.MaxPutItems)
	for i := range shards {
		sh := from + i
		account := accountOf(st.Accounts, sh)
		base := st.NextSeq
		st.Bases[sh] = base
		var written, next int64
		// writeChunk writes the recipients in chunk, the next ones of the
		// shard, less the suppressed.
		writeChunk := func() error {
			var supp map[store.RecipientKey]bool
			tos := make([]string, len(chunk))
			for j, l := range chunk {
				var err error
				if tos[j], err = jsonString(l.to); err != nil {
					return err
				}
			}
			if !repeated && anySupp {
				keys := make([]store.RecipientKey, len(chunk))
				for j := range chunk {
					keys[j] = store.RecipientKey{Account: account, To: tos[j]}
				}
				var err error
				if supp, err = s.Store.SuppressedAmong(ctx, job.Tenant, keys); err != nil {
					return fmt.Errorf("suppression look-up: %w", err)
				}
			}
			for j, l := range chunk {
				seq := base + next
				next++
				if supp[store.RecipientKey{Account: account, To: tos[j]}] {
					suppressed++
					continue
				}
				ref, err := jsonString(l.ref)
				if err != nil {
					return err
				}
				it := store.Item{JobID: job.ID, Shard: sh, Seq: seq, Account: account, To: tos[j], Ref: ref, Status: store.ItemPending}
				if len(l.vars) > 0 {
					if err := json.Unmarshal(l.vars, &it.Vars); err != nil {
						return fmt.Errorf("stored vars: %w", err)
					}
				}
				page = append(page, it)
				written++
				if len(page) == store.MaxPutItems {
					if err := flush(); err != nil {
						return err
					}
				}
			}
			chunk = chunk[:0]
			return nil
		}
		err := eachStored(shards[i].lines, func(l storedLine) error {
			chunk = append(chunk, l)
			if len(chunk) == store.MaxPutItems {
				return writeChunk()
			}
			return nil
		})
		if err == nil && len(chunk) > 0 {
			err = writeChunk()
		}
		if err != nil {
			return lp, err
		}
		shards[i].lines = nil
		st.Sizes[sh] = written
		st.NextSeq = base + shards[i].n
	}
	if err := flush(); err != nil {
		return lp, err
	}
	st.Suppressed += suppressed
	st.Duplicates += dups
	st.NextGroup = g + 1
	s.logger().Info("staged job group planned", slog.String("job", job.ID), slog.Int("group", g),
		slog.Int("groups", len(st.Groups)), slog.Int64("suppressed", suppressed), slog.Int64("duplicates", dups))
	return s.savePlan(ctx, ss, job.ID, lp)
}

// repairRelease finishes a release interrupted after the job ran: while
// the checkpoint is there (parts are deleted last), the shards' first
// turns are enqueued again (dropped as duplicates, or fenced, when they
// were sent).
func (s *Submitter) repairRelease(ctx context.Context, ss store.StagingStore, jobID string) error {
	if _, err := ss.GetPlanState(ctx, jobID); errors.Is(err, store.ErrNotFound) {
		return nil
	} else if err != nil {
		return fmt.Errorf("read plan of job %s: %w", jobID, err)
	}
	view, err := s.Store.GetJob(ctx, jobID)
	if err != nil {
		return fmt.Errorf("read job %s: %w", jobID, err)
	}
	if err := dispatch.SendTurns(ctx, s.Queue, firstTurns(view)); err != nil {
		return err
	}
	return ss.DeleteParts(ctx, jobID)
}

// accountOf is the account of a shard in the layout.
func accountOf(accounts []planAccount, shard int) string {
	for _, a := range accounts {
		if shard >= a.First && shard < a.First+a.Shards {
			return a.Account
		}
	}
	return ""
}

// planRelease installs the shards, runs the job and enqueues its turns.
func (s *Submitter) planRelease(ctx context.Context, ss store.StagingStore, job store.Job, lp loadedPlan) error {
	st := lp.state
	now := s.Clock.Now()
	// Items carry their layout shard index, and the store wants indexes
	// 0..n-1: every layout shard is installed, one left empty (all its
	// recipients suppressed) as completed.
	var shards []store.Shard
	var total int64
	for _, a := range st.Accounts {
		for sh := a.First; sh < a.First+a.Shards; sh++ {
			status := store.ShardRunning
			if st.Sizes[sh] == 0 {
				status = store.ShardCompleted
			}
			shards = append(shards, store.Shard{
				JobID: job.ID, Index: sh, Account: a.Account, Status: status, Size: st.Sizes[sh],
				Cursor: st.Bases[sh], SlowFactor: 1, LastAdvancedAt: now, Counts: store.Counts{Pending: st.Sizes[sh]},
			})
			total += st.Sizes[sh]
		}
	}
	if total == 0 {
		shards = nil
	}
	released, err := ss.ReleasePlannedJob(ctx, store.ReleasePlannedJobParams{
		JobID: job.ID, Shards: shards, Total: total, Suppressed: st.Suppressed, At: now,
	})
	switch {
	case errors.Is(err, store.ErrInvalidTransition):
		return s.Plan(ctx, job.ID) // released (or cancelled) meanwhile: repair or discard
	case err != nil:
		return fmt.Errorf("release job %s: %w", job.ID, err)
	}
	alert.Emit(ctx, s.Alerts, s.logger(), alert.Event{Type: alert.JobStarted, Tenant: released.Tenant, Time: now,
		Detail: alert.JobStartedDetail{JobID: released.ID, Name: released.Name, Total: released.Total, Shards: released.ShardCount}})
	var turns []dispatch.Turn
	for _, sh := range shards {
		if sh.Status == store.ShardRunning {
			turns = append(turns, dispatch.Turn{JobID: job.ID, Shard: sh.Index, Turn: 1})
		}
	}
	if err := dispatch.SendTurns(ctx, s.Queue, turns); err != nil {
		return err
	}
	s.logger().Info("staged job released", slog.String("job", job.ID), slog.Int64("total", total),
		slog.Int64("suppressed", st.Suppressed), slog.Int64("duplicates", st.Duplicates), slog.Int("shards", len(shards)))
	if err := ss.DeleteParts(ctx, job.ID); err != nil {
		s.logger().Warn("delete parts of a released job", slog.String("job", job.ID), slog.Any("err", err))
	}
	return nil
}

// PlanRepair says what RepairPlan did.
type PlanRepair int

// What RepairPlan did.
const (
	PlanMoving PlanRepair = iota // planning moved since staleBefore, or the job is not starting: nothing
	PlanResent                   // the planning message was sent again
	PlanFailed                   // planning failed maxRepairs times: the job failed
)

// RepairPlan is the planning watchdog, run by the reconciler for every
// starting job: planning that has not moved since staleBefore lost its
// message (dead-lettered after failing every delivery, or never sent). Its
// message is sent again — under a new checkpoint version, so the queue's
// deduplication lets it through — at most maxRepairs times without
// progress in between; then the job fails visibly (status failed, its
// parts discarded, JobFinished published), so it never stays starting.
func (s *Submitter) RepairPlan(ctx context.Context, jobID string, staleBefore time.Time, maxRepairs int) (PlanRepair, error) {
	ss, err := s.staging()
	if err != nil {
		return PlanMoving, err
	}
	job, err := s.Store.GetJobRecord(ctx, jobID)
	if errors.Is(err, store.ErrNotFound) {
		return PlanMoving, nil
	}
	if err != nil {
		return PlanMoving, fmt.Errorf("repair planning of job %s: %w", jobID, err)
	}
	if job.Status != store.JobStarting {
		return PlanMoving, nil
	}
	lp, err := s.loadPlan(ctx, ss, jobID)
	if err != nil {
		return PlanMoving, err
	}
	if time.Unix(0, lp.state.SavedAt).After(staleBefore) {
		return PlanMoving, nil
	}
	log := s.logger().With(slog.String("job", jobID), slog.Int("repairs", lp.state.Repairs))
	if lp.state.Repairs >= maxRepairs {
		now := s.Clock.Now()
		if _, err := s.Store.TransitionJob(ctx, store.TransitionJobParams{
			JobID: jobID, From: []store.JobStatus{store.JobStarting}, To: store.JobFailed, At: now,
		}); err != nil {
			if errors.Is(err, store.ErrInvalidTransition) {
				return PlanMoving, nil
			}
			return PlanMoving, fmt.Errorf("fail job %s: %w", jobID, err)
		}
		log.Error("planning of a staged job failed again after every repair: the job failed; submit it again",
			slog.Time("last_progress", time.Unix(0, lp.state.SavedAt)))
		alert.Emit(ctx, s.Alerts, s.logger(), alert.Event{Type: alert.JobFinished, Tenant: job.Tenant, Time: now,
			Detail: alert.JobFinishedDetail{JobID: jobID, Name: job.Name, Status: string(store.JobFailed), Failures: map[string]int64{}}})
		if err := ss.DeleteParts(ctx, jobID); err != nil {
			return PlanFailed, fmt.Errorf("discard the parts of failed job %s: %w", jobID, err)
		}
		return PlanFailed, nil
	}
	last := time.Unix(0, lp.state.SavedAt)
	lp.state.Repairs++
	lp.state.SavedAt = s.Clock.Now().UnixNano()
	lp, err = s.storePlan(ctx, ss, jobID, lp)
	if errors.Is(err, store.ErrConflict) {
		return PlanMoving, nil // a step saved meanwhile: planning moves
	}
	if err != nil {
		return PlanMoving, err
	}
	if err := dispatch.SendPlan(ctx, s.Queue, jobID, lp.version); err != nil {
		return PlanMoving, err
	}
	log.Warn("planning of a staged job made no progress: its message was sent again", slog.Time("last_progress", last))
	return PlanResent, nil
}
