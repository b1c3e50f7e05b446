package storetest

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/store"
)

func testCreateJob(t *testing.T, s store.Store, _ Capabilities) {
	ctx := ctxOf(t)
	// 12 shards: indexes 10 and 11 sort before 2 as strings.
	p, items := NewJob("tenant-a", 12, 3)
	p.Job.Budget = 30
	p.Job.RatePerSec = 2.5
	p.Job.Suppressed = 4
	want := p.Job
	shuffled := slices.Clone(p.Shards)
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	p.Shards = shuffled

	res, err := s.CreateJob(ctx, p)
	if err != nil {
		t.Fatalf("CreateJob: %v", err)
	}
	if !res.Created || res.Job.ID != want.ID || res.Job.Status != store.JobCreating {
		t.Fatalf("CreateJob = {Created %v, ID %q, Status %q}, want {true, %q, creating}", res.Created, res.Job.ID, res.Job.Status, want.ID)
	}
	if err := s.PutItems(ctx, store.PutItemsParams{JobID: want.ID, Items: items}); err != nil {
		t.Fatalf("PutItems: %v", err)
	}

	v := getJob(t, s, want.ID)
	got := v.Job
	want.Status = store.JobCreating
	if !sameJob(got, want) {
		t.Fatalf("GetJob job =\n%+v\nwant\n%+v", got, want)
	}
	if len(v.Shards) != 12 {
		t.Fatalf("GetJob: %d shards, want 12", len(v.Shards))
	}
	if rec, err := s.GetJobRecord(ctx, want.ID); err != nil || !sameJob(rec, got) {
		t.Fatalf("GetJobRecord = %+v, %v; GetJob gave %+v", rec, err, got)
	}
	for i, sh := range v.Shards {
		if sh.Index != i {
			t.Fatalf("GetJob shards out of order: position %d holds index %d", i, sh.Index)
		}
		if sh.JobID != want.ID || sh.Account != fmt.Sprintf("acct-%d", i) || sh.Status != store.ShardPending ||
			sh.Size != 3 || sh.Counts != (store.Counts{Pending: 3}) || sh.SlowFactor != 1 || sh.Cursor != 0 || sh.Turn != 0 || sh.Dirty {
			t.Fatalf("GetJob shard %d = %+v", i, sh)
		}
		if one := getShard(t, s, want.ID, i); !sameShard(one, sh) {
			t.Fatalf("GetShard(%d) = %+v, GetJob gave %+v", i, one, sh)
		}
	}
	if c := v.Counts(); c != (store.Counts{Pending: 36}) {
		t.Fatalf("job counts %+v, want 36 pending", c)
	}

	if _, err := s.GetJob(ctx, "no-such-job"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetJob(unknown) error = %v, want ErrNotFound", err)
	}
	if _, err := s.GetJobRecord(ctx, "no-such-job"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetJobRecord(unknown) error = %v, want ErrNotFound", err)
	}
	if _, err := s.GetShard(ctx, "no-such-job", 0); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetShard(unknown job) error = %v, want ErrNotFound", err)
	}
	if _, err := s.GetShard(ctx, want.ID, 12); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetShard(index out of range) error = %v, want ErrNotFound", err)
	}
}

