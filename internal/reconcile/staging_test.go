package reconcile_test

import (
	"context"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/alert"
	"github.com/qunfa/qunfa/internal/dispatch"
	"github.com/qunfa/qunfa/internal/queue"
	"github.com/qunfa/qunfa/internal/reconcile"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/store/sqlitestore"
	"github.com/qunfa/qunfa/internal/store/storetest"
	"github.com/qunfa/qunfa/internal/submit"
)

// A staged job not started within 24 h is cancelled and its parts
// discarded; a younger one is left alone.
func TestStagingJobsExpireAfter24h(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	staged := func(created time.Time) string {
		p, _ := storetest.NewJob("t1", 1, 1)
		p.Shards, p.Job.ShardCount, p.Job.Total, p.Job.Status, p.Job.CreatedAt = nil, 0, 0, store.JobStaging, created
		if _, err := f.store.CreateJob(ctx, p); err != nil {
			t.Fatal(err)
		}
		if _, err := f.store.PutPart(ctx, store.Part{JobID: p.Job.ID, Number: 1, Hash: "h", Recipients: 1, Data: []byte("x")}); err != nil {
			t.Fatal(err)
		}
		return p.Job.ID
	}
	old := staged(storetest.Epoch)
	young := staged(storetest.Epoch.Add(2 * time.Hour))
	f.clk.Set(storetest.Epoch.Add(25 * time.Hour))
	rep, err := f.rec.Run(ctx)
	if err != nil || rep.Expired != 1 {
		t.Fatalf("Run = %+v, %v; want one expired job", rep, err)
	}
	for id, want := range map[string]store.JobStatus{old: store.JobCancelled, young: store.JobStaging} {
		j, err := f.store.GetJobRecord(ctx, id)
		if err != nil || j.Status != want {
			t.Fatalf("job %s = %s, %v; want %s", id, j.Status, err, want)
		}
		parts, _ := f.store.ListParts(ctx, id)
		if (want == store.JobCancelled) != (len(parts) == 0) {
			t.Fatalf("job %s (%s) has %d parts", id, want, len(parts))
		}
	}
}

