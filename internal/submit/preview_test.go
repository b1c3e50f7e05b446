package submit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/submit"
)

// readOnlyStore lets through only the reads a preview makes; any other
// method of the store port is the nil embedded interface's and panics, so
// a preview that wrote anything (or read something unexpected) fails the
// test instead of passing silently.
type readOnlyStore struct {
	store.Store        // nil: every method not below panics
	store.StagingStore // nil, likewise
	inner              *fixture
	reads              int
}

func (r *readOnlyStore) GetAccount(ctx context.Context, tenant, id string) (store.Account, error) {
	r.reads++
	return r.inner.st.GetAccount(ctx, tenant, id)
}

func (r *readOnlyStore) AccountOwner(ctx context.Context, account string) (string, error) {
	r.reads++
	return r.inner.st.AccountOwner(ctx, account)
}

func (r *readOnlyStore) SuppressedAmong(ctx context.Context, tenant string, keys []store.RecipientKey) (map[store.RecipientKey]bool, error) {
	r.reads++
	return r.inner.st.SuppressedAmong(ctx, tenant, keys)
}

func (r *readOnlyStore) FrequencyCounts(ctx context.Context, p store.FrequencyCountsParams) (map[string]int, error) {
	r.reads++
	return r.inner.st.FrequencyCounts(ctx, p)
}

func (r *readOnlyStore) ListParts(ctx context.Context, jobID string) ([]store.PartInfo, error) {
	r.reads++
	return r.inner.st.ListParts(ctx, jobID)
}

func (r *readOnlyStore) ReadPart(ctx context.Context, jobID string, n int) ([]byte, error) {
	r.reads++
	return r.inner.st.ReadPart(ctx, jobID, n)
}