func testCreateJobIdempotent(t *testing.T, s store.Store, _ Capabilities) {
	ctx := ctxOf(t)
	p, _ := NewJob("tenant-a", 2, 1)
	first, err := s.CreateJob(ctx, p)
	if err != nil || !first.Created {
		t.Fatalf("CreateJob = %+v, %v", first, err)
	}

	// The same request again, as a retrying client sends it: the caller
	// has minted a fresh job ID, the key and body are the same.
	again := p
	again.Job.ID = uniqueID("job")
	again.Shards = retarget(p.Shards, again.Job.ID)
	res, err := s.CreateJob(ctx, again)
	if err != nil {
		t.Fatalf("CreateJob(same key, same hash): %v", err)
	}
	if res.Created || res.Job.ID != p.Job.ID {
		t.Fatalf("CreateJob(same key, same hash) = {Created %v, ID %q}, want {false, %q}", res.Created, res.Job.ID, p.Job.ID)
	}
	if _, err := s.GetJob(ctx, again.Job.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetJob(duplicate's id) error = %v, want ErrNotFound (nothing stored)", err)
	}

	// Same key, another body: refused, nothing stored.
	other := again
	other.Job.ID = uniqueID("job")
	other.Shards = retarget(p.Shards, other.Job.ID)
	other.Job.RequestHash = "another-hash"
	if _, err := s.CreateJob(ctx, other); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("CreateJob(same key, other hash) error = %v, want ErrConflict", err)
	}
	if _, err := s.GetJob(ctx, other.Job.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetJob(refused job) error = %v, want ErrNotFound", err)
	}

	// The same key in another tenant is another job.
	elsewhere := other
	elsewhere.Job.ID = uniqueID("job")
	elsewhere.Shards = retarget(p.Shards, elsewhere.Job.ID)
	elsewhere.Job.Tenant = "tenant-b"
	res, err = s.CreateJob(ctx, elsewhere)
	if err != nil || !res.Created || res.Job.ID != elsewhere.Job.ID {
		t.Fatalf("CreateJob(same key, other tenant) = %+v, %v; want a new job %q", res, err, elsewhere.Job.ID)
	}
	if v := getJob(t, s, p.Job.ID); v.Job.RequestHash != p.Job.RequestHash || v.Job.Tenant != "tenant-a" {
		t.Fatalf("first job changed: %+v", v.Job)
	}
	jobs := listJobs(t, s, "tenant-a", 0)
	if len(jobs) != 1 || jobs[0].ID != p.Job.ID {
		t.Fatalf("tenant-a jobs = %v, want only %s", jobIDs(jobs), p.Job.ID)
	}
}

// retarget copies shards onto another job ID.
func retarget(shards []store.Shard, jobID string) []store.Shard {
	out := slices.Clone(shards)
	for i := range out {
		out[i].JobID = jobID
	}
	return out
}

func testCreateJobConcurrent(t *testing.T, s store.Store, caps Capabilities) {
	ctx := ctxOf(t)
	n := caps.sizes().workers
	base, _ := NewJob("tenant-a", 3, 2)
	type outcome struct {
		id      string
		created bool
		err     error
	}
	out := make([]outcome, n)
	var wg sync.WaitGroup
	for g := range n {
		p := base
		p.Job.ID = uniqueID("job")
		p.Shards = retarget(base.Shards, p.Job.ID)
		wg.Go(func() {
			res, err := s.CreateJob(ctx, p)
			out[g] = outcome{res.Job.ID, res.Created, err}
		})
	}
	wg.Wait()
	created := 0
	for g, o := range out {
		if o.err != nil {
			t.Fatalf("goroutine %d: CreateJob: %v", g, o.err)
		}
		if o.created {
			created++
		}
		if o.id != out[0].id {
			t.Fatalf("goroutines got different jobs for one key: %q and %q", out[0].id, o.id)
		}
	}
	if created != 1 {
		t.Fatalf("%d of %d concurrent CreateJob calls with one key reported Created, want exactly 1", created, n)
	}
	jobs := listJobs(t, s, "tenant-a", 0)
	if len(jobs) != 1 || jobs[0].ID != out[0].id {
		t.Fatalf("tenant jobs after concurrent create = %v, want only %s", jobIDs(jobs), out[0].id)
	}
	if v := getJob(t, s, out[0].id); len(v.Shards) != 3 {
		t.Fatalf("winning job has %d shards, want 3", len(v.Shards))
	}
}

func testInvalidArguments(t *testing.T, s store.Store, _ Capabilities) {
	ctx := ctxOf(t)
	p, _ := NewJob("tenant-a", 1, 1)
	p.Job.ID = ""
	if _, err := s.CreateJob(ctx, p); !errors.Is(err, store.ErrInvalidArgument) {
		t.Fatalf("CreateJob(empty ID) error = %v, want ErrInvalidArgument", err)
	}
	p, _ = NewJob("tenant-a", 1, store.MaxPutItems+1)
	createJob(t, s, p, nil)
	_, items := NewJob("tenant-a", 1, store.MaxPutItems+1)
	for i := range items {
		items[i].JobID = p.Job.ID
	}
	if err := s.PutItems(ctx, store.PutItemsParams{JobID: p.Job.ID, Items: items}); !errors.Is(err, store.ErrInvalidArgument) {
		t.Fatalf("PutItems(%d items) error = %v, want ErrInvalidArgument", len(items), err)
	}
	if got := listAll(t, s, store.ListItemsParams{JobID: p.Job.ID, Limit: 1000}); len(got) != 0 {
		t.Fatalf("refused PutItems stored %d items", len(got))
	}
}