// A starting job whose planning message was lost (dead-lettered) does not
// stay starting: the reconciler sends planning again after StaleAfter
// without progress, and planning then finishes; a job whose planning
// keeps failing is failed visibly after MaxPlanRepairs.
func TestStartingJobWithoutPlanningIsRepairedOrFailed(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	q := f.rec.Queue
	sub := &submit.Submitter{Store: f.store, Queue: q, Clock: f.clk, Alerts: f.alerts}
	f.rec.Plans, f.rec.MaxPlanRepairs = sub, 2
	if err := f.store.GrantAccount(ctx, "t1", "acct-a", time.Time{}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.PutAccount(ctx, store.Account{Tenant: "t1", ID: "acct-a", RatePerSec: 10, Burst: 10, MaxRecipientsPerCall: 1}); err != nil {
		t.Fatal(err)
	}
	start := func(key string) string {
		t.Helper()
		res, err := sub.CreateStaged(ctx, submit.Params{Tenant: "t1", IdempotencyKey: key, Request: submit.Request{Template: "Hi"}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sub.PutPart(ctx, submit.PutPartParams{Job: res.Job.Job, Number: 1, MediaType: submit.MediaCSV, Body: []byte("account,to\nacct-a,u1\nacct-a,u2\n")}); err != nil {
			t.Fatal(err)
		}
		if _, err := sub.Start(ctx, res.Job.Job, 1); err != nil {
			t.Fatal(err)
		}
		return res.Job.Job.ID
	}
	// plans takes the planning messages off the queue: run them (ok) or
	// lose them (dead-lettered); it reports how many there were.
	plans := func(run bool) int {
		t.Helper()
		n := 0
		for rounds := 0; ; rounds++ {
			if rounds == 1000 {
				t.Fatalf("planning messages keep coming: %d taken", n)
			}
			msgs, err := q.Receive(ctx, queue.ReceiveParams{Max: 10})
			if err != nil {
				t.Fatal(err)
			}
			if len(msgs) == 0 {
				return n
			}
			for _, m := range msgs {
				if job, ok := dispatch.DecodePlan(m.Body); ok {
					n++
					if run {
						if err := sub.Plan(ctx, job); err != nil {
							t.Fatal(err)
						}
					}
				}
				if err := q.Delete(ctx, m.ReceiptHandle); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	status := func(id string) store.JobStatus {
		t.Helper()
		j, err := f.store.GetJobRecord(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return j.Status
	}
	pass := func() reconcile.Report {
		t.Helper()
		rep, err := f.rec.Run(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}

	// Lost once, repaired, planned.
	id := start("lost-once")
	if plans(false) != 1 {
		t.Fatal("no planning message after start")
	}
	f.clk.Advance(30 * time.Second)
	if rep := pass(); rep.PlansResent != 0 || plans(false) != 0 {
		t.Fatalf("planning re-sent before StaleAfter: %+v", rep)
	}
	f.clk.Advance(time.Minute)
	if rep := pass(); rep.PlansResent != 1 {
		t.Fatalf("pass = %+v; want planning re-sent", rep)
	}
	if rep := pass(); rep.PlansResent != 0 {
		t.Fatalf("planning re-sent twice in one StaleAfter: %+v", rep)
	}
	for plans(true) > 0 {
	}
	if st := status(id); st != store.JobRunning {
		t.Fatalf("repaired job is %s, want running", st)
	}

	// Lost every time: failed after two repairs, parts discarded, alerted.
	id = start("poison")
	for i := 1; i <= 2; i++ {
		plans(false)
		f.clk.Advance(2 * time.Minute)
		if rep := pass(); rep.PlansResent != 1 || status(id) != store.JobStarting {
			t.Fatalf("repair %d: %+v, job %s", i, rep, status(id))
		}
	}
	plans(false)
	f.clk.Advance(2 * time.Minute)
	if rep := pass(); rep.PlansFailed != 1 || status(id) != store.JobFailed {
		t.Fatalf("after the last repair: %+v, job %s; want failed", rep, status(id))
	}
	if parts, _ := f.store.ListParts(ctx, id); len(parts) != 0 {
		t.Errorf("failed job keeps %d parts", len(parts))
	}
	found := false
	for _, e := range f.alerts.Of(alert.JobFinished) {
		if d, ok := e.Detail.(alert.JobFinishedDetail); ok && d.JobID == id && d.Status == "failed" {
			found = true
		}
	}
	if !found {
		t.Error("no JobFinished failed alert for the job")
	}
	f.clk.Advance(2 * time.Minute)
	if rep := pass(); rep.PlansFailed+rep.PlansResent != 0 {
		t.Errorf("a failed job watched again: %+v", rep)
	}

	// A reconciler without a planning watchdog leaves a stale starting job
	// as it is.
	id = start("unwatched")
	plans(false)
	f.rec.Plans = nil
	f.clk.Advance(5 * time.Minute)
	if rep := pass(); rep.PlansFailed+rep.PlansResent != 0 || status(id) != store.JobStarting {
		t.Errorf("without a watchdog: %+v, job %s; want it left starting", rep, status(id))
	}
}

// leavesStagingWhenListed is a store where every staging job the
// reconciler lists leaves staging (to) before the reconciler acts on it:
// a start or an operator's cancel racing the expiry.
type leavesStagingWhenListed struct {
	*sqlitestore.Store
	to store.JobStatus
}

func (s leavesStagingWhenListed) ListStagingJobs(ctx context.Context, p store.ListStagingJobsParams) ([]store.Job, error) {
	jobs, err := s.Store.ListStagingJobs(ctx, p)
	for _, j := range jobs {
		if _, terr := s.Store.TransitionJob(ctx, store.TransitionJobParams{JobID: j.ID, From: []store.JobStatus{store.JobStaging}, To: s.to, At: j.CreatedAt}); terr != nil {
			return nil, terr
		}
	}
	return jobs, err
}

// A staged job started (or cancelled by its operator) between the
// expiry's listing and its cancel is not expired: a started job keeps the
// parts its planning is about to read; a cancelled one has them discarded.
func TestExpiryRacingAStartLeavesThePartsToPlanning(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		to        store.JobStatus
		wantParts int
	}{{store.JobStarting, 1}, {store.JobCancelled, 0}} {
		t.Run(string(tc.to), func(t *testing.T) {
			f := newFixture(t)
			ctx := context.Background()
			p, _ := storetest.NewJob("t1", 1, 1)
			p.Shards, p.Job.ShardCount, p.Job.Total, p.Job.Status, p.Job.CreatedAt = nil, 0, 0, store.JobStaging, storetest.Epoch
			if _, err := f.store.CreateJob(ctx, p); err != nil {
				t.Fatal(err)
			}
			if _, err := f.store.PutPart(ctx, store.Part{JobID: p.Job.ID, Number: 1, Hash: "h", Recipients: 1, Data: []byte("x")}); err != nil {
				t.Fatal(err)
			}
			f.rec.Store = leavesStagingWhenListed{Store: f.store, to: tc.to}
			f.clk.Set(storetest.Epoch.Add(25 * time.Hour))
			rep, err := f.rec.Run(ctx)
			if err != nil || rep.Expired != 0 {
				t.Fatalf("Run = %+v, %v; want no job expired (it left staging first)", rep, err)
			}
			j, err := f.store.GetJobRecord(ctx, p.Job.ID)
			if err != nil || j.Status != tc.to {
				t.Fatalf("job = %s, %v; want %s", j.Status, err, tc.to)
			}
			parts, err := f.store.ListParts(ctx, p.Job.ID)
			if err != nil || len(parts) != tc.wantParts {
				t.Fatalf("job %s has %d parts (%v), want %d", tc.to, len(parts), err, tc.wantParts)
			}
		})
	}
}
