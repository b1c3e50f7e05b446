package sender_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"path/filepath"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/alert"
	"github.com/qunfa/qunfa/internal/alert/alerttest"
	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/store/sqlitestore"
	"github.com/qunfa/qunfa/internal/store/storetest"
)

// finishFixture is a running job on the embedded store whose items a test
// moves by hand, as turns and operators would, before asking FinishJob
// what the job has become.
type finishFixture struct {
	t      *testing.T
	st     *sqlitestore.Store
	jobID  string
	claims int
	// logs is what FinishJob logged.
	logs bytes.Buffer
}

func newFinishFixture(t *testing.T, shards, perShard int) *finishFixture {
	t.Helper()
	ctx := context.Background()
	st, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "store.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	p, items := storetest.NewJob(tenant, shards, perShard)
	if _, err := st.CreateJob(ctx, p); err != nil {
		t.Fatal(err)
	}
	if err := st.PutItems(ctx, store.PutItemsParams{JobID: p.Job.ID, Items: items}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.TransitionJob(ctx, store.TransitionJobParams{JobID: p.Job.ID, To: store.JobRunning, At: storetest.Epoch}); err != nil {
		t.Fatal(err)
	}
	for i := range shards {
		if _, err := st.TransitionShard(ctx, store.TransitionShardParams{JobID: p.Job.ID, Index: i, To: store.ShardRunning, At: storetest.Epoch}); err != nil {
			t.Fatal(err)
		}
	}
	return &finishFixture{t: t, st: st, jobID: p.Job.ID}
}

// move claims n pending items of a shard and sets them to `to` (with an
// error of category cat when cat is set; submitted: left claimed), folding
// the counts into the shard as an outside change does.
func (f *finishFixture) move(shard, n int, to store.ItemStatus, cat string) {
	f.t.Helper()
	ctx := context.Background()
	now := storetest.Epoch.Add(time.Minute)
	before, err := store.BeginOutsideTurn(ctx, f.st, f.jobID, shard)
	if err != nil {
		f.t.Fatal(err)
	}
	f.claims++
	claimID := fmt.Sprintf("claim-%d", f.claims)
	claim, err := f.st.ClaimItems(ctx, store.ClaimItemsParams{JobID: f.jobID, Index: shard, Max: n, Now: now, ClaimID: claimID})
	if err != nil || len(claim.Items) != n {
		f.t.Fatalf("claim %d items of shard %d: %d, %v", n, shard, len(claim.Items), err)
	}
	delta, failures := claim.Delta, map[string]int64{}
	if to != store.ItemSubmitted {
		var ups []store.ItemUpdate
		for _, it := range claim.Items {
			u := store.ItemUpdate{Seq: it.Seq, From: store.ItemSubmitted, ClaimID: claimID, To: to}
			if cat != "" {
				u.Error = &store.ItemError{Category: cat, Message: cat}
			}
			ups = append(ups, u)
		}
		res, err := f.st.UpdateItems(ctx, store.UpdateItemsParams{JobID: f.jobID, Index: shard, Updates: ups, At: now})
		if err != nil || len(res.Rejected) > 0 {
			f.t.Fatalf("update: %+v %v", res, err)
		}
		delta, failures = delta.Add(res.Delta), res.FailuresDelta
	}
	if _, err := store.FoldOutsideTurn(ctx, f.st, before, delta, failures); err != nil {
		f.t.Fatal(err)
	}
}

func (f *finishFixture) finishShard(shard int) {
	f.t.Helper()
	if _, err := f.st.TransitionShard(context.Background(), store.TransitionShardParams{
		JobID: f.jobID, Index: shard, To: store.ShardCompleted, At: storetest.Epoch.Add(time.Minute),
	}); err != nil {
		f.t.Fatal(err)
	}
}

func (f *finishFixture) finish(alerts *alerttest.Recorder) store.JobView {
	f.t.Helper()
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(&f.logs, nil))
	if err := sender.FinishJob(ctx, f.st, alerts, log, f.jobID, storetest.Epoch.Add(2*time.Minute)); err != nil {
		f.t.Fatalf("FinishJob: %v", err)
	}
	v, err := f.st.GetJob(ctx, f.jobID)
	if err != nil {
		f.t.Fatal(err)
	}
	return v
}

