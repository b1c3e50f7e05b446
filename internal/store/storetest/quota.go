package storetest

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/store"
)

// testQuotas: a tenant's quota reads back (none: unlimited); the daily
// recipients counter adds only within its bound, even under concurrent
// adds, per tenant and day; active jobs (starting, running, paused) are
// counted per tenant, up to a limit, and leave the count when final.
func testQuotas(t *testing.T, s store.Store, _ Capabilities) {
	qs, ok := s.(store.QuotaStore)
	if !ok {
		t.Fatalf("%T does not implement store.QuotaStore", s)
	}
	ctx := ctxOf(t)
	tenant, other := uniqueID("tenant-q"), uniqueID("tenant-q")
	if q, err := qs.GetQuota(ctx, tenant); err != nil || q != (store.Quota{Tenant: tenant}) {
		t.Fatalf("GetQuota(no quota) = %+v, %v; want unlimited", q, err)
	}
	want := store.Quota{Tenant: tenant, MaxRunningJobs: 2, MaxRecipientsPerDay: 10, UpdatedAt: at(time.Second)}
	if err := qs.PutQuota(ctx, want); err != nil {
		t.Fatalf("PutQuota: %v", err)
	}
	want.MaxRunningJobs = 3
	if err := qs.PutQuota(ctx, want); err != nil {
		t.Fatalf("PutQuota(again): %v", err)
	}
	if q, err := qs.GetQuota(ctx, tenant); err != nil || q.MaxRunningJobs != 3 || q.MaxRecipientsPerDay != 10 || !sameTime(q.UpdatedAt, want.UpdatedAt) {
		t.Fatalf("GetQuota = %+v, %v; want %+v", q, err, want)
	}
	if err := qs.PutQuota(ctx, store.Quota{Tenant: tenant, MaxRunningJobs: -1}); !errors.Is(err, store.ErrInvalidArgument) {
		t.Fatalf("PutQuota(negative) = %v, want ErrInvalidArgument", err)
	}

	// The daily counter.
	day, next := store.QuotaDay(at(0)), store.QuotaDay(at(24*time.Hour))
	add := func(tenant, day string, n, bound int64) store.AddRecipientsResult {
		t.Helper()
		r, err := qs.AddRecipients(ctx, store.AddRecipientsParams{Tenant: tenant, Day: day, N: n, Max: bound})
		if err != nil {
			t.Fatalf("AddRecipients(%s, %s, %d, max %d): %v", tenant, day, n, bound, err)
		}
		return r
	}
	for i, step := range []struct {
		n, bound int64
		want     store.AddRecipientsResult
	}{
		{6, 10, store.AddRecipientsResult{Added: true, Total: 6}},
		{5, 10, store.AddRecipientsResult{Total: 6}},  // over: refused, unchanged
		{11, 10, store.AddRecipientsResult{Total: 6}}, // more than the bound itself
		{4, 10, store.AddRecipientsResult{Added: true, Total: 10}},
		{1, 10, store.AddRecipientsResult{Total: 10}},
		{-3, 10, store.AddRecipientsResult{Added: true, Total: 7}},   // given back
		{100, 0, store.AddRecipientsResult{Added: true, Total: 107}}, // no bound
	} {
		if got := add(tenant, day, step.n, step.bound); got != step.want {
			t.Fatalf("step %d: AddRecipients(%d, max %d) = %+v, want %+v", i, step.n, step.bound, got, step.want)
		}
	}
	if got := add(tenant, next, 10, 10); got != (store.AddRecipientsResult{Added: true, Total: 10}) {
		t.Fatalf("the next day's counter = %+v, want its own 10", got)
	}
	if got := add(other, day, 1, 10); got != (store.AddRecipientsResult{Added: true, Total: 1}) {
		t.Fatalf("another tenant's counter = %+v, want its own 1", got)
	}
	if _, err := qs.AddRecipients(ctx, store.AddRecipientsParams{Tenant: tenant, N: 1}); !errors.Is(err, store.ErrInvalidArgument) {
		t.Fatalf("AddRecipients(no day) = %v, want ErrInvalidArgument", err)
	}
	// Concurrent adds never pass the bound together.
	race := store.QuotaDay(at(48 * time.Hour))
	var wg sync.WaitGroup
	var added atomic.Int64
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := qs.AddRecipients(ctx, store.AddRecipientsParams{Tenant: tenant, Day: race, N: 3, Max: 20})
			if err != nil {
				t.Errorf("concurrent AddRecipients: %v", err)
			}
			if r.Added {
				added.Add(3)
			}
		}()
	}
	wg.Wait()
	if got := add(tenant, race, 0, 20); added.Load() != 18 || got.Total != 18 {
		t.Fatalf("concurrent adds of 3 within 20: %d added, total %d; want 18", added.Load(), got.Total)
	}

	// Active jobs.
	count := func(tenant string, limit int) int {
		t.Helper()
		n, err := qs.CountActiveJobs(ctx, tenant, limit)
		if err != nil {
			t.Fatalf("CountActiveJobs(%s, %d): %v", tenant, limit, err)
		}
		return n
	}
	move := func(id string, to store.JobStatus) {
		t.Helper()
		transitionJob(t, s, store.TransitionJobParams{JobID: id, To: to, At: at(time.Minute)})
	}
	a, aItems := NewJob(tenant, 1, 2)
	createJob(t, s, a, aItems)
	staged, _ := NewJob(tenant, 0, 0)
	staged.Job.Status = store.JobStaging
	if _, err := s.CreateJob(ctx, staged); err != nil {
		t.Fatalf("CreateJob(staging): %v", err)
	}
	if n := count(tenant, 10); n != 0 {
		t.Fatalf("creating and staging jobs: %d active, want 0", n)
	}
	move(a.Job.ID, store.JobRunning)
	move(staged.Job.ID, store.JobStarting)
	b, bItems := NewJob(other, 1, 1)
	createJob(t, s, b, bItems)
	move(b.Job.ID, store.JobRunning)
	if n := count(tenant, 10); n != 2 {
		t.Fatalf("a running and a starting job: %d active, want 2", n)
	}
	if n := count(tenant, 1); n != 1 {
		t.Fatalf("count up to 1 = %d, want 1", n)
	}
	move(a.Job.ID, store.JobPaused)
	if n := count(tenant, 10); n != 2 {
		t.Fatalf("a paused and a starting job: %d active, want 2", n)
	}
	move(a.Job.ID, store.JobCancelled)
	move(staged.Job.ID, store.JobFailed)
	if n := count(tenant, 10); n != 0 {
		t.Fatalf("after both ended: %d active, want 0", n)
	}
	if n := count(other, 10); n != 1 {
		t.Fatalf("the other tenant: %d active, want 1", n)
	}
	move(b.Job.ID, store.JobPartial)
	move(b.Job.ID, store.JobRunning) // a redrive runs it again
	if n := count(other, 10); n != 1 {
		t.Fatalf("a redriven job: %d active, want 1", n)
	}
	if _, err := qs.CountActiveJobs(ctx, tenant, 0); !errors.Is(err, store.ErrInvalidArgument) {
		t.Fatalf("CountActiveJobs(limit 0) = %v, want ErrInvalidArgument", err)
	}
}
