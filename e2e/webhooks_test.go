package e2e

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/api"
	"github.com/qunfa/qunfa/internal/webhook"
)

// hookReceiver is a tenant's webhook endpoint on 127.0.0.1: it answers 500
// to its first failFirst requests, then 204, and records every request.
type hookReceiver struct {
	URL       string
	secret    string
	failFirst int

	mu       sync.Mutex
	requests []hookRequest
}

type hookRequest struct {
	at        time.Time
	body      []byte
	signature string
	answered  int
}

func startReceiver(t *testing.T, secret string, failFirst int) *hookReceiver {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &hookReceiver{URL: "http://" + ln.Addr().String() + "/qunfa-events", secret: secret, failFirst: failFirst}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return h
}

func (h *hookReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	h.mu.Lock()
	status := http.StatusNoContent
	if len(h.requests) < h.failFirst {
		status = http.StatusInternalServerError
	}
	h.requests = append(h.requests, hookRequest{at: time.Now(), body: body, signature: r.Header.Get(webhook.SignatureHeader), answered: status})
	h.mu.Unlock()
	w.WriteHeader(status)
}

func (h *hookReceiver) received() []hookRequest {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.requests)
}

// outcomesData is the data of an items.outcomes event.
type outcomesData struct {
	JobID string `json:"job_id"`
	Items []struct {
		Seq      int64  `json:"seq"`
		To       string `json:"to"`
		Status   string `json:"status"`
		Category string `json:"category"`
		Code     string `json:"code"`
	} `json:"items"`
}