// TestFinishJobDecides: FinishJob finishes a running job only when every
// shard is final and no item is left pending or submitted (an item whose
// answer was lost is still owed an outcome), with the status the items
// earned — completed when all were delivered, partial when some failed or
// were abandoned, failed when none was delivered — and publishes
// JobFinished with the counts, plus DeadLetters for exhausted and
// permanent failures. A final shard left dirty (an outside change died
// before folding its counts) is run again instead: its counts cannot be
// trusted.
func TestFinishJobDecides(t *testing.T) {
	t.Parallel()
	type moveOf struct {
		shard, n int
		to       store.ItemStatus
		cat      string
	}
	tests := []struct {
		name      string
		moves     []moveOf
		finished  []int // shards set completed
		dirty     int   // shard marked dirty after (-1: none)
		want      store.JobStatus
		dead      map[string]int64
		runShards []int // shards expected running again
	}{
		{name: "all delivered", moves: []moveOf{{0, 3, store.ItemConfirmed, ""}, {1, 3, store.ItemConfirmed, ""}},
			finished: []int{0, 1}, dirty: -1, want: store.JobCompleted},
		{name: "one abandoned", moves: []moveOf{{0, 3, store.ItemConfirmed, ""}, {1, 2, store.ItemConfirmed, ""}, {1, 1, store.ItemAbandoned, store.CategorySuppressed}},
			finished: []int{0, 1}, dirty: -1, want: store.JobPartial},
		{name: "one failed permanently", moves: []moveOf{{0, 3, store.ItemConfirmed, ""}, {1, 2, store.ItemConfirmed, ""}, {1, 1, store.ItemFailed, store.CategoryPermanent}},
			finished: []int{0, 1}, dirty: -1, want: store.JobPartial, dead: map[string]int64{store.CategoryPermanent: 1}},
		{name: "none delivered", moves: []moveOf{{0, 3, store.ItemFailed, store.CategoryExhausted}, {1, 3, store.ItemFailed, store.CategoryPermanent}},
			finished: []int{0, 1}, dirty: -1, want: store.JobFailed, dead: map[string]int64{store.CategoryExhausted: 3, store.CategoryPermanent: 3}},
		{name: "an answer still owed", moves: []moveOf{{0, 3, store.ItemConfirmed, ""}, {1, 2, store.ItemConfirmed, ""}, {1, 1, store.ItemSubmitted, ""}},
			finished: []int{0, 1}, dirty: -1, want: store.JobRunning},
		{name: "a shard still running", moves: []moveOf{{0, 3, store.ItemConfirmed, ""}, {1, 3, store.ItemConfirmed, ""}},
			finished: []int{0}, dirty: -1, want: store.JobRunning},
		{name: "a finished shard left dirty", moves: []moveOf{{0, 3, store.ItemConfirmed, ""}, {1, 3, store.ItemConfirmed, ""}},
			finished: []int{0, 1}, dirty: 1, want: store.JobRunning, runShards: []int{1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFinishFixture(t, 2, 3)
			for _, m := range tc.moves {
				f.move(m.shard, m.n, m.to, m.cat)
			}
			for _, i := range tc.finished {
				f.finishShard(i)
			}
			if tc.dirty >= 0 {
				if _, err := f.st.MarkShardDirty(context.Background(), f.jobID, tc.dirty); err != nil {
					t.Fatal(err)
				}
			}
			alerts := &alerttest.Recorder{}
			v := f.finish(alerts)
			if v.Job.Status != tc.want {
				t.Fatalf("job %s (counts %+v), want %s", v.Job.Status, v.Counts(), tc.want)
			}
			for _, i := range tc.runShards {
				if v.Shards[i].Status != store.ShardRunning {
					t.Errorf("shard %d %s, want running again", i, v.Shards[i].Status)
				}
				// The operator reads why in the log FinishJob was given.
				if line := fmt.Sprintf("running it again\" job=%s shard=%d", f.jobID, i); !bytes.Contains(f.logs.Bytes(), []byte(line)) {
					t.Errorf("log %q does not say %q", f.logs.String(), line)
				}
			}
			fin := alerts.Of(alert.JobFinished)
			if tc.want == store.JobRunning {
				if len(fin) != 0 {
					t.Fatalf("JobFinished published for a job not finished: %+v", fin)
				}
				return
			}
			if len(fin) != 1 {
				t.Fatalf("JobFinished alerts %+v, want one", fin)
			}
			d := fin[0].Detail.(alert.JobFinishedDetail)
			if d.Status != string(tc.want) || d.Counts != alert.Counts(v.Counts()) {
				t.Errorf("JobFinished %+v, want status %s counts %+v", d, tc.want, v.Counts())
			}
			dl := alerts.Of(alert.DeadLetters)
			switch {
			case len(tc.dead) == 0 && len(dl) != 0:
				t.Errorf("DeadLetters %+v for a job without dead letters", dl)
			case len(tc.dead) > 0 && (len(dl) != 1 || !maps.Equal(dl[0].Detail.(alert.DeadLettersDetail).Failures, tc.dead)):
				t.Errorf("DeadLetters %+v, want failures %v", dl, tc.dead)
			}
		})
	}
}

