package storetest

import (
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/store"
)

// testCanary: a job's canary size is kept; resuming its canary pause with
// ApproveCanary records the approval and the results; ApproveCanary on a
// job paused for another reason changes nothing but the status.
func testCanary(t *testing.T, s store.Store, _ Capabilities) {
	p, _ := NewJob("tenant-a", 1, 10)
	p.Job.Canary = 3
	createJob(t, s, p, nil)
	id := p.Job.ID
	if j := getJob(t, s, id).Job; j.Canary != 3 || j.CanaryApproved {
		t.Fatalf("created with canary 3: canary %d approved %v", j.Canary, j.CanaryApproved)
	}
	transitionJob(t, s, store.TransitionJobParams{JobID: id, To: store.JobRunning, At: at(time.Second)})
	transitionJob(t, s, store.TransitionJobParams{JobID: id, To: store.JobPaused, PauseReason: store.PauseManual, At: at(2 * time.Second)})
	transitionJob(t, s, store.TransitionJobParams{JobID: id, To: store.JobRunning, ApproveCanary: true, CanaryConfirmed: 9, At: at(3 * time.Second)})
	if j := getJob(t, s, id).Job; j.CanaryApproved || j.CanaryConfirmed != 0 {
		t.Fatalf("resuming a manual pause approved the canary: %+v", j)
	}
	transitionJob(t, s, store.TransitionJobParams{JobID: id, To: store.JobPaused, PauseReason: store.PauseCanary, At: at(4 * time.Second)})
	if j := getJob(t, s, id).Job; j.Status != store.JobPaused || j.PauseReason != store.PauseCanary {
		t.Fatalf("paused for canary: %s (%s)", j.Status, j.PauseReason)
	}
	transitionJob(t, s, store.TransitionJobParams{JobID: id, From: []store.JobStatus{store.JobPaused}, To: store.JobRunning,
		ApproveCanary: true, CanaryConfirmed: 2, CanaryFailed: 1, At: at(5 * time.Second)})
	j := getJob(t, s, id).Job
	if j.Status != store.JobRunning || !j.CanaryApproved || j.CanaryConfirmed != 2 || j.CanaryFailed != 1 || j.Canary != 3 {
		t.Fatalf("after approval: %s approved %v confirmed %d failed %d canary %d", j.Status, j.CanaryApproved, j.CanaryConfirmed, j.CanaryFailed, j.Canary)
	}
}
