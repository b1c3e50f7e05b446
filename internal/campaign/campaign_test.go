package campaign_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/alert"
	"github.com/qunfa/qunfa/internal/campaign"
	"github.com/qunfa/qunfa/internal/campaign/httpsource"
	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/queue/sqlitequeue"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/store/sqlitestore"
	"github.com/qunfa/qunfa/internal/submit"
)

// fixture is the campaign core on the embedded store and queue with a
// fake clock and an alert feed.
type fixture struct {
	store *sqlitestore.Store
	clock *clock.Fake
	feed  *alert.Feed
	c     *campaign.Campaigns
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	st, err := sqlitestore.Open(ctx, filepath.Join(dir, "store.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	clk := clock.NewFake(at("2025-03-01T09:00:00Z"))
	q, err := sqlitequeue.Open(ctx, filepath.Join(dir, "queue.db"), sqlitequeue.Options{Name: "work", Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = q.Close() })
	for _, acct := range []string{"acct-a", "acct-b"} {
		if err := st.GrantAccount(ctx, "tenant-a", acct, time.Time{}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.PutAccount(ctx, store.Account{Tenant: "tenant-a", ID: acct, RatePerSec: 10, Burst: 10, MaxRecipientsPerCall: 1}); err != nil {
			t.Fatal(err)
		}
	}
	feed := alert.NewFeed(100)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	return &fixture{store: st, clock: clk, feed: feed, c: &campaign.Campaigns{
		Store: st, Submitter: &submit.Submitter{Store: st, Queue: q, Clock: clk}, Clock: clk, Alerts: feed, Log: log,
	}}
}

func requestJSON(t *testing.T, r submit.Request) []byte {
	t.Helper()
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (f *fixture) put(t *testing.T, c store.Campaign) store.Campaign {
	t.Helper()
	if c.Tenant == "" {
		c.Tenant = "tenant-a"
	}
	if c.CreatedAt.IsZero() {
		c.CreatedAt = f.clock.Now()
	}
	if err := campaign.Validate(context.Background(), f.c.Submitter, c); err != nil {
		t.Fatalf("campaign %s invalid: %v", c.ID, err)
	}
	out, err := f.store.PutCampaign(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func snapshot(t *testing.T, id, schedule string, maxDelay int) store.Campaign {
	return store.Campaign{ID: id, Name: "digest " + id, Schedule: schedule, Mode: campaign.ModeSnapshot, MaxDelaySec: maxDelay, Enabled: true,
		Request: requestJSON(t, submit.Request{Template: "Hi {{name}}", Recipients: []submit.Recipient{
			{Account: "acct-a", To: "u1", Vars: map[string]string{"name": "Li"}},
			{Account: "acct-b", To: "u2", Vars: map[string]string{"name": "Wang"}},
		}})}
}

func (f *fixture) jobs(t *testing.T) []store.Job {
	t.Helper()
	res, err := f.store.ListJobs(context.Background(), store.ListJobsParams{Tenant: "tenant-a", Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	return res.Jobs
}

func (f *fixture) skipped(t *testing.T) []alert.CampaignSkippedDetail {
	t.Helper()
	var out []alert.CampaignSkippedDetail
	for _, e := range f.feed.Recent(100) {
		if e.Event.Type == alert.CampaignSkipped {
			out = append(out, e.Event.Detail.(alert.CampaignSkippedDetail))
		}
	}
	return out
}

// A firing delivered twice (EventBridge is at least once) makes one job;
// the next firing makes another.
func TestFireTwiceOneJob(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.put(t, snapshot(t, "weekly", "cron(0 9 ? * SAT *)", 900))
	when := at("2025-03-01T09:00:00Z")
	first, err := f.c.Fire(ctx, "tenant-a", "weekly", when)
	if err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(30 * time.Second)
	again, err := f.c.Fire(ctx, "tenant-a", "weekly", when)
	if err != nil {
		t.Fatal(err)
	}
	if first.Outcome != campaign.Fired || !first.Created || again.Outcome != campaign.Fired || again.Created || first.Job.ID != again.Job.ID {
		t.Fatalf("first %+v, again %+v", first, again)
	}
	if want := "campaign:weekly:2025-03-01T09:00:00Z"; first.Key != want || first.Job.IdempotencyKey != want {
		t.Errorf("key %q / job key %q, want %q", first.Key, first.Job.IdempotencyKey, want)
	}
	if first.Job.Total != 2 || first.Job.Name != "digest weekly" || first.Job.CreatedBy != "campaign:weekly" ||
		first.Job.Meta[campaign.MetaScheduledAt] != "2025-03-01T09:00:00Z" || first.Job.Meta[campaign.MetaCampaign] != "weekly" {
		t.Errorf("job %+v", first.Job)
	}
	if !first.Job.CreatedAt.Equal(when) {
		t.Errorf("job created at %s, want the firing's start %s", first.Job.CreatedAt, when)
	}
	cmp, _ := f.store.GetCampaign(ctx, "tenant-a", "weekly")
	if !cmp.LastFiredAt.Equal(when) {
		t.Errorf("LastFiredAt %s, want %s", cmp.LastFiredAt, when)
	}
	// Delivered again much later (past max delay): still one job, no alert.
	f.clock.Advance(time.Hour)
	late, err := f.c.Fire(ctx, "tenant-a", "weekly", when)
	if err != nil || late.Outcome != campaign.Duplicate {
		t.Errorf("late redelivery: %+v %v", late, err)
	}
	// An older firing after a newer one: dropped.
	old, err := f.c.Fire(ctx, "tenant-a", "weekly", when.Add(-7*24*time.Hour))
	if err != nil || old.Outcome != campaign.Superseded {
		t.Errorf("older firing: %+v %v", old, err)
	}
	if n := len(f.jobs(t)); n != 1 {
		t.Fatalf("%d jobs, want 1", n)
	}
	if s := f.skipped(t); len(s) != 0 {
		t.Errorf("alerts %+v", s)
	}
	// Next week: a new job.
	f.clock.Set(when.Add(7 * 24 * time.Hour))
	next, err := f.c.Fire(ctx, "tenant-a", "weekly", when.Add(7*24*time.Hour))
	if err != nil || !next.Created || next.Job.ID == first.Job.ID {
		t.Errorf("next firing: %+v %v", next, err)
	}
	// Concurrent deliveries of one firing: one job.
	third := when.Add(14 * 24 * time.Hour)
	f.clock.Set(third)
	var wg sync.WaitGroup
	ids := make([]string, 4)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := f.c.Fire(ctx, "tenant-a", "weekly", third)
			if err != nil {
				t.Errorf("concurrent fire: %v", err)
			}
			ids[i] = r.Job.ID
		}()
	}
	wg.Wait()
	if n := len(f.jobs(t)); n != 3 {
		t.Errorf("%d jobs after three firings, want 3", n)
	}
}

// A firing that starts later than max_delay_sec after its time is skipped:
// CampaignSkipped alert, no job, LastFiredAt moves on.
func TestFireLateSkipped(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.put(t, snapshot(t, "morning", "cron(0 8 * * ? *)", 600))
	when := at("2025-03-01T08:00:00Z")
	f.clock.Set(when.Add(10*time.Minute + time.Second))
	res, err := f.c.Fire(ctx, "tenant-a", "morning", when)
	if err != nil || res.Outcome != campaign.SkippedLate {
		t.Fatalf("late firing: %+v %v", res, err)
	}
	if n := len(f.jobs(t)); n != 0 {
		t.Errorf("%d jobs, want none", n)
	}
	s := f.skipped(t)
	if len(s) != 1 || s[0].CampaignID != "morning" || !s[0].ScheduledAt.Equal(when) || !s[0].StartedAt.Equal(f.clock.Now()) || s[0].MaxDelaySec != 600 {
		t.Fatalf("alerts %+v", s)
	}
	if cmp, _ := f.store.GetCampaign(ctx, "tenant-a", "morning"); !cmp.LastFiredAt.Equal(when) {
		t.Errorf("LastFiredAt %s", cmp.LastFiredAt)
	}
	// Redelivered: no second alert, still no job.
	if res, err := f.c.Fire(ctx, "tenant-a", "morning", when); err != nil || res.Outcome != campaign.Duplicate {
		t.Errorf("redelivered late firing: %+v %v", res, err)
	}
	if len(f.skipped(t)) != 1 || len(f.jobs(t)) != 0 {
		t.Errorf("redelivery alerted or made a job")
	}
	// Within the delay: fires. max_delay_sec 0: never skipped.
	f.put(t, snapshot(t, "anytime", "cron(0 8 * * ? *)", 0))
	if res, err := f.c.Fire(ctx, "tenant-a", "anytime", when); err != nil || res.Outcome != campaign.Fired {
		t.Errorf("max delay 0: %+v %v", res, err)
	}
	// Disabled and unknown campaigns.
	off := snapshot(t, "off", "cron(0 8 * * ? *)", 0)
	off.Enabled = false
	f.put(t, off)
	if res, err := f.c.Fire(ctx, "tenant-a", "off", when); err != nil || res.Outcome != campaign.SkippedDisabled {
		t.Errorf("disabled: %+v %v", res, err)
	}
	if _, err := f.c.Fire(ctx, "tenant-a", "ghost", when); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("unknown campaign: %v", err)
	}
	if _, err := f.c.Fire(ctx, "tenant-b", "anytime", when); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("another tenant's campaign: %v", err)
	}
}

// recipientServer is a business system's recipient endpoint: pages of
// pageSize over n recipients, cursor = the next offset.
func recipientServer(t *testing.T, n, pageSize int, bad func(cursor string) (int, string)) (*httptest.Server, *[]string) {
	t.Helper()
	var mu sync.Mutex
	var cursors []string
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := r.URL.Query().Get("cursor")
		mu.Lock()
		cursors = append(cursors, c)
		mu.Unlock()
		if r.URL.Query().Get("segment") != "vip" {
			http.Error(w, "lost the query", http.StatusBadRequest)
			return
		}
		if bad != nil {
			if status, body := bad(c); status != 0 {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(status)
				_, _ = io.WriteString(w, body)
				return
			}
		}
		start := 0
		if c != "" {
			_, _ = fmt.Sscan(c, &start)
		}
		var page struct {
			Recipients []campaign.Recipient `json:"recipients"`
			NextCursor string               `json:"next_cursor"`
		}
		page.Recipients = []campaign.Recipient{}
		for i := start; i < min(start+pageSize, n); i++ {
			page.Recipients = append(page.Recipients, campaign.Recipient{Account: []string{"acct-a", "acct-b"}[i%2],
				To: fmt.Sprint("user-", i), Vars: map[string]string{"name": fmt.Sprint("N", i)}})
		}
		if start+pageSize < n {
			page.NextCursor = fmt.Sprint(start + pageSize)
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(page)
	}))
	t.Cleanup(srv.Close)
	if !strings.HasPrefix(srv.URL, "https://127.0.0.1:") {
		t.Fatalf("source %s is not on 127.0.0.1", srv.URL)
	}
	return srv, &cursors
}

func requery(t *testing.T, id, source string) store.Campaign {
	return store.Campaign{ID: id, Name: "requery " + id, Schedule: "rate(1 hour)", Mode: campaign.ModeRequery, Enabled: true,
		Source: source, Request: requestJSON(t, submit.Request{Template: "Hi {{name}}", Budget: 100})}
}

// plan runs the planning a started staged job waits for (queue work in
// the running product) and returns the job.
func (f *fixture) plan(t *testing.T, jobID string) store.Job {
	t.Helper()
	ctx := context.Background()
	for step := 0; step < 1000; step++ {
		v, err := f.store.GetJob(ctx, jobID)
		if err != nil {
			t.Fatal(err)
		}
		if v.Job.Status != store.JobStarting {
			return v.Job
		}
		if err := f.c.Submitter.(*submit.Submitter).Plan(ctx, jobID); err != nil {
			t.Fatalf("plan %s: %v", jobID, err)
		}
	}
	t.Fatalf("planning job %s did not end in 1,000 steps", jobID)
	return store.Job{}
}

// tos lists the recipients of a job's items, each once per item.
func (f *fixture) tos(t *testing.T, jobID string) map[string]int {
	t.Helper()
	out := map[string]int{}
	p := store.ListItemsParams{JobID: jobID, Limit: 1000}
	for {
		res, err := f.store.ListItems(context.Background(), p)
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range res.Items {
			out[it.To]++
		}
		if res.NextCursor == "" {
			return out
		}
		p.Cursor = res.NextCursor
	}
}

func TestFireRequeryPages(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	srv, cursors := recipientServer(t, 25, 10, nil)
	f.c.Source = httpsource.New(httpsource.Config{Client: srv.Client()})
	f.put(t, requery(t, "vips", srv.URL+"/recipients?segment=vip"))
	when := at("2025-03-01T09:00:00Z")
	res, err := f.c.Fire(ctx, "tenant-a", "vips", when)
	if err != nil {
		t.Fatal(err)
	}
	// The pages went into a staged job, started: planning is queue work.
	if !res.Created || res.Job.Status != store.JobStarting || res.Job.Budget != 100 {
		t.Fatalf("job %+v", res.Job)
	}
	if got := strings.Join(*cursors, ","); got != ",10,20" {
		t.Errorf("cursors asked %q, want \",10,20\"", got)
	}
	m := res.Job.Meta
	// The source's query (it may hold the tenant's credentials) is not
	// kept in the job's meta.
	if m[campaign.MetaQuery] != srv.URL+"/recipients?…" || m[campaign.MetaMode] != "requery" {
		t.Errorf("meta %v", m)
	}
	if job := f.plan(t, res.Job.ID); job.Status != store.JobRunning || job.Total != 25 {
		t.Fatalf("planned job %+v", job)
	}
	if tos := f.tos(t, res.Job.ID); len(tos) != 25 || tos["user-24"] != 1 {
		t.Fatalf("items %v", tos)
	}
	// Redelivered: the source is not asked again, no second job.
	n := len(*cursors)
	if again, err := f.c.Fire(ctx, "tenant-a", "vips", when); err != nil || again.Outcome != campaign.Duplicate {
		t.Errorf("redelivery: %+v %v", again, err)
	}
	if len(*cursors) != n || len(f.jobs(t)) != 1 {
		t.Errorf("redelivery asked the source or made a job")
	}
	// A crash after the job started but before LastFiredAt was recorded:
	// the source now answers differently, the key still finds the firing's
	// job and nothing is added to it.
	cmp, _ := f.store.GetCampaign(ctx, "tenant-a", "vips")
	cmp.LastFiredAt = time.Time{}
	srv2, _ := recipientServer(t, 7, 10, nil)
	f.c.Source = httpsource.New(httpsource.Config{Client: srv2.Client()})
	cmp.Source = srv2.URL + "/?segment=vip"
	if _, err := f.store.PutCampaign(ctx, cmp); err != nil {
		t.Fatal(err)
	}
	again, err := f.c.Fire(ctx, "tenant-a", "vips", when)
	if err != nil || again.Outcome != campaign.Fired || again.Created || again.Job.ID != res.Job.ID {
		t.Errorf("refired after a crash: %+v %v", again, err)
	}
	if len(f.jobs(t)) != 1 || len(f.tos(t, res.Job.ID)) != 25 {
		t.Errorf("a second job for one firing, or items added")
	}
}

// A requery firing has no recipient cap (the old path stopped at
// 100,000): a source of 100,001 recipients in pages of 5,000 makes one
// job of 100,001 items, one part per page.
func TestFireRequeryHasNoRecipientCap(t *testing.T) {
	if testing.Short() {
		t.Skip("100,001 recipients")
	}
	f := newFixture(t)
	ctx := context.Background()
	const n = 100_001
	srv, cursors := recipientServer(t, n, 5000, nil)
	f.c.Source = httpsource.New(httpsource.Config{Client: srv.Client()})
	f.put(t, requery(t, "all", srv.URL+"/?segment=vip"))
	res, err := f.c.Fire(ctx, "tenant-a", "all", at("2025-03-01T09:00:00Z"))
	if err != nil {
		t.Fatal(err)
	}
	parts, err := f.c.Submitter.(*submit.Submitter).ListParts(ctx, res.Job)
	if err != nil || len(parts) != 21 || len(*cursors) != 21 {
		t.Fatalf("%d parts from %d pages: %v", len(parts), len(*cursors), err)
	}
	if job := f.plan(t, res.Job.ID); job.Total != n {
		t.Fatalf("planned %d items, want %d", job.Total, n)
	}
}

// A firing that fails midway (the source fails on page 3) starts no job
// and records no firing; the next delivery goes on with the same staging
// job, keeping the parts stored, and every recipient is planned once.
func TestFireRequeryResumesAfterAFailure(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	down := true
	srv, _ := recipientServer(t, 45, 10, func(c string) (int, string) {
		if down && c == "20" {
			return 503, `{"error": "down"}`
		}
		return 0, ""
	})
	f.c.Source = httpsource.New(httpsource.Config{Client: srv.Client()})
	f.put(t, requery(t, "big", srv.URL+"/?segment=vip"))
	when := at("2025-03-01T09:00:00Z")
	if _, err := f.c.Fire(ctx, "tenant-a", "big", when); err == nil || !strings.Contains(err.Error(), "source page 3") {
		t.Fatalf("error %v, want one naming source page 3", err)
	}
	jobs := f.jobs(t)
	if len(jobs) != 1 || jobs[0].Status != store.JobStaging {
		t.Fatalf("jobs after the failure: %+v", jobs)
	}
	parts, err := f.c.Submitter.(*submit.Submitter).ListParts(ctx, jobs[0])
	if err != nil || len(parts) != 2 {
		t.Fatalf("parts after the failure: %v %v", parts, err)
	}
	if cmp, _ := f.store.GetCampaign(ctx, "tenant-a", "big"); !cmp.LastFiredAt.IsZero() {
		t.Errorf("LastFiredAt recorded: %s", cmp.LastFiredAt)
	}
	down = false
	res, err := f.c.Fire(ctx, "tenant-a", "big", when)
	if err != nil || res.Outcome != campaign.Fired || res.Job.ID != jobs[0].ID {
		t.Fatalf("retry: %+v %v", res, err)
	}
	if job := f.plan(t, res.Job.ID); job.Total != 45 {
		t.Fatalf("planned %d items, want 45", job.Total)
	}
	for to, k := range f.tos(t, res.Job.ID) {
		if k != 1 {
			t.Errorf("%s planned %d times", to, k)
		}
	}
}

// A source that answers badly fails the firing with a clear error: no job
// started (at most a staging job, for the retry to go on with),
// LastFiredAt unchanged.
func TestFireRequeryBadSource(t *testing.T) {
	for name, tc := range map[string]struct {
		bad  func(cursor string) (int, string)
		want string
	}{
		"server error on page 2": {func(c string) (int, string) {
			if c == "10" {
				return 503, `{"error": "down"}`
			}
			return 0, ""
		}, "status 503"},
		"not JSON":       {func(string) (int, string) { return 200, `<html>` }, "not {\"recipients\""},
		"wrong type":     {func(string) (int, string) { return 200, `{"recipients": "all", "next_cursor": ""}` }, "recipients"},
		"unknown field":  {func(string) (int, string) { return 200, `{"recipients": [], "next_cursor": "", "more": 1}` }, "unknown field"},
		"no next_cursor": {func(string) (int, string) { return 200, `{"recipients": []}` }, "next_cursor"},
		"recipient without to": {func(string) (int, string) {
			return 200, `{"recipients": [{"account": "acct-a"}], "next_cursor": ""}`
		}, "no account or to"},
		"loops": {func(c string) (int, string) {
			return 200, `{"recipients": [{"account": "acct-a", "to": "u` + c + `", "vars": {"name": "x"}}], "next_cursor": "again"}`
		}, "loops"},
		"unknown account": {func(string) (int, string) {
			return 200, `{"recipients": [{"account": "ghost", "to": "u1", "vars": {"name": "x"}}], "next_cursor": ""}`
		}, "unknown account"},
		"missing variable": {func(string) (int, string) {
			return 200, `{"recipients": [{"account": "acct-a", "to": "u1"}], "next_cursor": ""}`
		}, "name"},
		"too large": {func(string) (int, string) {
			return 200, `{"recipients": [], "next_cursor": "", "pad": "` + strings.Repeat("x", 2000) + `"}`
		}, "larger than"},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			srv, _ := recipientServer(t, 25, 10, tc.bad)
			f.c.Source = httpsource.New(httpsource.Config{Client: srv.Client(), MaxPageBytes: 1024})
			f.put(t, requery(t, "bad", srv.URL+"/?segment=vip"))
			_, err := f.c.Fire(context.Background(), "tenant-a", "bad", at("2025-03-01T09:00:00Z"))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one mentioning %q", err, tc.want)
			}
			for _, j := range f.jobs(t) {
				if j.Status != store.JobStaging {
					t.Errorf("job %s is %s: the firing started it", j.ID, j.Status)
				}
			}
			if cmp, _ := f.store.GetCampaign(context.Background(), "tenant-a", "bad"); !cmp.LastFiredAt.IsZero() {
				t.Errorf("LastFiredAt recorded: %s", cmp.LastFiredAt)
			}
		})
	}
}