// TestFinishJobLeavesOtherStatusesAlone: a job that is not running
// (paused, cancelled) is not finished, whatever its shards.
func TestFinishJobLeavesOtherStatusesAlone(t *testing.T) {
	t.Parallel()
	for _, to := range []store.JobStatus{store.JobPaused, store.JobCancelled} {
		f := newFinishFixture(t, 1, 2)
		f.move(0, 2, store.ItemConfirmed, "")
		f.finishShard(0)
		if _, err := f.st.TransitionJob(context.Background(), store.TransitionJobParams{JobID: f.jobID, To: to, At: storetest.Epoch.Add(time.Minute)}); err != nil {
			t.Fatal(err)
		}
		alerts := &alerttest.Recorder{}
		if v := f.finish(alerts); v.Job.Status != to || len(alerts.Of(alert.JobFinished)) != 0 {
			t.Errorf("%s job became %s (alerts %+v)", to, v.Job.Status, alerts.Of(alert.JobFinished))
		}
	}
}

// redriveOnFinish is a store on which an operator redrives the job's
// failed items (back to pending, counts folded) just before the job is
// moved to a final status: between FinishJob's read and its transition.
type redriveOnFinish struct {
	*sqlitestore.Store
	f    *finishFixture
	done bool
}

func (r *redriveOnFinish) TransitionJob(ctx context.Context, p store.TransitionJobParams) (store.Job, error) {
	if !r.done && store.JobFinal(p.To) {
		r.done = true
		r.f.redriveFailed(1)
	}
	return r.Store.TransitionJob(ctx, p)
}

// redriveFailed moves the failed items of a shard back to pending, as
// control.Redrive does, folding the counts.
func (f *finishFixture) redriveFailed(shard int) {
	f.t.Helper()
	ctx := context.Background()
	res, err := f.st.ListItems(ctx, store.ListItemsParams{JobID: f.jobID, Status: store.ItemFailed, Shard: &shard, Limit: 100})
	if err != nil || len(res.Items) == 0 {
		f.t.Fatalf("failed items of shard %d: %+v %v", shard, res.Items, err)
	}
	before, err := store.BeginOutsideTurn(ctx, f.st, f.jobID, shard)
	if err != nil {
		f.t.Fatal(err)
	}
	var ups []store.ItemUpdate
	for _, it := range res.Items {
		ups = append(ups, store.ItemUpdate{Seq: it.Seq, From: store.ItemFailed, To: store.ItemPending, ResetAttempts: true,
			NextAttemptAt: storetest.Epoch, Error: &store.ItemError{Category: store.CategoryRetryable, Message: "redrive"}})
	}
	up, err := f.st.UpdateItems(ctx, store.UpdateItemsParams{JobID: f.jobID, Index: shard, Updates: ups, At: storetest.Epoch.Add(time.Minute)})
	if err != nil || len(up.Rejected) > 0 {
		f.t.Fatalf("redrive: %+v %v", up, err)
	}
	if _, err := store.FoldOutsideTurn(ctx, f.st, before, up.Delta, up.FailuresDelta); err != nil {
		f.t.Fatal(err)
	}
}

// TestFinishJobRacingARedrive: an operator redrives a failed item while
// the job is being finished partial (after FinishJob read the counts,
// before it moved the job): the redrive saw the job running and will not
// run it again, so FinishJob must — the job ends running with the shard
// reopened, not partial with an item pending for ever.
func TestFinishJobRacingARedrive(t *testing.T) {
	t.Parallel()
	f := newFinishFixture(t, 2, 3)
	f.move(0, 3, store.ItemConfirmed, "")
	f.move(1, 2, store.ItemConfirmed, "")
	f.move(1, 1, store.ItemFailed, store.CategoryExhausted)
	f.finishShard(0)
	f.finishShard(1)
	racing := &redriveOnFinish{Store: f.st, f: f}
	alerts := &alerttest.Recorder{}
	if err := sender.FinishJob(context.Background(), racing, alerts, quiet, f.jobID, storetest.Epoch.Add(2*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if !racing.done {
		t.Fatal("the job was never moved to a final status")
	}
	v, err := f.st.GetJob(context.Background(), f.jobID)
	if err != nil {
		t.Fatal(err)
	}
	if v.Job.Status != store.JobRunning || v.Shards[1].Status != store.ShardRunning || v.Counts().Pending != 1 {
		t.Fatalf("job %s, shard 1 %s, counts %+v: want the job and the shard running again with the redriven item pending",
			v.Job.Status, v.Shards[1].Status, v.Counts())
	}
	if fin := alerts.Of(alert.JobFinished); len(fin) != 0 {
		t.Fatalf("JobFinished published for a job running again: %+v", fin)
	}
}

// quiet is a logger that drops what FinishJob logs.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))
