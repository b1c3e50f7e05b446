package webhook_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/alert"
	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/store/sqlitestore"
	"github.com/qunfa/qunfa/internal/webhook"
)

var t0 = time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC)

func TestSignMatchesAnIndependentHMAC(t *testing.T) {
	// Computed outside Go: HMAC-SHA256("whsec_test", `1700000000.{"id":"evt_1"}`).
	const want = "t=1700000000,v1=c89214b5b5da833daed6f0b8c5bb6bd58cea9022bd80ccc78230f3942d632925"
	if got := webhook.Sign("whsec_test", time.Unix(1700000000, 0), []byte(`{"id":"evt_1"}`)); got != want {
		t.Fatalf("Sign = %s, want %s", got, want)
	}
}

func TestVerify(t *testing.T) {
	body := []byte(`{"id":"evt_1","type":"job.finished"}`)
	sig := webhook.Sign("s3cret", t0, body)
	for name, tc := range map[string]struct {
		header, secret string
		body           []byte
		now            time.Time
		want           error
	}{
		"valid":           {sig, "s3cret", body, t0.Add(time.Minute), nil},
		"valid, rotated":  {sig + ",v1=00ff", "s3cret", body, t0, nil},
		"other secret":    {sig, "other", body, t0, webhook.ErrBadSignature},
		"body changed":    {sig, "s3cret", []byte(`{"id":"evt_2","type":"job.finished"}`), t0, webhook.ErrBadSignature},
		"replayed later":  {sig, "s3cret", body, t0.Add(6 * time.Minute), webhook.ErrStale},
		"from the future": {sig, "s3cret", body, t0.Add(-6 * time.Minute), webhook.ErrStale},
		"no timestamp":    {"v1=abc", "s3cret", body, t0, webhook.ErrMalformed},
		"no signature":    {"t=1", "s3cret", body, t0, webhook.ErrMalformed},
		"garbage":         {"nonsense", "s3cret", body, t0, webhook.ErrMalformed},
	} {
		t.Run(name, func(t *testing.T) {
			err := webhook.Verify(tc.header, tc.secret, tc.body, tc.now, webhook.DefaultTolerance)
			if !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
				t.Fatalf("Verify = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestRetryWait(t *testing.T) {
	r := webhook.Retry{Base: 30 * time.Second, Cap: 4 * time.Hour, MaxAttempts: 15}
	for _, tc := range []struct {
		attempt int
		j       float64
		want    time.Duration
	}{
		{1, 0, 15 * time.Second},
		{1, 0.999999, 30 * time.Second},
		{2, 0, 30 * time.Second},
		{3, 0.5, 90 * time.Second},
		{10, 0, 2 * time.Hour},   // 30 s · 2^9 = 4 h 16 min, capped at 4 h
		{100, 0, 2 * time.Hour},  // no overflow
		{0, 0, 15 * time.Second}, // treated as the first
	} {
		got := r.Wait(tc.attempt, tc.j)
		if d := got - tc.want; d < -time.Millisecond || d > time.Millisecond {
			t.Errorf("Wait(%d, %v) = %s, want %s", tc.attempt, tc.j, got, tc.want)
		}
	}
	var total time.Duration
	for a := 1; a < webhook.DefaultRetry.MaxAttempts; a++ {
		total += webhook.DefaultRetry.Wait(a, 0.999999)
	}
	if total < 20*time.Hour || total > 25*time.Hour {
		t.Errorf("the default policy gives up after at most %s, want about a day", total)
	}
}

// fixture is the core on the embedded store, a fake clock and a scripted
// endpoint.
type fixture struct {
	st    *sqlitestore.Store
	clk   *clock.Fake
	pub   *webhook.Publisher
	del   *webhook.Deliverer
	hooks *endpoint
}

// endpoint is a fake Poster: it answers each request with the next scripted
// status (an error for -1), then 200.
type endpoint struct {
	mu     sync.Mutex
	script []int
	got    []webhook.Request
}

func (e *endpoint) Post(_ context.Context, r webhook.Request) (webhook.Answer, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.got = append(e.got, r)
	if len(e.script) == 0 {
		return webhook.Answer{Status: 200}, nil
	}
	s := e.script[0]
	e.script = e.script[1:]
	if s < 0 {
		return webhook.Answer{}, errors.New("connection refused")
	}
	return webhook.Answer{Status: s}, nil
}

func (e *endpoint) requests() []webhook.Request {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]webhook.Request(nil), e.got...)
}

func newFixture(t *testing.T, script ...int) *fixture {
	t.Helper()
	st, err := sqlitestore.Open(t.Context(), filepath.Join(t.TempDir(), "store.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	clk := clock.NewFake(t0)
	ep := &endpoint{script: script}
	return &fixture{
		st: st, clk: clk, hooks: ep,
		pub: &webhook.Publisher{Store: st, Clock: clk},
		del: &webhook.Deliverer{Store: st, Poster: ep, Clock: clk, Rand: func() float64 { return 0 },
			Retry: webhook.Retry{Base: 10 * time.Second, Cap: time.Minute, MaxAttempts: 4}},
	}
}

func (f *fixture) addWebhook(t *testing.T, tenant, id string, events ...webhook.EventType) {
	t.Helper()
	var names []string
	for _, e := range events {
		names = append(names, string(e))
	}
	if err := f.st.CreateWebhook(t.Context(), store.Webhook{Tenant: tenant, ID: id, URL: "https://" + id + ".example/hook",
		Events: names, Secret: "secret-" + id, CreatedAt: t0}); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) run(t *testing.T) webhook.RunResult {
	t.Helper()
	res, err := f.del.RunDue(t.Context())
	if err != nil {
		t.Fatalf("RunDue: %v", err)
	}
	return res
}

func (f *fixture) deliveries(t *testing.T, tenant, hook string) []store.Delivery {
	t.Helper()
	ds, err := f.st.ListDeliveries(t.Context(), store.ListDeliveriesParams{Tenant: tenant, WebhookID: hook, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

// designSignature is the Qunfa-Signature value DESIGN specifies for body
// sent at t, computed here without the package's signing code.
func designSignature(secret string, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts + "." + string(body)))
	return "t=" + ts + ",v1=" + hex.EncodeToString(m.Sum(nil))
}

func finished(job string) alert.Event {
	return alert.Event{Type: alert.JobFinished, Tenant: "acme", Time: t0,
		Detail: alert.JobFinishedDetail{JobID: job, Name: "n", Status: "completed", Counts: alert.Counts{Confirmed: 2}}}
}

func TestPublisherStoresOneDeliveryPerSubscribedWebhook(t *testing.T) {
	f := newFixture(t)
	f.addWebhook(t, "acme", "wh-all", webhook.EventTypes()...)
	f.addWebhook(t, "acme", "wh-paused", webhook.JobPaused)
	f.addWebhook(t, "other", "wh-other", webhook.EventTypes()...)
	err := f.pub.Publish(t.Context(), finished("j1"),
		alert.Event{Type: alert.BreakerOpened, Tenant: "acme", Time: t0, Detail: alert.BreakerDetail{Account: "a"}})
	if err != nil {
		t.Fatal(err)
	}
	all := f.deliveries(t, "acme", "wh-all")
	if len(all) != 1 || all[0].EventType != "job.finished" || all[0].Status != store.DeliveryPending || !all[0].NextAttemptAt.Equal(t0) {
		t.Fatalf("deliveries of wh-all = %+v, want one pending job.finished due now", all)
	}
	var ev webhook.Event
	if err := json.Unmarshal(all[0].Body, &ev); err != nil {
		t.Fatal(err)
	}
	var data map[string]any
	if err := json.Unmarshal(ev.Data, &data); err != nil {
		t.Fatal(err)
	}
	if ev.ID != all[0].EventID || ev.Type != webhook.JobFinished || !ev.CreatedAt.Equal(t0) || data["job_id"] != "j1" || data["status"] != "completed" {
		t.Fatalf("event = %+v, data %v", ev, data)
	}
	if _, ok := data["tenant"]; ok {
		t.Errorf("the event data carries the tenant: %v", data)
	}
	if ds := f.deliveries(t, "acme", "wh-paused"); len(ds) != 0 {
		t.Errorf("a webhook not subscribed to job.finished got %d deliveries", len(ds))
	}
	if ds := f.deliveries(t, "other", "wh-other"); len(ds) != 0 {
		t.Errorf("another tenant's webhook got %d deliveries", len(ds))
	}
}

func TestPublisherSameSourceTwiceIsOneDelivery(t *testing.T) {
	f := newFixture(t)
	f.addWebhook(t, "acme", "wh", webhook.JobFinished)
	src, err := webhook.SourceOf(finished("j1"))
	if err != nil {
		t.Fatal(err)
	}
	src.ID = "eventbridge-id-1"
	for range 2 {
		if _, err := f.pub.Deliver(t.Context(), src); err != nil {
			t.Fatal(err)
		}
	}
	if ds := f.deliveries(t, "acme", "wh"); len(ds) != 1 || ds[0].EventID != "evt_eventbridge-id-1" {
		t.Fatalf("deliveries = %+v, want one with event id evt_eventbridge-id-1", ds)
	}
}

func TestDelivererRetriesWithBackoffThenDelivers(t *testing.T) {
	f := newFixture(t, 500, -1, 204)
	f.addWebhook(t, "acme", "wh", webhook.JobFinished)
	if err := f.pub.Publish(t.Context(), finished("j1")); err != nil {
		t.Fatal(err)
	}
	if res := f.run(t); res != (webhook.RunResult{Retried: 1}) {
		t.Fatalf("first run = %+v, want one retry", res)
	}
	d := f.deliveries(t, "acme", "wh")[0]
	if d.Attempts != 1 || d.LastStatus != 500 || d.LastError != "HTTP 500" || !d.NextAttemptAt.Equal(t0.Add(5*time.Second)) {
		t.Fatalf("after a 500: %+v, want attempt 1, next in 5 s (half of the 10 s step)", d)
	}
	// Not due yet: nothing is posted.
	f.clk.Advance(4 * time.Second)
	if res := f.run(t); res != (webhook.RunResult{}) || len(f.hooks.requests()) != 1 {
		t.Fatalf("before the backoff ended: %+v, %d requests", res, len(f.hooks.requests()))
	}
	f.clk.Advance(time.Second)
	if res := f.run(t); res != (webhook.RunResult{Retried: 1}) {
		t.Fatalf("second run = %+v", res)
	}
	d = f.deliveries(t, "acme", "wh")[0]
	if d.Attempts != 2 || d.LastStatus != 0 || d.LastError != "connection refused" || !d.NextAttemptAt.Equal(t0.Add(15*time.Second)) {
		t.Fatalf("after no answer: %+v, want attempt 2, next 10 s later", d)
	}
	f.clk.Advance(10 * time.Second)
	if res := f.run(t); res != (webhook.RunResult{Delivered: 1}) {
		t.Fatalf("third run = %+v", res)
	}
	d = f.deliveries(t, "acme", "wh")[0]
	if d.Status != store.DeliveryDelivered || d.Attempts != 3 || d.LastStatus != 204 || !d.DeliveredAt.Equal(t0.Add(15*time.Second)) {
		t.Fatalf("after a 204: %+v", d)
	}
	reqs := f.hooks.requests()
	if len(reqs) != 3 {
		t.Fatalf("%d requests, want 3", len(reqs))
	}
	for i, r := range reqs {
		if string(r.Body) != string(reqs[0].Body) || r.URL != "https://wh.example/hook" || r.Header.Get("Qunfa-Event-Id") != d.EventID {
			t.Errorf("attempt %d differs: %s %s %v", i+1, r.URL, r.Body, r.Header)
		}
		at := []time.Duration{0, 5 * time.Second, 15 * time.Second}[i]
		// DESIGN: header Qunfa-Signature: t=<unix seconds>,v1=<hex
		// HMAC-SHA256 of "<t>.<body>" with the secret>.
		sig := r.Header.Get("Qunfa-Signature")
		if want := designSignature("secret-wh", t0.Add(at), r.Body); sig != want {
			t.Errorf("attempt %d: Qunfa-Signature %q, want %q", i+1, sig, want)
		}
		if err := webhook.Verify(sig, "secret-wh", r.Body, t0.Add(at), time.Second); err != nil {
			t.Errorf("attempt %d: signature: %v", i+1, err)
		}
	}
	f.clk.Advance(time.Hour)
	if res := f.run(t); res != (webhook.RunResult{}) {
		t.Fatalf("a delivered delivery was tried again: %+v", res)
	}
}

func TestDelivererGivesUpAfterMaxAttempts(t *testing.T) {
	f := newFixture(t, 500, 500, 500, 500)
	f.addWebhook(t, "acme", "wh", webhook.JobFinished)
	if err := f.pub.Publish(t.Context(), finished("j1")); err != nil {
		t.Fatal(err)
	}
	var total webhook.RunResult
	for range 10 {
		res := f.run(t)
		total.Delivered += res.Delivered
		total.Retried += res.Retried
		total.Failed += res.Failed
		f.clk.Advance(time.Minute)
	}
	d := f.deliveries(t, "acme", "wh")[0]
	if total != (webhook.RunResult{Retried: 3, Failed: 1}) || d.Status != store.DeliveryFailed || d.Attempts != 4 || len(f.hooks.requests()) != 4 {
		t.Fatalf("after 10 rounds: %+v, delivery %+v, %d requests; want failed after 4 attempts", total, d, len(f.hooks.requests()))
	}
	// Redelivery: the same event, fresh attempts, due now.
	if _, err := webhook.Redeliver(t.Context(), f.st, d, f.clk.Now()); err != nil {
		t.Fatal(err)
	}
	if res := f.run(t); res != (webhook.RunResult{Delivered: 1}) {
		t.Fatalf("after redeliver: %+v", res)
	}
	reqs := f.hooks.requests()
	if string(reqs[4].Body) != string(reqs[0].Body) {
		t.Error("the redelivery sent another body")
	}
}

func TestDelivererKeepsOrderPerWebhook(t *testing.T) {
	f := newFixture(t, 503)
	f.addWebhook(t, "acme", "wh", webhook.JobFinished, webhook.JobStarted)
	started := alert.Event{Type: alert.JobStarted, Tenant: "acme", Time: t0, Detail: alert.JobStartedDetail{JobID: "j1"}}
	if err := f.pub.Publish(t.Context(), started); err != nil {
		t.Fatal(err)
	}
	f.clk.Advance(time.Millisecond)
	done := finished("j1")
	done.Time = f.clk.Now()
	if err := f.pub.Publish(t.Context(), done); err != nil {
		t.Fatal(err)
	}
	// job.started fails; job.finished waits behind it.
	if res := f.run(t); res != (webhook.RunResult{Retried: 1}) || len(f.hooks.requests()) != 1 {
		t.Fatalf("first run: %+v, %d requests", res, len(f.hooks.requests()))
	}
	// An event published while the first is being retried waits too.
	f.clk.Advance(time.Second)
	late := finished("j2")
	late.Time = f.clk.Now()
	if err := f.pub.Publish(t.Context(), late); err != nil {
		t.Fatal(err)
	}
	if res := f.run(t); res != (webhook.RunResult{}) {
		t.Fatalf("a later event overtook the one being retried: %+v", res)
	}
	f.clk.Advance(time.Minute)
	if res := f.run(t); res != (webhook.RunResult{Delivered: 3}) {
		t.Fatalf("after the backoff: %+v", res)
	}
	var types []string
	for _, r := range f.hooks.requests() {
		types = append(types, r.Header.Get("Qunfa-Event-Type"))
	}
	want := []string{"job.started", "job.started", "job.finished", "job.finished"}
	if len(types) != len(want) {
		t.Fatalf("requests %v, want %v", types, want)
	}
	for i := range want {
		if types[i] != want[i] {
			t.Fatalf("requests %v, want %v", types, want)
		}
	}
}

func TestDeliveryToADeletedWebhookFails(t *testing.T) {
	f := newFixture(t)
	f.addWebhook(t, "acme", "wh", webhook.JobFinished)
	if err := f.pub.Publish(t.Context(), finished("j1")); err != nil {
		t.Fatal(err)
	}
	if err := f.st.DeleteWebhook(t.Context(), "acme", "wh"); err != nil {
		t.Fatal(err)
	}
	if res := f.run(t); res != (webhook.RunResult{Failed: 1}) || len(f.hooks.requests()) != 0 {
		t.Fatalf("run = %+v, %d requests; want failed, nothing posted", res, len(f.hooks.requests()))
	}
}

func TestTwoDeliverersNeverPostTheSameAttemptTwice(t *testing.T) {
	f := newFixture(t)
	f.addWebhook(t, "acme", "wh", webhook.JobFinished)
	for i := range 20 {
		e := finished("j" + string(rune('a'+i)))
		e.Time = t0.Add(time.Duration(i) * time.Millisecond)
		if err := f.pub.Publish(t.Context(), e); err != nil {
			t.Fatal(err)
		}
	}
	other := *f.del
	var wg sync.WaitGroup
	for _, d := range []*webhook.Deliverer{f.del, &other} {
		wg.Go(func() {
			if _, err := d.RunDue(t.Context()); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	seen := map[string]int{}
	for _, r := range f.hooks.requests() {
		seen[r.Header.Get("Qunfa-Event-Id")]++
	}
	if len(seen) != 20 {
		t.Fatalf("%d events posted, want 20", len(seen))
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("event %s posted %d times", id, n)
		}
	}
}

// TestEventDuringAnAttemptInFlightIsNotHeldBack: a delivery being posted is
// claimed (its next attempt pushed out by the claim's lease); an event
// published meanwhile must be tried at the next round, not when that lease
// would end (job.finished arrived two minutes late behind an in-flight
// items.outcomes).
func TestEventDuringAnAttemptInFlightIsNotHeldBack(t *testing.T) {
	f := newFixture(t)
	f.addWebhook(t, "acme", "wh", webhook.JobFinished, webhook.JobStarted)
	started := alert.Event{Type: alert.JobStarted, Tenant: "acme", Time: t0, Detail: alert.JobStartedDetail{JobID: "j1"}}
	if err := f.pub.Publish(t.Context(), started); err != nil {
		t.Fatal(err)
	}
	// The deliverer claims it, as attempt does before posting.
	ds := f.deliveries(t, "acme", "wh")
	claim := ds[0]
	claim.NextAttemptAt = f.clk.Now().Add(2 * time.Minute)
	if _, err := f.st.UpdateDelivery(t.Context(), claim); err != nil {
		t.Fatal(err)
	}
	f.clk.Advance(time.Millisecond)
	done := finished("j1")
	done.Time = f.clk.Now()
	if err := f.pub.Publish(t.Context(), done); err != nil {
		t.Fatal(err)
	}
	for _, d := range f.deliveries(t, "acme", "wh") {
		if d.EventType == string(webhook.JobFinished) && d.NextAttemptAt.After(f.clk.Now()) {
			t.Fatalf("job.finished waits until %v behind an attempt in flight (now %v)", d.NextAttemptAt, f.clk.Now())
		}
	}
}

// TestCanaryAndReviewAlertsAreDeliveredAsDesignEvents: DESIGN names the
// event types job.canary_ready and job.items_need_review; a webhook that
// subscribes to them (by those names, as a tenant does) gets the
// CanaryReady and ItemsNeedReview alerts as deliveries of those types,
// posted with them, and a webhook that does not subscribe gets none.
func TestCanaryAndReviewAlertsAreDeliveredAsDesignEvents(t *testing.T) {
	f := newFixture(t)
	f.addWebhook(t, "acme", "wh-ops", "job.canary_ready", "job.items_need_review")
	f.addWebhook(t, "acme", "wh-done", "job.started", "job.finished")
	err := f.pub.Publish(t.Context(),
		alert.Event{Type: alert.CanaryReady, Tenant: "acme", Time: t0,
			Detail: alert.CanaryReadyDetail{JobID: "j1", Canary: 10, Confirmed: 9, Failed: 1}},
		alert.Event{Type: alert.ItemsNeedReview, Tenant: "acme", Time: t0.Add(time.Millisecond),
			Detail: alert.ItemsNeedReviewDetail{JobID: "j2", Count: 3}})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]map[string]any{} // event type → the event's data
	for _, d := range f.deliveries(t, "acme", "wh-ops") {
		var body struct {
			Type string         `json:"type"`
			Data map[string]any `json:"data"`
		}
		if err := json.Unmarshal(d.Body, &body); err != nil {
			t.Fatal(err)
		}
		if body.Type != d.EventType {
			t.Errorf("delivery %s: stored as %q, body says %q", d.ID, d.EventType, body.Type)
		}
		got[d.EventType] = body.Data
	}
	if len(got) != 2 {
		t.Fatalf("wh-ops got deliveries of %v, want job.canary_ready and job.items_need_review", got)
	}
	if c := got["job.canary_ready"]; c == nil || c["job_id"] != "j1" || c["canary"] != 10.0 || c["confirmed"] != 9.0 || c["failed"] != 1.0 {
		t.Errorf("job.canary_ready data = %v, want job j1, canary 10, confirmed 9, failed 1", c)
	}
	if r := got["job.items_need_review"]; r == nil || r["job_id"] != "j2" || r["count"] != 3.0 {
		t.Errorf("job.items_need_review data = %v, want job j2, count 3", r)
	}
	if ds := f.deliveries(t, "acme", "wh-done"); len(ds) != 0 {
		t.Errorf("a webhook not subscribed to job.canary_ready or job.items_need_review got %d deliveries", len(ds))
	}
	if res := f.run(t); res != (webhook.RunResult{Delivered: 2}) {
		t.Fatalf("run = %+v, want two delivered", res)
	}
	var posted []string
	for _, r := range f.hooks.requests() {
		if r.URL != "https://wh-ops.example/hook" {
			t.Errorf("posted to %s", r.URL)
		}
		posted = append(posted, r.Header.Get("Qunfa-Event-Type"))
	}
	if want := []string{"job.canary_ready", "job.items_need_review"}; !slices.Equal(posted, want) {
		t.Errorf("posted event types %v, want %v", posted, want)
	}
}

// TestDeliveryBodyIsTheDesignEnvelope: DESIGN says a delivery is a POST of
// {"id", "type", "created_at", "data": {...}}. The stored and the posted
// body have exactly those fields, created_at in RFC 3339 (the alert's
// time) and data an object.
func TestDeliveryBodyIsTheDesignEnvelope(t *testing.T) {
	f := newFixture(t)
	f.addWebhook(t, "acme", "wh", "job.finished")
	if err := f.pub.Publish(t.Context(), finished("j1")); err != nil {
		t.Fatal(err)
	}
	ds := f.deliveries(t, "acme", "wh")
	if len(ds) != 1 {
		t.Fatalf("%d deliveries, want 1", len(ds))
	}
	var env map[string]json.RawMessage
	if err := json.Unmarshal(ds[0].Body, &env); err != nil {
		t.Fatalf("body %s: %v", ds[0].Body, err)
	}
	var keys []string
	for k := range env {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if want := []string{"created_at", "data", "id", "type"}; !slices.Equal(keys, want) {
		t.Fatalf("envelope fields %v, want %v", keys, want)
	}
	var id, typ, created string
	var data map[string]any
	for k, v := range map[string]any{"id": &id, "type": &typ, "created_at": &created, "data": &data} {
		if err := json.Unmarshal(env[k], v); err != nil {
			t.Errorf("%s = %s: %v", k, env[k], err)
		}
	}
	if id == "" || id != ds[0].EventID || typ != "job.finished" || data["job_id"] != "j1" {
		t.Errorf("id %q (event %q), type %q, data %v", id, ds[0].EventID, typ, data)
	}
	if at, err := time.Parse(time.RFC3339, created); err != nil || !at.Equal(t0) {
		t.Errorf("created_at %q: %v, want RFC 3339 of %s", created, err, t0.Format(time.RFC3339))
	}
	f.run(t)
	if reqs := f.hooks.requests(); len(reqs) != 1 || string(reqs[0].Body) != string(ds[0].Body) {
		t.Errorf("posted %d requests; the body posted differs from the stored envelope", len(reqs))
	}
}
