package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/store"
)

// testConfirmedAfterRetry: a confirmed item that needed more than one
// attempt counts under store.TallyConfirmedAfterRetry, in UpdateItems'
// delta, in a recount, and nowhere in JobView.Failures.
func testConfirmedAfterRetry(t *testing.T, s store.Store, _ Capabilities) {
	ctx := ctxOf(t)
	p, _ := runningJob(t, s, "tenant-a", 1, 6)
	id := p.Job.ID
	c := claim(t, s, id, 0, 3, at(time.Second), "c1")
	seq := seqsOf(c.Items)
	// The first item goes back to pending for a retry; the second is
	// confirmed at once.
	u := update(t, s, id, 0, at(2*time.Second),
		store.ItemUpdate{Seq: seq[0], From: store.ItemSubmitted, ClaimID: "c1", To: store.ItemPending,
			Error: &store.ItemError{Category: store.CategoryRetryable}, NextAttemptAt: at(3 * time.Second)},
		store.ItemUpdate{Seq: seq[1], From: store.ItemSubmitted, ClaimID: "c1", To: store.ItemConfirmed},
	)
	if n := u.FailuresDelta[store.TallyConfirmedAfterRetry]; n != 0 {
		t.Fatalf("a first-attempt confirmation moved %s by %d", store.TallyConfirmedAfterRetry, n)
	}
	c2 := claim(t, s, id, 0, 1, at(4*time.Second), "c2")
	if len(c2.Items) != 1 || c2.Items[0].Seq != seq[0] || c2.Items[0].Attempts != 2 {
		t.Fatalf("second claim = %+v, want item %d on its second attempt", c2.Items, seq[0])
	}
	u = update(t, s, id, 0, at(5*time.Second),
		store.ItemUpdate{Seq: seq[0], From: store.ItemSubmitted, ClaimID: "c2", To: store.ItemConfirmed})
	if n := u.FailuresDelta[store.TallyConfirmedAfterRetry]; n != 1 {
		t.Fatalf("a second-attempt confirmation: delta %v, want %s +1", nonZero(u.FailuresDelta), store.TallyConfirmedAfterRetry)
	}
	sh, err := s.RecountShard(ctx, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := sh.Failures[store.TallyConfirmedAfterRetry]; got != 1 {
		t.Fatalf("recount: %s = %d, want 1 (failures %v)", store.TallyConfirmedAfterRetry, got, nonZero(sh.Failures))
	}
	v := getJob(t, s, id)
	if v.ConfirmedAfterRetry() != 1 {
		t.Fatalf("JobView.ConfirmedAfterRetry = %d, want 1", v.ConfirmedAfterRetry())
	}
	if _, ok := v.Failures()[store.TallyConfirmedAfterRetry]; ok {
		t.Fatalf("JobView.Failures lists %s: %v", store.TallyConfirmedAfterRetry, v.Failures())
	}
}

// testSeries: per-minute counters add up, list in time order, stay
// apart per key, and leave out minutes outside the span.
func testSeries(t *testing.T, s store.Store, _ Capabilities) {
	ss, ok := s.(store.SeriesStore)
	if !ok {
		t.Fatalf("%T does not implement store.SeriesStore", s)
	}
	ctx := ctxOf(t)
	key := store.JobSeriesKey(uniqueID("series"))
	other := store.AccountSeriesKey("tenant-a", uniqueID("acct"))
	m0 := Epoch.Truncate(time.Minute)
	add := func(k string, when time.Time, counts map[string]int64) {
		t.Helper()
		if err := ss.AddSeries(ctx, store.AddSeriesParams{Key: k, Minute: when, Counts: counts}); err != nil {
			t.Fatalf("AddSeries(%s, %s): %v", k, when, err)
		}
	}
	add(key, m0.Add(10*time.Second), map[string]int64{store.SeriesSent: 3, store.SeriesConfirmed: 2, store.CategoryPermanent: 1})
	add(key, m0.Add(50*time.Second), map[string]int64{store.SeriesSent: 4, store.CategoryPermanent: 2, "zero": 0})
	add(key, m0.Add(2*time.Minute+time.Second), map[string]int64{store.SeriesConfirmed: 5})
	add(key, m0.Add(-time.Minute), map[string]int64{store.SeriesSent: 100})
	add(other, m0, map[string]int64{store.SeriesSent: 7})

	got, err := ss.ListSeries(ctx, store.ListSeriesParams{Key: key, From: m0.Add(20 * time.Second), To: m0.Add(3 * time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	want := []store.SeriesPoint{
		{Minute: m0, Counts: map[string]int64{store.SeriesSent: 7, store.SeriesConfirmed: 2, store.CategoryPermanent: 3}},
		{Minute: m0.Add(2 * time.Minute), Counts: map[string]int64{store.SeriesConfirmed: 5}},
	}
	if len(got) != len(want) {
		t.Fatalf("ListSeries = %+v, want %+v", got, want)
	}
	for i := range want {
		if !got[i].Minute.Equal(want[i].Minute) || !sameFailures(got[i].Counts, want[i].Counts) {
			t.Fatalf("ListSeries[%d] = %s %v, want %s %v", i, got[i].Minute, got[i].Counts, want[i].Minute, want[i].Counts)
		}
	}
	none, err := ss.ListSeries(ctx, store.ListSeriesParams{Key: key, From: m0.Add(5 * time.Minute), To: m0.Add(10 * time.Minute)})
	if err != nil || len(none) != 0 {
		t.Fatalf("ListSeries of an empty span = %+v, %v; want nothing", none, err)
	}
	if _, err := ss.ListSeries(ctx, store.ListSeriesParams{Key: key, From: m0, To: m0.Add(2 * store.MaxSeriesMinutes * time.Minute)}); !errors.Is(err, store.ErrInvalidArgument) {
		t.Fatalf("ListSeries over %d minutes: %v, want ErrInvalidArgument", 2*store.MaxSeriesMinutes, err)
	}
	if err := ss.AddSeries(ctx, store.AddSeriesParams{Minute: m0, Counts: map[string]int64{"x": 1}}); !errors.Is(err, store.ErrInvalidArgument) {
		t.Fatalf("AddSeries without a key: %v, want ErrInvalidArgument", err)
	}
}