func TestPreviewStoresNothing(t *testing.T) {
	t.Parallel()
	f := newFixture(t, submit.Limits{})
	ctx := context.Background()
	if err := f.st.PutSuppressions(ctx, "t1", []store.Suppression{{Account: "acct-a", To: "u1"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.st.PutAccount(ctx, store.Account{Tenant: "t1", ID: "acct-b", RatePerSec: 4, OnlineReservePerSec: 2, Burst: 4}); err != nil {
		t.Fatal(err)
	}
	req := submit.Request{Name: "p", Template: "Hi {{name}}", RatePerSec: 5,
		Recipients: append(append(rcpts("acct-a", 7), rcpts("acct-b", 3)...), submit.Recipient{Account: "acct-a", To: "u0", Vars: map[string]string{"name": "again"}})}
	ro := &readOnlyStore{inner: f}
	// No queue: a preview that enqueued anything would panic too.
	sub := &submit.Submitter{Store: ro, Staging: ro, Clock: f.clk}
	got, err := sub.Preview(ctx, submit.Params{Tenant: "t1", Request: req})
	if err != nil {
		t.Fatal(err)
	}
	if ro.reads == 0 {
		t.Fatal("the preview read nothing through the wrapper")
	}
	want := submit.PreviewDropped{Duplicate: 1, Suppressed: 1}
	if got.Total != 9 || got.Dropped != want {
		t.Errorf("total %d dropped %+v, want 9 and %+v", got.Total, got.Dropped, want)
	}
	if len(got.ByAccount) != 2 {
		t.Fatalf("by account %+v", got.ByAccount)
	}
	// acct-a: 6 at min(10, job cap 5) = 5/s → 2 s; acct-b: 3 at its batch rate 2/s → 2 s.
	a, b := got.ByAccount[0], got.ByAccount[1]
	if a.Account != "acct-a" || a.Recipients != 6 || a.BatchRatePerSec != 5 || a.EstSeconds != 2 {
		t.Errorf("acct-a %+v", a)
	}
	if b.Account != "acct-b" || b.Recipients != 3 || b.BatchRatePerSec != 2 || b.EstSeconds != 2 {
		t.Errorf("acct-b %+v", b)
	}
	if len(got.Samples) != submit.PreviewSamples || got.Samples[0].To != "u0" || got.Samples[0].Content != "Hi 0" || got.Samples[1].To != "u2" {
		t.Errorf("samples %+v", got.Samples)
	}
	if got.MaxContentBytes != len("Hi 0") {
		t.Errorf("max content bytes %d", got.MaxContentBytes)
	}
	if jobs := f.jobs(t); len(jobs) != 0 {
		t.Errorf("%d jobs stored", len(jobs))
	}

	// The counts match the job that follows.
	res, err := f.sub.Submit(ctx, submit.Params{Tenant: "t1", Request: req})
	if err != nil {
		t.Fatal(err)
	}
	if res.Job.Job.Total != got.Total || res.Job.Job.Suppressed != got.Dropped.Suppressed {
		t.Errorf("job total %d suppressed %d; the preview said %d and %d", res.Job.Job.Total, res.Job.Job.Suppressed, got.Total, got.Dropped.Suppressed)
	}

	// Validation as Submit's.
	_, err = sub.Preview(ctx, submit.Params{Tenant: "t1", Request: submit.Request{Template: "Hi {{name}}",
		Recipients: []submit.Recipient{{Account: "ghost", To: "u1"}}}})
	var verr *submit.ValidationError
	if !errors.As(err, &verr) {
		t.Errorf("unknown account: %v, want a validation error", err)
	}
}

func TestPreviewStagedStoresNothing(t *testing.T) {
	t.Parallel()
	f := newFixture(t, submit.Limits{})
	ctx := context.Background()
	job := f.stagedJob(t, "k")
	if _, err := f.put(t, job, 1, submit.MediaNDJSON, ndjson("acct-a", 0, 30)); err != nil {
		t.Fatal(err)
	}
	if _, err := f.put(t, job, 2, submit.MediaNDJSON, ndjson("acct-a", 20, 40)+ndjson("acct-b", 0, 5)); err != nil {
		t.Fatal(err)
	}
	ro := &readOnlyStore{inner: f}
	sub := &submit.Submitter{Store: ro, Staging: ro, Clock: f.clk}
	got, err := sub.PreviewStaged(ctx, job)
	if err != nil {
		t.Fatal(err)
	}
	if got.Total != 45 || got.Dropped.Duplicate != 10 || len(got.ByAccount) != 2 || got.ByAccount[0].Recipients != 40 {
		t.Errorf("preview %+v", got)
	}
	if _, err := f.sub.Start(ctx, job, 2); err != nil {
		t.Fatal(err)
	}
	job.Status = store.JobStarting
	if _, err := sub.PreviewStaged(ctx, job); !errors.Is(err, submit.ErrNotStaging) {
		t.Errorf("preview of a starting job: %v, want ErrNotStaging", err)
	}
}

// TestPreviewCountsFrequencyCapped: recipients who already had their
// account's frequency_cap of messages in the window are counted in
// dropped.frequency_capped, not in the total; older charges, other
// accounts and recipients under the cap are not.
func TestPreviewCountsFrequencyCapped(t *testing.T) {
	t.Parallel()
	f := newFixture(t, submit.Limits{})
	ctx := context.Background()
	if _, err := f.st.PutAccount(ctx, store.Account{Tenant: "t1", ID: "acct-a", RatePerSec: 10, Burst: 10,
		FrequencyCap: store.FrequencyCap{Max: 2, WindowSec: 3600}}); err != nil {
		t.Fatal(err)
	}
	charge := func(job string, at time.Time, to ...string) {
		t.Helper()
		p := store.ChargeFrequencyParams{Tenant: "t1", Account: "acct-a", JobID: job, Now: at,
			Cap: store.FrequencyCap{Max: 2, WindowSec: 3600}}
		for i, r := range to {
			p.Charges = append(p.Charges, store.FrequencyCharge{Seq: int64(i), To: r})
		}
		if _, err := f.st.ChargeFrequency(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	now := f.clk.Now()
	charge("old", now.Add(-2*time.Hour), "u0", "u1", "u2") // out of the window
	charge("j1", now.Add(-30*time.Minute), "u1", "u2", "u3")
	charge("j2", now.Add(-10*time.Minute), "u1", "u2")
	ro := &readOnlyStore{inner: f}
	sub := &submit.Submitter{Store: ro, Staging: ro, Clock: f.clk}
	got, err := sub.Preview(ctx, submit.Params{Tenant: "t1", Request: submit.Request{Template: "Hi {{name}}",
		Recipients: append(rcpts("acct-a", 5), rcpts("acct-b", 3)...)}})
	if err != nil {
		t.Fatal(err)
	}
	// u1 and u2 of acct-a had 2 in the last hour; u3 one; acct-b has no cap.
	if want := (submit.PreviewDropped{FrequencyCapped: 2}); got.Total != 6 || got.Dropped != want {
		t.Errorf("total %d dropped %+v, want 6 and %+v", got.Total, got.Dropped, want)
	}
	if a := got.ByAccount[0]; a.Account != "acct-a" || a.Recipients != 3 {
		t.Errorf("acct-a %+v, want 3 recipients", a)
	}
}

// TestPreviewEstimateIntegratesWarmup: an account with warmup_sec starts
// at 10% of its rate and ramps to full over the warm-up, so the estimate
// is the time the ramp (then the full rate) takes to send the recipients,
// not recipients / rate; a job's rate cap under the account's rate is
// reached part-way through the ramp.
func TestPreviewEstimateIntegratesWarmup(t *testing.T) {
	t.Parallel()
	f := newFixture(t, submit.Limits{})
	ctx := context.Background()
	if _, err := f.st.PutAccount(ctx, store.Account{Tenant: "t1", ID: "acct-a", RatePerSec: 10, Burst: 10, WarmupSec: 10}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		n, jobRate int
		want       int64
	}{
		// The ramp's area over 10 s is (0.1+1)/2 × 10/s × 10 s = 55 sends.
		{n: 55, want: 10},
		// 55 during the ramp, then 45 at 10/s: 14.5 s.
		{n: 100, want: 15},
		// Early in the ramp: 1/s rising by 0.9/s each second; 5 sends
		// take the u where u + 0.45u² = 5, about 2.4 s.
		{n: 5, want: 3},
		// Job cap 5/s: the ramp reaches it after 4.44 s with 13.3 sent,
		// the other 6.7 take 1.33 s more.
		{n: 20, jobRate: 5, want: 6},
	} {
		got, err := f.sub.Preview(ctx, submit.Params{Tenant: "t1", Request: submit.Request{
			Template: "Hi {{name}}", Recipients: rcpts("acct-a", tc.n), RatePerSec: float64(tc.jobRate)}})
		if err != nil {
			t.Fatal(err)
		}
		if a := got.ByAccount[0]; a.EstSeconds != tc.want {
			t.Errorf("%d recipients at job rate %d: est %d s, want %d (%+v)", tc.n, tc.jobRate, a.EstSeconds, tc.want, a)
		}
	}
}