func testPutItems(t *testing.T, s store.Store, _ Capabilities) {
	ctx := ctxOf(t)
	p, items := NewJob("tenant-a", 2, store.MaxPutItems/2)
	createJob(t, s, p, nil)
	// One full page, as large as allowed.
	if err := s.PutItems(ctx, store.PutItemsParams{JobID: p.Job.ID, Items: items}); err != nil {
		t.Fatalf("PutItems(%d items): %v", len(items), err)
	}
	// Redo an interrupted submit: rewrite part of the snapshot (150 items,
	// an odd size), each with what the redo computed this time.
	for i := 100; i < 250; i++ {
		items[i].To += "-redone"
		items[i].Vars = map[string]string{"name": "Redone " + items[i].To}
		items[i].Ref = fmt.Sprintf("ref-%d", i)
	}
	if err := s.PutItems(ctx, store.PutItemsParams{JobID: p.Job.ID, Items: items[100:250]}); err != nil {
		t.Fatalf("PutItems(rewrite): %v", err)
	}
	got := listAll(t, s, store.ListItemsParams{JobID: p.Job.ID, Limit: 150})
	if len(got) != len(items) {
		t.Fatalf("ListItems: %d items, want %d", len(got), len(items))
	}
	for i, it := range got {
		w := items[i]
		if it.JobID != w.JobID || it.Seq != w.Seq || it.Shard != w.Shard || it.Account != w.Account || it.To != w.To ||
			!maps.Equal(it.Vars, w.Vars) || it.Ref != w.Ref || it.Status != store.ItemPending || it.Attempts != 0 || it.ClaimID != "" || it.Error != nil {
			t.Fatalf("item %d = %+v, want %+v pending with no attempts", w.Seq, it, w)
		}
	}
	for i := range 2 {
		if sh := getShard(t, s, p.Job.ID, i); sh.Counts != (store.Counts{Pending: store.MaxPutItems / 2}) {
			t.Fatalf("shard %d counts %+v after rewrite", i, sh.Counts)
		}
	}

	if _, err := s.TransitionJob(ctx, store.TransitionJobParams{JobID: p.Job.ID, To: store.JobRunning, At: Epoch}); err != nil {
		t.Fatalf("TransitionJob(running): %v", err)
	}
	late := slices.Clone(items[:1])
	late[0].To = "someone-else"
	if err := s.PutItems(ctx, store.PutItemsParams{JobID: p.Job.ID, Items: late}); !errors.Is(err, store.ErrInvalidTransition) {
		t.Fatalf("PutItems on a running job error = %v, want ErrInvalidTransition", err)
	}
	if m := itemBySeq(t, s, p.Job.ID); m[1].To != items[0].To {
		t.Fatalf("refused PutItems changed item 1: To = %q", m[1].To)
	}
	if err := s.PutItems(ctx, store.PutItemsParams{JobID: "no-such-job", Items: late}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("PutItems(unknown job) error = %v, want ErrNotFound", err)
	}
}

func listJobs(t tb, s store.Store, tenant string, limit int) []store.Job {
	t.Helper()
	var all []store.Job
	cursor := ""
	seen := map[string]bool{}
	for page := 0; ; page++ {
		if page > 1000 {
			t.Fatalf("ListJobs(%s): cursor never ends", tenant)
		}
		res, err := s.ListJobs(ctxOf(t), store.ListJobsParams{Tenant: tenant, Cursor: cursor, Limit: limit})
		if err != nil {
			t.Fatalf("ListJobs(%s): %v", tenant, err)
		}
		if limit > 0 && len(res.Jobs) > limit {
			t.Fatalf("ListJobs: %d jobs in a page of limit %d", len(res.Jobs), limit)
		}
		for _, j := range res.Jobs {
			if seen[j.ID] {
				t.Fatalf("ListJobs(%s): job %s listed twice", tenant, j.ID)
			}
			seen[j.ID] = true
			all = append(all, j)
		}
		if res.NextCursor == "" {
			return all
		}
		if res.NextCursor == cursor {
			t.Fatalf("ListJobs(%s): NextCursor %q repeats the request cursor", tenant, cursor)
		}
		cursor = res.NextCursor
	}
}