// The local scheduler, driven by a fake clock: nothing before the first
// firing, the latest due firing fires once, missed ones are skipped with
// alerts when late, disabled campaigns never fire.
func TestFireDue(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.clock.Set(at("2025-03-01T08:30:00Z"))
	f.put(t, snapshot(t, "hourly", "rate(1 hour)", 300))
	off := snapshot(t, "off", "rate(1 minute)", 0)
	off.Enabled = false
	f.put(t, off)

	fire := func() campaign.DueReport {
		t.Helper()
		rep, err := f.c.FireDue(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	if rep := fire(); rep != (campaign.DueReport{}) {
		t.Fatalf("before the first firing: %+v", rep)
	}
	f.clock.Set(at("2025-03-01T09:00:01Z"))
	if rep := fire(); rep.Fired != 1 {
		t.Fatalf("at 09:00: %+v", rep)
	}
	if rep := fire(); rep != (campaign.DueReport{}) {
		t.Fatalf("the next tick fired again: %+v", rep)
	}
	// Down from 09:30 to 12:10: 10:00 and 11:00 were missed (and are late),
	// 12:00 fires (10 min late > 5 min: skipped too).
	f.clock.Set(at("2025-03-01T12:10:00Z"))
	rep := fire()
	if rep.Fired != 0 || rep.Skipped != 3 {
		t.Fatalf("after downtime: %+v", rep)
	}
	var times []string
	for _, s := range f.skipped(t) {
		times = append(times, s.ScheduledAt.Format("15:04"))
	}
	if strings.Join(times, ",") != "10:00,11:00,12:00" {
		t.Errorf("skipped alerts for %v", times)
	}
	// Up again in time for 13:00.
	f.clock.Set(at("2025-03-01T13:00:30Z"))
	if rep := fire(); rep.Fired != 1 || rep.Skipped != 0 {
		t.Fatalf("at 13:00: %+v", rep)
	}
	jobs := f.jobs(t)
	if len(jobs) != 2 {
		t.Fatalf("%d jobs, want 2 (09:00 and 13:00)", len(jobs))
	}
	for _, j := range jobs {
		if j.Meta[campaign.MetaCampaign] != "hourly" {
			t.Errorf("job of campaign %q", j.Meta[campaign.MetaCampaign])
		}
	}
	due, err := f.c.Due(ctx, at("2025-03-01T15:30:00Z"))
	if err != nil || len(due) != 1 || due[0].MissedTotal != 1 || !due[0].ScheduledAt.Equal(at("2025-03-01T15:00:00Z")) {
		t.Errorf("Due at 15:30: %+v %v", due, err)
	}
}

// The local scheduler reads a campaign's cron in the campaign's time zone:
// 09:00 in New York is 14:00 UTC before the spring change (2025-03-09) and
// 13:00 UTC after it; a campaign without a zone keeps the stack's (Zone).
func TestFireDueInTimeZone(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.c.Zone = time.FixedZone("UTC+8", 8*3600)
	f.clock.Set(at("2025-03-07T20:00:00Z"))
	ny := snapshot(t, "ny", "cron(0 9 * * ? *)", 300)
	ny.Timezone = "America/New_York"
	f.put(t, ny)
	f.put(t, snapshot(t, "stack", "cron(0 9 * * ? *)", 300)) // 01:00 UTC
	newYork, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	fired := map[string]int{}
	for _, step := range []struct{ now, want string }{
		{"2025-03-08T01:00:30Z", "stack"},
		{"2025-03-08T13:59:59Z", ""},
		{"2025-03-08T14:00:30Z", "ny"}, // 09:00 EST
		{"2025-03-09T01:00:30Z", "stack"},
		{"2025-03-09T12:59:59Z", ""},
		{"2025-03-09T13:00:30Z", "ny"}, // 09:00 EDT
		{"2025-03-09T14:00:30Z", ""},
	} {
		f.clock.Set(at(step.now))
		rep, err := f.c.FireDue(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := campaign.DueReport{}
		if step.want != "" {
			want.Fired = 1
			fired[step.want]++
		}
		if rep != want {
			t.Fatalf("at %s: %+v, want %+v (%s)", step.now, rep, want, step.want)
		}
	}
	var local []string
	for _, j := range f.jobs(t) {
		if j.Meta[campaign.MetaCampaign] != "ny" {
			continue
		}
		when, err := time.Parse(time.RFC3339, j.Meta[campaign.MetaScheduledAt])
		if err != nil {
			t.Fatal(err)
		}
		local = append(local, when.In(newYork).Format("2006-01-02 15:04 MST"))
	}
	slices.Sort(local)
	if got := strings.Join(local, ", "); got != "2025-03-08 09:00 EST, 2025-03-09 09:00 EDT" || fired["stack"] != 2 {
		t.Errorf("New York firings %s, stack firings %d", got, fired["stack"])
	}
}

// A failing firing is retried after RetryFailedAfter, not every tick.
func TestFireDueRetriesFailures(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	var calls int
	var mu sync.Mutex
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls++
		mu.Unlock()
		http.Error(w, "down", http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	f.c.Source = httpsource.New(httpsource.Config{Client: srv.Client()})
	f.clock.Set(at("2025-03-01T08:30:00Z"))
	f.put(t, requery(t, "flaky", srv.URL+"/"))
	f.clock.Set(at("2025-03-01T09:00:01Z"))
	if rep, err := f.c.FireDue(ctx); err == nil || rep.Failed != 1 {
		t.Fatalf("first try: %+v %v", rep, err)
	}
	f.clock.Advance(time.Second)
	if rep, err := f.c.FireDue(ctx); err != nil || rep.Failed != 0 {
		t.Fatalf("tick right after a failure: %+v %v", rep, err)
	}
	f.clock.Advance(campaign.RetryFailedAfter)
	if rep, _ := f.c.FireDue(ctx); rep.Failed != 1 || calls != 2 {
		t.Fatalf("retry: %+v, %d calls", rep, calls)
	}
}

func TestValidate(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	ok := snapshot(t, "ok", "rate(1 day)", 0)
	ok.Tenant = "tenant-a"
	if err := campaign.Validate(ctx, f.c.Submitter, ok); err != nil {
		t.Fatalf("valid campaign refused: %v", err)
	}
	rq := requery(t, "rq", "https://crm.example/recipients?segment=vip")
	rq.Tenant = "tenant-a"
	if err := campaign.Validate(ctx, f.c.Submitter, rq); err != nil {
		t.Fatalf("valid requery campaign refused: %v", err)
	}
	with := func(c store.Campaign, edit func(*store.Campaign)) store.Campaign { edit(&c); return c }
	for want, c := range map[string]store.Campaign{
		"id":            with(ok, func(c *store.Campaign) { c.ID = "no spaces" }),
		"schedule":      with(ok, func(c *store.Campaign) { c.Schedule = "cron(0 9 * * * *)" }),
		"timezone":      with(ok, func(c *store.Campaign) { c.Timezone = "Mars/Olympus" }),
		"timezone ":     with(ok, func(c *store.Campaign) { c.Timezone = "Local" }),
		"timezone  ":    with(ok, func(c *store.Campaign) { c.Timezone = "../../etc/passwd" }),
		"mode":          with(ok, func(c *store.Campaign) { c.Mode = "live" }),
		"source":        with(ok, func(c *store.Campaign) { c.Source = "https://x.example/" }),
		"max_delay_sec": with(ok, func(c *store.Campaign) { c.MaxDelaySec = -1 }),
		"request.recipients[0].account": with(ok, func(c *store.Campaign) {
			c.Request = []byte(`{"template": "Hi", "recipients": [{"account": "ghost", "to": "u"}]}`)
		}),
		"request.recipients[0].vars.name": with(ok, func(c *store.Campaign) {
			c.Request = []byte(`{"template": "Hi {{name}}", "recipients": [{"account": "acct-a", "to": "u"}]}`)
		}),
		"request.recipients":      with(ok, func(c *store.Campaign) { c.Request = []byte(`{"template": "Hi", "recipients": []}`) }),
		"source,request.template": with(rq, func(c *store.Campaign) { c.Source = "http://plain.example/"; c.Request = []byte(`{"template": ""}`) }),
		"request.recipients,request.budget": with(rq, func(c *store.Campaign) {
			c.Request = []byte(`{"template": "Hi", "budget": -1, "recipients": [{"account": "acct-a", "to": "u"}]}`)
		}),
		"source ":  with(rq, func(c *store.Campaign) { c.Source = "https://crm.example/?cursor=5" }),
		"source  ": with(rq, func(c *store.Campaign) { c.Source = "" }),
	} {
		err := campaign.Validate(ctx, f.c.Submitter, c)
		var ve *submit.ValidationError
		if !errors.As(err, &ve) {
			t.Errorf("%s: %v, want a validation error", want, err)
			continue
		}
		var got []string
		for _, e := range ve.Errors {
			got = append(got, e.Field)
		}
		if strings.Join(got, ",") != strings.TrimSpace(want) {
			t.Errorf("fields %v, want %s (%v)", got, want, err)
		}
	}
}

// TestFireCarriesTheRequestsMetadata: DESIGN says campaigns take
// "metadata"; the job a firing makes, snapshot or requery, carries the
// metadata of the campaign's request as given (the campaign's own meta is
// kept apart), as the store holds it.
func TestFireCarriesTheRequestsMetadata(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	md := map[string]string{"order": "A-1", "team": "growth"}
	snap := snapshot(t, "weekly", "cron(0 9 ? * SAT *)", 900)
	req, err := campaign.DecodeRequest(snap.Request)
	if err != nil {
		t.Fatal(err)
	}
	req.Metadata = md
	snap.Request = requestJSON(t, req)
	f.put(t, snap)
	srv, _ := recipientServer(t, 3, 10, nil)
	f.c.Source = httpsource.New(httpsource.Config{Client: srv.Client()})
	rq := requery(t, "vips", srv.URL+"/recipients?segment=vip")
	rq.Request = requestJSON(t, submit.Request{Template: "Hi {{name}}", Budget: 100, Metadata: md})
	f.put(t, rq)
	when := at("2025-03-01T09:00:00Z")
	for _, id := range []string{"weekly", "vips"} {
		res, err := f.c.Fire(ctx, "tenant-a", id, when)
		if err != nil || res.Outcome != campaign.Fired {
			t.Fatalf("fire %s: %+v %v", id, res, err)
		}
		v, err := f.store.GetJob(ctx, res.Job.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(v.Job.Metadata, md) {
			t.Errorf("campaign %s: the job's metadata is %v, want %v", id, v.Job.Metadata, md)
		}
		if v.Job.Meta[campaign.MetaCampaign] != id {
			t.Errorf("campaign %s: the job's meta is %v", id, v.Job.Meta)
		}
	}
}
