package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/store"
)

// testStaging checks the staged-submission aggregate (store.StagingStore):
// a staging job has no shards; a part is stored once per body (the same
// body again is harmless, another is ErrConflict), read back byte for byte
// whatever its size; the planning checkpoint is versioned; items are
// written into a starting job before its shards exist; releasing installs
// the shards and runs the job, once; expiry sees staging jobs only.
func testStaging(t *testing.T, s store.Store, _ Capabilities) {
	ss, ok := s.(store.StagingStore)
	if !ok {
		t.Fatalf("%T does not implement store.StagingStore", s)
	}
	ctx := ctxOf(t)
	p, items := NewJob("tenant-a", 2, 5)
	shards := p.Shards
	p.Shards, p.Job.ShardCount, p.Job.Total = nil, 0, 0
	p.Job.Status = store.JobStaging
	res, err := s.CreateJob(ctx, p)
	if err != nil || !res.Created || res.Job.Status != store.JobStaging {
		t.Fatalf("CreateJob(staging) = %+v, %v; want a new staging job", res, err)
	}
	if again, err := s.CreateJob(ctx, p); err != nil || again.Created || again.Job.ID != p.Job.ID || again.Job.Status != store.JobStaging {
		t.Fatalf("CreateJob(staging) again = %+v, %v; want the same job, not created", again, err)
	}
	id := p.Job.ID
	if v := getJob(t, s, id); len(v.Shards) != 0 || v.Job.Status != store.JobStaging {
		t.Fatalf("staging job = %+v; want no shards", v)
	}

	// Parts: small and large (several DynamoDB chunks, incompressible).
	big := make([]byte, 1<<20+12345)
	x := uint32(7)
	for i := range big {
		x = x*1664525 + 1013904223
		big[i] = byte(x >> 24)
	}
	small := []byte("a\tb\n")
	put := func(n int, hash string, data []byte) (store.PutPartResult, error) {
		return ss.PutPart(ctx, store.Part{JobID: id, Number: n, Hash: hash, Recipients: len(data) / 10, Bytes: int64(len(data)), Data: data, CreatedAt: at(time.Second)})
	}
	if r, err := put(2, "h-big", big); err != nil || !r.Created || r.Part.Number != 2 || r.Part.Hash != "h-big" || r.Part.Bytes != int64(len(big)) {
		t.Fatalf("PutPart(2) = %+v, %v", r, err)
	}
	if r, err := put(1, "h-small", small); err != nil || !r.Created {
		t.Fatalf("PutPart(1) = %+v, %v", r, err)
	}
	if r, err := put(1, "h-small", small); err != nil || r.Created || r.Part.Hash != "h-small" {
		t.Fatalf("PutPart(1) again = %+v, %v; want the stored part, not created", r, err)
	}
	if _, err := put(1, "h-other", []byte("other")); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("PutPart(1) with another body: %v, want ErrConflict", err)
	}
	for _, n := range []int{0, store.MaxPartNumber + 1} {
		if _, err := put(n, "h", small); !errors.Is(err, store.ErrInvalidArgument) {
			t.Fatalf("PutPart(%d): %v, want ErrInvalidArgument", n, err)
		}
	}
	parts, err := ss.ListParts(ctx, id)
	if err != nil || len(parts) != 2 || parts[0].Number != 1 || parts[1].Number != 2 ||
		parts[0].Hash != "h-small" || parts[1].Recipients != len(big)/10 || !sameTime(parts[0].CreatedAt, at(time.Second)) {
		t.Fatalf("ListParts = %+v, %v", parts, err)
	}
	for n, want := range map[int][]byte{1: small, 2: big} {
		got, err := ss.ReadPart(ctx, id, n)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("ReadPart(%d) = %d bytes, %v; want the %d bytes stored", n, len(got), err, len(want))
		}
	}
	if _, err := ss.ReadPart(ctx, id, 3); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("ReadPart(missing): %v, want ErrNotFound", err)
	}
	if got, err := ss.ListParts(ctx, "job-none"); err != nil || len(got) != 0 {
		t.Fatalf("ListParts(unknown job) = %v, %v", got, err)
	}

	// Expiry sees the staging job, created at Epoch.
	listed := func(st store.JobStatus, before time.Time) []string {
		t.Helper()
		js, err := ss.ListStagingJobs(ctx, store.ListStagingJobsParams{Status: st, CreatedBefore: before})
		if err != nil {
			t.Fatalf("ListStagingJobs: %v", err)
		}
		var ids []string
		for _, j := range js {
			ids = append(ids, j.ID)
		}
		return ids
	}
	stale := func(before time.Time) []string { t.Helper(); return listed("", before) }
	starting := func(before time.Time) []string { t.Helper(); return listed(store.JobStarting, before) }
	if got := starting(at(time.Hour)); len(got) != 0 {
		t.Fatalf("ListStagingJobs(starting) of a staging job = %v; want none", got)
	}
	if got := stale(at(time.Hour)); fmt.Sprint(got) != fmt.Sprint([]string{id}) {
		t.Fatalf("ListStagingJobs(after creation) = %v; want [%s]", got, id)
	}
	if got := stale(at(-time.Hour)); len(got) != 0 {
		t.Fatalf("ListStagingJobs(before creation) = %v; want none", got)
	}

	// Planning checkpoint.
	if _, err := ss.GetPlanState(ctx, id); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetPlanState(none): %v, want ErrNotFound", err)
	}
	ps, err := ss.SavePlanState(ctx, store.PlanState{JobID: id, State: []byte("step 1")})
	if err != nil || ps.Version != 1 {
		t.Fatalf("SavePlanState(new) = %+v, %v", ps, err)
	}
	if _, err := ss.SavePlanState(ctx, store.PlanState{JobID: id, State: []byte("again")}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("SavePlanState(new) twice: %v, want ErrConflict", err)
	}
	if ps, err = ss.SavePlanState(ctx, store.PlanState{JobID: id, Version: 1, State: []byte("step 2")}); err != nil || ps.Version != 2 {
		t.Fatalf("SavePlanState(v1) = %+v, %v", ps, err)
	}
	if got, err := ss.GetPlanState(ctx, id); err != nil || got.Version != 2 || string(got.State) != "step 2" {
		t.Fatalf("GetPlanState = %+v, %v", got, err)
	}

	// Items before shards, only once starting.
	if err := s.PutItems(ctx, store.PutItemsParams{JobID: id, Items: items[:2]}); !errors.Is(err, store.ErrInvalidTransition) {
		t.Fatalf("PutItems into a staging job: %v, want ErrInvalidTransition", err)
	}
	if _, err := ss.ReleasePlannedJob(ctx, store.ReleasePlannedJobParams{JobID: id, Shards: shards, Total: 10, At: at(time.Minute)}); !errors.Is(err, store.ErrInvalidTransition) {
		t.Fatalf("ReleasePlannedJob of a staging job: %v, want ErrInvalidTransition", err)
	}
	transitionJob(t, s, store.TransitionJobParams{JobID: id, From: []store.JobStatus{store.JobStaging}, To: store.JobStarting, At: at(time.Minute)})
	if got := stale(at(time.Hour)); len(got) != 0 {
		t.Fatalf("ListStagingJobs after start = %v; want none", got)
	}
	// The planning watchdog sees the starting job.
	if got := starting(at(time.Hour)); fmt.Sprint(got) != fmt.Sprint([]string{id}) {
		t.Fatalf("ListStagingJobs(starting) = %v; want [%s]", got, id)
	}
	if got := starting(at(-time.Hour)); len(got) != 0 {
		t.Fatalf("ListStagingJobs(starting, before creation) = %v; want none", got)
	}
	if err := s.PutItems(ctx, store.PutItemsParams{JobID: id, Items: items}); err != nil {
		t.Fatalf("PutItems into a starting job: %v", err)
	}
	j, err := ss.ReleasePlannedJob(ctx, store.ReleasePlannedJobParams{JobID: id, Shards: shards, Total: 10, Suppressed: 3, At: at(2 * time.Minute)})
	if err != nil || j.Status != store.JobRunning || j.Total != 10 || j.Suppressed != 3 || j.ShardCount != 2 || !sameTime(j.StartedAt, at(2*time.Minute)) {
		t.Fatalf("ReleasePlannedJob = %+v, %v", j, err)
	}
	v := getJob(t, s, id)
	if v.Job.Status != store.JobRunning || len(v.Shards) != 2 || v.Counts().Pending != 10 || v.Job.Total != 10 {
		t.Fatalf("released job = %+v", v)
	}
	if got := starting(at(time.Hour)); len(got) != 0 {
		t.Fatalf("ListStagingJobs(starting) after release = %v; want none", got)
	}
	if got, err := s.ListItems(ctx, store.ListItemsParams{JobID: id, Limit: 100}); err != nil || len(got.Items) != 10 {
		t.Fatalf("ListItems of the released job = %d items, %v", len(got.Items), err)
	}
	if _, err := ss.ReleasePlannedJob(ctx, store.ReleasePlannedJobParams{JobID: id, Shards: shards, Total: 10, At: at(3 * time.Minute)}); !errors.Is(err, store.ErrInvalidTransition) {
		t.Fatalf("ReleasePlannedJob twice: %v, want ErrInvalidTransition", err)
	}

	// A planned job without recipients left completes at once.
	p2, _ := NewJob("tenant-a", 1, 1)
	p2.Shards, p2.Job.ShardCount, p2.Job.Total, p2.Job.Status = nil, 0, 0, store.JobStaging
	createJob(t, s, p2, nil)
	transitionJob(t, s, store.TransitionJobParams{JobID: p2.Job.ID, To: store.JobStarting, At: at(time.Minute)})
	if j, err := ss.ReleasePlannedJob(ctx, store.ReleasePlannedJobParams{JobID: p2.Job.ID, Suppressed: 4, At: at(2 * time.Minute)}); err != nil ||
		j.Status != store.JobCompleted || j.Total != 0 || j.Suppressed != 4 || !sameTime(j.FinishedAt, at(2*time.Minute)) {
		t.Fatalf("ReleasePlannedJob(no shards) = %+v, %v; want completed", j, err)
	}

	// Discarding.
	if err := ss.DeleteParts(ctx, id); err != nil {
		t.Fatalf("DeleteParts: %v", err)
	}
	if got, err := ss.ListParts(ctx, id); err != nil || len(got) != 0 {
		t.Fatalf("ListParts after DeleteParts = %v, %v", got, err)
	}
	if _, err := ss.GetPlanState(ctx, id); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetPlanState after DeleteParts: %v, want ErrNotFound", err)
	}
	if err := ss.DeleteParts(ctx, id); err != nil {
		t.Fatalf("DeleteParts twice: %v", err)
	}
}