func jobIDs(jobs []store.Job) []string {
	out := make([]string, len(jobs))
	for i, j := range jobs {
		out[i] = j.ID
	}
	return out
}

func testListJobs(t *testing.T, s store.Store, _ Capabilities) {
	ctx := ctxOf(t)
	const n = 7
	var want []string // tenant-a's jobs, newest first
	order := rand.New(rand.NewPCG(3, 4)).Perm(n)
	ids := make([]string, n)
	for _, i := range order {
		p, _ := NewJob("tenant-a", 1, 1)
		p.Job.CreatedAt = at(time.Duration(i) * time.Minute)
		ids[i] = p.Job.ID
		createJob(t, s, p, nil)
	}
	for i := n - 1; i >= 0; i-- {
		want = append(want, ids[i])
	}
	var wantB []string
	for i := range 3 {
		p, _ := NewJob("tenant-b", 1, 1)
		p.Job.CreatedAt = at(time.Duration(i)*time.Minute + 30*time.Second)
		createJob(t, s, p, nil)
		wantB = append([]string{p.Job.ID}, wantB...)
	}

	for _, limit := range []int{0, 1, 3, n} {
		got := jobIDs(listJobs(t, s, "tenant-a", limit))
		if !slices.Equal(got, want) {
			t.Fatalf("ListJobs(tenant-a, limit %d) = %v, want %v (newest first)", limit, got, want)
		}
	}
	if got := jobIDs(listJobs(t, s, "tenant-b", 2)); !slices.Equal(got, wantB) {
		t.Fatalf("ListJobs(tenant-b) = %v, want %v", got, wantB)
	}
	res, err := s.ListJobs(ctx, store.ListJobsParams{Tenant: "tenant-a"})
	if err != nil || len(res.Jobs) != n || res.NextCursor != "" {
		t.Fatalf("ListJobs(default limit) = %d jobs, cursor %q, %v; want all %d and no cursor", len(res.Jobs), res.NextCursor, err, n)
	}
	if res.Jobs[0].Tenant != "tenant-a" || res.Jobs[0].Name == "" || !sameTime(res.Jobs[0].CreatedAt, at((n-1)*time.Minute)) {
		t.Fatalf("ListJobs job = %+v", res.Jobs[0])
	}
	if got := listJobs(t, s, "tenant-nobody", 0); len(got) != 0 {
		t.Fatalf("ListJobs(unknown tenant) = %v", jobIDs(got))
	}
}

var allJobStatuses = []store.JobStatus{
	store.JobCreating, store.JobRunning, store.JobPaused, store.JobCompleted,
	store.JobPartial, store.JobFailed, store.JobCancelled,
}

// jobPathTo lists the transitions from creating that reach a status.
func jobPathTo(s store.JobStatus) []store.JobStatus {
	switch s {
	case store.JobCreating:
		return nil
	case store.JobRunning:
		return []store.JobStatus{store.JobRunning}
	default:
		return []store.JobStatus{store.JobRunning, s}
	}
}

func transitionJob(t tb, s store.Store, p store.TransitionJobParams) store.Job {
	t.Helper()
	j, err := s.TransitionJob(ctxOf(t), p)
	if err != nil {
		t.Fatalf("TransitionJob(%s → %s): %v", p.JobID, p.To, err)
	}
	if j.Status != p.To {
		t.Fatalf("TransitionJob(%s → %s) returned status %s", p.JobID, p.To, j.Status)
	}
	return j
}