// TestWebhooksDeliverJobEvents registers a webhook receiver on 127.0.0.1
// (qunfa dev --allow-private-urls) that fails its first tries, runs a job
// with permanent failures, a pause and a finish, and checks that every
// expected event arrived signed, in order, exactly once after dedupe by
// event id, and that the per-recipient outcomes cover every recipient
// exactly once with the right status.
func TestWebhooksDeliverJobEvents(t *testing.T) {
	t.Parallel()
	const secret = "e2e-webhook-secret-0123456789"
	recv := startReceiver(t, secret, 3)
	m := startMock(t)
	d := startDev(t, m, devOptions{Extra: []string{"--allow-private-urls", "--webhook-retry-base", "200ms"}})

	var hook api.Webhook
	d.decode(d.call("POST", "/v1/webhooks", nil, mustJSON(t, map[string]any{
		"url": recv.URL, "secret": secret,
		"events": []string{"job.started", "job.paused", "job.finished", "job.dead_letters", "job.items_need_review", "items.outcomes"},
	})), http.StatusCreated, &hook)

	const n = 60
	acct := "hook-a"
	rcs := recipientsFor(acct, n)
	invalid := []string{rcs[3].To, rcs[17].To, rcs[42].To}
	m.setAccount(acct, map[string]any{"rate_per_sec": 20, "burst": 5, "invalid_to_ids": invalid})
	d.putAccount(acct, map[string]any{"rate_per_sec": 20, "burst": 5, "online_reserve_per_sec": 0, "max_recipients_per_call": 1})
	job := d.submit("webhooks-1", jobRequest{Name: "hooks", Template: testTemplate, Recipients: rcs})

	// Pause once some items are done, then resume.
	if !poll(20*time.Second, 20*time.Millisecond, func() bool { j := d.job(job.ID); return j.Counts.Confirmed >= 10 }) {
		t.Fatalf("the job made no progress: %+v", d.job(job.ID))
	}
	if j := d.jobCommand(job.ID, "pause"); j.Status != "paused" {
		t.Fatalf("pause: %s", j.Status)
	}
	// Resume once the receiver has job.paused.
	pausedArrived := poll(20*time.Second, 20*time.Millisecond, func() bool {
		for _, r := range recv.received() {
			var ev webhook.Event
			if json.Unmarshal(r.body, &ev) == nil && ev.Type == webhook.JobPaused && r.answered < 300 {
				return true
			}
		}
		return false
	})
	if !pausedArrived {
		t.Fatal("job.paused did not arrive while the job was paused")
	}
	if j := d.job(job.ID); j.Status != "paused" {
		t.Fatalf("the job is %s before resume", j.Status)
	}
	d.jobCommand(job.ID, "resume")
	final := d.waitFinal(job.ID, 60*time.Second)
	if final.Status != "partial" || final.Counts.Failed != int64(len(invalid)) {
		t.Fatalf("job ended %s with counts %+v, want partial with %d failed", final.Status, final.Counts, len(invalid))
	}

	// Wait until job.finished (and dead letters) arrived.
	var events []webhook.Event
	deduped := func() ([]webhook.Event, int) {
		seen := map[string]bool{}
		var out []webhook.Event
		dup := 0
		for _, r := range recv.received() {
			if r.answered >= 300 {
				continue
			}
			var ev webhook.Event
			if err := json.Unmarshal(r.body, &ev); err != nil {
				t.Fatalf("a delivery is not an event: %v: %s", err, r.body)
			}
			if seen[ev.ID] {
				dup++
				continue
			}
			seen[ev.ID] = true
			out = append(out, ev)
		}
		return out, dup
	}
	// job.dead_letters and job.finished come from the same finishing step
	// (sender/finish.go, one timestamp) and may arrive in either order, a
	// delivery round apart (seen on the aws backend):
	// wait for both.
	has := func(typ webhook.EventType) bool {
		return slices.ContainsFunc(events, func(e webhook.Event) bool { return e.Type == typ })
	}
	ok := poll(30*time.Second, 50*time.Millisecond, func() bool {
		events, _ = deduped()
		return has(webhook.JobDeadLetters) && has(webhook.JobFinished)
	})
	if !ok {
		t.Fatalf("job.dead_letters and job.finished did not both arrive; got %d events", len(events))
	}

	// Every request was signed with the secret, within the tolerance of
	// its arrival; the failed first tries carried the same event ids.
	reqs := recv.received()
	if len(reqs) < 4 || reqs[0].answered != 500 {
		t.Fatalf("the receiver saw %d requests; the first tries must have failed", len(reqs))
	}
	firstTry := map[string]bool{}
	for i, r := range reqs {
		if err := webhook.Verify(r.signature, secret, r.body, r.at, webhook.DefaultTolerance); err != nil {
			t.Errorf("request %d: signature: %v (%s)", i, err, r.signature)
		}
		if err := webhook.Verify(r.signature, "another-secret-0123456789", r.body, r.at, webhook.DefaultTolerance); err == nil {
			t.Errorf("request %d verifies with another secret", i)
		}
		var ev webhook.Event
		_ = json.Unmarshal(r.body, &ev)
		if r.answered == 500 {
			firstTry[ev.ID] = true
		}
	}
	for id := range firstTry {
		if !slices.ContainsFunc(events, func(e webhook.Event) bool { return e.ID == id }) {
			t.Errorf("event %s was refused by the receiver and never delivered again", id)
		}
	}

	// In order: arrival order is creation order; started first, paused
	// before finished, every outcome before finished.
	var types []webhook.EventType
	for i, ev := range events {
		types = append(types, ev.Type)
		if i > 0 && ev.CreatedAt.Before(events[i-1].CreatedAt) {
			t.Errorf("event %d (%s, %s) arrived after a later one (%s, %s)", i, ev.Type, ev.CreatedAt, events[i-1].Type, events[i-1].CreatedAt)
		}
	}
	count := func(typ webhook.EventType) int {
		c := 0
		for _, x := range types {
			if x == typ {
				c++
			}
		}
		return c
	}
	for typ, want := range map[webhook.EventType]int{webhook.JobStarted: 1, webhook.JobPaused: 1, webhook.JobFinished: 1, webhook.JobDeadLetters: 1} {
		if got := count(typ); got != want {
			t.Errorf("%d %s events, want %d (events: %v)", got, typ, want, types)
		}
	}
	if types[0] != webhook.JobStarted {
		t.Errorf("the first event is %s, want job.started (events: %v)", types[0], types)
	}
	finishedAt := slices.Index(types, webhook.JobFinished)
	if p := slices.Index(types, webhook.JobPaused); p > finishedAt {
		t.Errorf("job.paused after job.finished: %v", types)
	}
	if last := slices.Index(types, webhook.ItemsOutcomes); last < 0 || slices.Contains(types[finishedAt:], webhook.ItemsOutcomes) {
		t.Errorf("items.outcomes missing or after job.finished: %v", types)
	}

	// Event data.
	for _, ev := range events {
		var data map[string]any
		if err := json.Unmarshal(ev.Data, &data); err != nil {
			t.Fatalf("%s data: %v", ev.Type, err)
		}
		if data["job_id"] != job.ID {
			t.Errorf("%s: job_id %v, want %s", ev.Type, data["job_id"], job.ID)
		}
		switch ev.Type {
		case webhook.JobPaused:
			if data["reason"] != "manual" {
				t.Errorf("job.paused reason %v, want manual", data["reason"])
			}
		case webhook.JobFinished:
			if data["status"] != "partial" {
				t.Errorf("job.finished status %v, want partial", data["status"])
			}
		}
	}

	// Outcomes: every recipient exactly once, failed exactly the invalid ones.
	seqs := map[int64]string{}
	for _, ev := range events {
		if ev.Type != webhook.ItemsOutcomes {
			continue
		}
		var o outcomesData
		if err := json.Unmarshal(ev.Data, &o); err != nil {
			t.Fatal(err)
		}
		for _, it := range o.Items {
			if _, dup := seqs[it.Seq]; dup {
				t.Errorf("seq %d reported twice", it.Seq)
			}
			seqs[it.Seq] = it.Status
			wantFailed := slices.Contains(invalid, it.To)
			if wantFailed != (it.Status == "failed") || (wantFailed && (it.Category != "permanent" || it.Code == "")) {
				t.Errorf("outcome of %s: %+v", it.To, it)
			}
		}
	}
	if len(seqs) != n {
		t.Errorf("outcomes for %d recipients, want %d", len(seqs), n)
	}

	// The delivery log shows them delivered, the refused ones with their attempts.
	var log api.WebhookDeliveryList
	d.decode(d.call("GET", "/v1/webhooks/"+hook.ID+"/deliveries?limit=100", nil, nil), http.StatusOK, &log)
	retried := 0
	for _, dl := range log.Deliveries {
		if dl.Status != "delivered" || dl.DeliveredAt == nil {
			t.Errorf("delivery %s: %s", dl.ID, dl.Status)
		}
		if dl.Attempts > 1 {
			retried++
		}
	}
	if len(log.Deliveries) != len(events) || retried == 0 {
		t.Errorf("delivery log: %d deliveries (%d retried), want %d with some retried", len(log.Deliveries), retried, len(events))
	}
}
