package reconcile_test

import (
	"context"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/store/storetest"
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