// testTransitionJobFromPauseReason: lifting a pause of one reason never
// undoes a pause of another (a budget pause lifted by a sender must not
// resume a job an operator paused).
func testTransitionJobFromPauseReason(t *testing.T, s store.Store, _ Capabilities) {
	ctx := ctxOf(t)
	p, _ := NewJob("tenant-a", 1, 1)
	createJob(t, s, p, nil)
	id := p.Job.ID
	transitionJob(t, s, store.TransitionJobParams{JobID: id, To: store.JobRunning, At: at(time.Second)})
	lift := store.TransitionJobParams{JobID: id, From: []store.JobStatus{store.JobPaused}, FromPauseReason: store.PauseBudget,
		To: store.JobRunning, At: at(3 * time.Second)}
	if _, err := s.TransitionJob(ctx, lift); !errors.Is(err, store.ErrInvalidTransition) {
		t.Fatalf("lifting a budget pause of a running job: error %v, want ErrInvalidTransition", err)
	}
	transitionJob(t, s, store.TransitionJobParams{JobID: id, To: store.JobPaused, PauseReason: store.PauseManual, At: at(2 * time.Second)})
	if _, err := s.TransitionJob(ctx, lift); !errors.Is(err, store.ErrInvalidTransition) {
		t.Fatalf("lifting a budget pause of a manually paused job: error %v, want ErrInvalidTransition", err)
	}
	if j := getJob(t, s, id).Job; j.Status != store.JobPaused || j.PauseReason != store.PauseManual {
		t.Fatalf("after the refused lift the job is %s (%s), want paused (manual)", j.Status, j.PauseReason)
	}
	transitionJob(t, s, store.TransitionJobParams{JobID: id, To: store.JobRunning, At: at(3 * time.Second)})
	transitionJob(t, s, store.TransitionJobParams{JobID: id, To: store.JobPaused, PauseReason: store.PauseBudget, At: at(4 * time.Second)})
	j, err := s.TransitionJob(ctx, lift)
	if err != nil {
		t.Fatalf("lifting a budget pause: %v", err)
	}
	if j.Status != store.JobRunning || j.PauseReason != "" {
		t.Fatalf("after lifting the budget pause: %s (%q), want running", j.Status, j.PauseReason)
	}
}

func testTransitionJobAllPairs(t *testing.T, s store.Store, _ Capabilities) {
	for _, from := range allJobStatuses {
		for _, to := range allJobStatuses {
			t.Run(fmt.Sprintf("%s→%s", from, to), func(t *testing.T) {
				t.Parallel()
				p, _ := NewJob("tenant-a", 1, 1)
				createJob(t, s, p, nil)
				for _, step := range jobPathTo(from) {
					transitionJob(t, s, store.TransitionJobParams{JobID: p.Job.ID, To: step, PauseReason: store.PauseManual, At: at(time.Second)})
				}
				before := getJob(t, s, p.Job.ID).Job
				j, err := s.TransitionJob(ctxOf(t), store.TransitionJobParams{JobID: p.Job.ID, To: to, PauseReason: store.PauseBudget, At: at(time.Minute)})
				after := getJob(t, s, p.Job.ID).Job
				if store.JobTransitionAllowed(from, to) {
					if err != nil {
						t.Fatalf("allowed transition failed: %v", err)
					}
					if j.Status != to || after.Status != to {
						t.Fatalf("status after = %s (returned %s), want %s", after.Status, j.Status, to)
					}
					return
				}
				if !errors.Is(err, store.ErrInvalidTransition) {
					t.Fatalf("forbidden transition error = %v, want ErrInvalidTransition", err)
				}
				if !sameJob(before, after) {
					t.Fatalf("forbidden transition changed the job:\nbefore %+v\nafter  %+v", before, after)
				}
			})
		}
	}
	t.Run("unknown", func(t *testing.T) {
		t.Parallel()
		_, err := s.TransitionJob(ctxOf(t), store.TransitionJobParams{JobID: "no-such-job", To: store.JobRunning, At: Epoch})
		if !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("TransitionJob(unknown) error = %v, want ErrNotFound", err)
		}
	})
}

func testTransitionJobFromAndTimes(t *testing.T, s store.Store, _ Capabilities) {
	ctx := ctxOf(t)
	p, _ := NewJob("tenant-a", 1, 1)
	createJob(t, s, p, nil)
	id := p.Job.ID

	j := transitionJob(t, s, store.TransitionJobParams{JobID: id, From: []store.JobStatus{store.JobCreating}, To: store.JobRunning, At: at(1 * time.Second)})
	if !sameTime(j.StartedAt, at(time.Second)) || !j.FinishedAt.IsZero() {
		t.Fatalf("after first running: StartedAt %v FinishedAt %v, want %v and zero", j.StartedAt, j.FinishedAt, at(time.Second))
	}

	// From filters even an otherwise allowed change.
	before := getJob(t, s, id).Job
	_, err := s.TransitionJob(ctx, store.TransitionJobParams{JobID: id, From: []store.JobStatus{store.JobPaused}, To: store.JobCancelled, At: at(2 * time.Second)})
	if !errors.Is(err, store.ErrInvalidTransition) {
		t.Fatalf("TransitionJob(From paused, job running) error = %v, want ErrInvalidTransition", err)
	}
	if after := getJob(t, s, id).Job; !sameJob(before, after) {
		t.Fatalf("refused transition changed the job: %+v", after)
	}

	j = transitionJob(t, s, store.TransitionJobParams{JobID: id, From: []store.JobStatus{store.JobPaused, store.JobRunning}, To: store.JobPaused, PauseReason: store.PauseBudget, At: at(3 * time.Second)})
	if j.PauseReason != store.PauseBudget {
		t.Fatalf("paused job PauseReason = %q, want budget", j.PauseReason)
	}
	if got := getJob(t, s, id).Job; got.PauseReason != store.PauseBudget || got.Status != store.JobPaused {
		t.Fatalf("stored paused job = %s/%q", got.Status, got.PauseReason)
	}
	j = transitionJob(t, s, store.TransitionJobParams{JobID: id, To: store.JobRunning, At: at(4 * time.Second)})
	if j.PauseReason != "" {
		t.Fatalf("resumed job keeps PauseReason %q", j.PauseReason)
	}
	if !sameTime(j.StartedAt, at(time.Second)) {
		t.Fatalf("StartedAt moved on resume: %v, want %v", j.StartedAt, at(time.Second))
	}
	if !j.FinishedAt.IsZero() {
		t.Fatalf("FinishedAt set before final: %v", j.FinishedAt)
	}
	transitionJob(t, s, store.TransitionJobParams{JobID: id, To: store.JobPartial, At: at(5 * time.Second)})
	got := getJob(t, s, id).Job
	if !sameTime(got.FinishedAt, at(5*time.Second)) || !sameTime(got.StartedAt, at(time.Second)) || got.PauseReason != "" {
		t.Fatalf("after partial: StartedAt %v FinishedAt %v PauseReason %q", got.StartedAt, got.FinishedAt, got.PauseReason)
	}
}

func testTransitionJobConcurrent(t *testing.T, s store.Store, _ Capabilities) {
	ctx := ctxOf(t)
	p, _ := NewJob("tenant-a", 1, 1)
	createJob(t, s, p, nil)
	transitionJob(t, s, store.TransitionJobParams{JobID: p.Job.ID, To: store.JobRunning, At: Epoch})
	targets := []store.JobStatus{store.JobCompleted, store.JobCancelled}
	const n = 8
	errs := make([]error, n)
	var wg sync.WaitGroup
	for g := range n {
		wg.Go(func() {
			_, errs[g] = s.TransitionJob(ctx, store.TransitionJobParams{JobID: p.Job.ID, From: []store.JobStatus{store.JobRunning}, To: targets[g%2], At: at(time.Second)})
		})
	}
	wg.Wait()
	var winner = -1
	for g, err := range errs {
		switch {
		case err == nil:
			if winner >= 0 {
				t.Fatalf("goroutines %d and %d both moved the job out of running", winner, g)
			}
			winner = g
		case !errors.Is(err, store.ErrInvalidTransition) && !errors.Is(err, store.ErrConflict):
			t.Fatalf("goroutine %d: error = %v, want ErrInvalidTransition or ErrConflict", g, err)
		}
	}
	if winner < 0 {
		t.Fatalf("no concurrent transition succeeded")
	}
	if got := getJob(t, s, p.Job.ID).Job; got.Status != targets[winner%2] {
		t.Fatalf("job status %s, winner moved it to %s", got.Status, targets[winner%2])
	}
}

func testUpdateJobLimits(t *testing.T, s store.Store, _ Capabilities) {
	ctx := ctxOf(t)
	p, _ := NewJob("tenant-a", 1, 1)
	p.Job.Budget = 10
	p.Job.RatePerSec = 5
	createJob(t, s, p, nil)
	rate, budget := 7.5, int64(20)

	j, err := s.UpdateJobLimits(ctx, store.UpdateJobLimitsParams{JobID: p.Job.ID, RatePerSec: &rate})
	if err != nil || j.RatePerSec != 7.5 || j.Budget != 10 {
		t.Fatalf("UpdateJobLimits(rate) = rate %v budget %v, %v; want 7.5, 10", j.RatePerSec, j.Budget, err)
	}
	j, err = s.UpdateJobLimits(ctx, store.UpdateJobLimitsParams{JobID: p.Job.ID, Budget: &budget})
	if err != nil || j.RatePerSec != 7.5 || j.Budget != 20 {
		t.Fatalf("UpdateJobLimits(budget) = rate %v budget %v, %v; want 7.5, 20", j.RatePerSec, j.Budget, err)
	}
	zeroRate, zeroBudget := 0.0, int64(0)
	if _, err := s.UpdateJobLimits(ctx, store.UpdateJobLimitsParams{JobID: p.Job.ID, RatePerSec: &zeroRate, Budget: &zeroBudget}); err != nil {
		t.Fatalf("UpdateJobLimits(both to none): %v", err)
	}
	if got := getJob(t, s, p.Job.ID).Job; got.RatePerSec != 0 || got.Budget != 0 || got.Status != store.JobCreating || got.Name != p.Job.Name {
		t.Fatalf("stored job after limits = %+v", got)
	}
	if _, err := s.UpdateJobLimits(ctx, store.UpdateJobLimitsParams{JobID: "no-such-job", Budget: &budget}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("UpdateJobLimits(unknown) error = %v, want ErrNotFound", err)
	}

	// A final job keeps its limits.
	for _, final := range []store.JobStatus{store.JobCancelled, store.JobCompleted} {
		f, _ := NewJob("tenant-a", 1, 1)
		f.Job.Budget = 10
		createJob(t, s, f, nil)
		for _, to := range []store.JobStatus{store.JobRunning, final} {
			if _, err := s.TransitionJob(ctx, store.TransitionJobParams{JobID: f.Job.ID, To: to, At: at(time.Second)}); err != nil {
				t.Fatalf("TransitionJob(%s): %v", to, err)
			}
		}
		if _, err := s.UpdateJobLimits(ctx, store.UpdateJobLimitsParams{JobID: f.Job.ID, RatePerSec: &rate, Budget: &budget}); !errors.Is(err, store.ErrInvalidTransition) {
			t.Fatalf("UpdateJobLimits(%s job) error = %v, want ErrInvalidTransition", final, err)
		}
		if got := getJob(t, s, f.Job.ID).Job; got.Budget != 10 || got.RatePerSec != 0 {
			t.Fatalf("%s job after a refused UpdateJobLimits: budget %d rate %v, want 10 and 0", final, got.Budget, got.RatePerSec)
		}
	}
}

func testReserveBudget(t *testing.T, s store.Store, _ Capabilities) {
	ctx := ctxOf(t)
	p, _ := NewJob("tenant-a", 1, 1)
	p.Job.Budget = 10
	createJob(t, s, p, nil)
	id := p.Job.ID
	steps := []struct {
		n, granted, used int64
	}{
		{4, 4, 4},
		{10, 6, 10},
		{1, 0, 10},
		{-3, -3, 7},
		{5, 3, 10},
	}
	for _, st := range steps {
		g, err := s.ReserveBudget(ctx, id, st.n)
		if err != nil {
			t.Fatalf("ReserveBudget(%d): %v", st.n, err)
		}
		if want := (store.BudgetGrant{Granted: st.granted, Used: st.used, Budget: 10}); g != want {
			t.Fatalf("ReserveBudget(%d) = %+v, want %+v", st.n, g, want)
		}
		if used := getJob(t, s, id).Job.BudgetUsed; used != st.used {
			t.Fatalf("after ReserveBudget(%d): BudgetUsed %d, want %d", st.n, used, st.used)
		}
	}
	more := int64(15)
	if _, err := s.UpdateJobLimits(ctx, store.UpdateJobLimitsParams{JobID: id, Budget: &more}); err != nil {
		t.Fatalf("UpdateJobLimits: %v", err)
	}
	if g, err := s.ReserveBudget(ctx, id, 100); err != nil || g != (store.BudgetGrant{Granted: 5, Used: 15, Budget: 15}) {
		t.Fatalf("ReserveBudget after raising the budget = %d, %v; want 5", g, err)
	}

	q, _ := NewJob("tenant-a", 1, 1)
	createJob(t, s, q, nil)
	if g, err := s.ReserveBudget(ctx, q.Job.ID, 1000); err != nil || g != (store.BudgetGrant{Granted: 1000, Used: 1000}) {
		t.Fatalf("ReserveBudget(no budget) = %d, %v; want 1000", g, err)
	}
	if used := getJob(t, s, q.Job.ID).Job.BudgetUsed; used != 1000 {
		t.Fatalf("BudgetUsed without budget = %d, want 1000", used)
	}
	if _, err := s.ReserveBudget(ctx, "no-such-job", 1); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("ReserveBudget(unknown) error = %v, want ErrNotFound", err)
	}
}

func testReserveBudgetConcurrent(t *testing.T, s store.Store, caps Capabilities) {
	for _, tc := range []struct {
		name   string
		budget int64
	}{{"scarce", 50}, {"ample", 100000}, {"none", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, _ := NewJob("tenant-a", 1, 1)
			p.Job.Budget = tc.budget
			createJob(t, s, p, nil)
			n := caps.sizes().workers
			wanted := make([]int64, n)
			granted := make([]int64, n)
			errs := make([]error, n)
			var wg sync.WaitGroup
			for g := range n {
				r := rand.New(rand.NewPCG(uint64(g), 7))
				wg.Go(func() {
					for range 5 {
						w := int64(1 + r.IntN(5))
						res, err := s.ReserveBudget(ctxOf(t), p.Job.ID, w)
						got := res.Granted
						if err != nil {
							errs[g] = err
							return
						}
						if got < 0 || got > w {
							errs[g] = fmt.Errorf("granted %d of %d", got, w)
							return
						}
						wanted[g] += w
						granted[g] += got
					}
				})
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				t.Fatalf("ReserveBudget: %v", err)
			}
			var sumW, sumG int64
			for g := range n {
				sumW += wanted[g]
				sumG += granted[g]
			}
			want := sumW
			if tc.budget > 0 {
				want = min(tc.budget, sumW)
			}
			if sumG != want {
				t.Fatalf("granted %d in total (wanted %d, budget %d), want %d", sumG, sumW, tc.budget, want)
			}
			if used := getJob(t, s, p.Job.ID).Job.BudgetUsed; used != sumG {
				t.Fatalf("BudgetUsed %d, granted %d", used, sumG)
			}
		})
	}
}

// testJobByIdempotencyKey: the job a tenant's key made is found without
// creating anything; another tenant's key, or none, is ErrNotFound.
func testJobByIdempotencyKey(t *testing.T, s store.Store, _ Capabilities) {
	lookup, ok := s.(store.IdempotencyLookup)
	if !ok {
		t.Fatalf("%T does not implement store.IdempotencyLookup", s)
	}
	ctx := ctxOf(t)
	p, _ := NewJob("tenant-a", 1, 1)
	p.Job.IdempotencyKey = "order-42"
	createJob(t, s, p, nil)
	j, err := lookup.JobByIdempotencyKey(ctx, "tenant-a", "order-42")
	if err != nil || j.ID != p.Job.ID || j.RequestHash != p.Job.RequestHash {
		t.Fatalf("JobByIdempotencyKey = %+v, %v; want job %s", j, err, p.Job.ID)
	}
	for _, c := range []struct{ tenant, key string }{{"tenant-b", "order-42"}, {"tenant-a", "order-43"}, {"tenant-a", ""}} {
		if _, err := lookup.JobByIdempotencyKey(ctx, c.tenant, c.key); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("JobByIdempotencyKey(%s, %q) error = %v, want ErrNotFound", c.tenant, c.key, err)
		}
	}
}
