package e2e

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/api"
	"github.com/qunfa/qunfa/internal/webhook"
)

// TestOutcomesWebhookSurvivesKill SIGKILLs `qunfa dev` twice while a job
// with an items.outcomes webhook sends, restarting it on the same data
// directory: outcomes recorded but still held for batching when the
// process died are published again by the next turn of their shard (or
// the reconciler), so every recipient's outcome reaches the receiver at
// least once (deduped by job id and seq), and the mock's log has every
// recipient exactly once.
func TestOutcomesWebhookSurvivesKill(t *testing.T) { testOutcomesWebhookSurvivesKill(t, "") }

// TestOutcomesWebhookSurvivesKillAWS is the same on `qunfa dev --backend
// aws --emulators`.
func TestOutcomesWebhookSurvivesKillAWS(t *testing.T) {
	skipIfAllAWS(t)
	testOutcomesWebhookSurvivesKill(t, backendAWS)
}

func testOutcomesWebhookSurvivesKill(t *testing.T, backend string) {
	if testing.Short() {
		t.Skip("kills and restarts qunfa; skipped with -short")
	}
	t.Parallel()
	const secret = "e2e-outcomes-secret-0123456789"
	recv := startReceiver(t, secret, 0)
	m := startMock(t)
	d := startDev(t, m, devOptions{Backend: backend, Extra: []string{"--allow-private-urls", "--webhook-retry-base", "200ms"}})
	var hook api.Webhook
	d.decode(d.call("POST", "/v1/webhooks", nil, mustJSON(t, map[string]any{
		"url": recv.URL, "secret": secret, "events": []string{"items.outcomes"},
	})), http.StatusCreated, &hook)

	const n = 1200
	acct := "outcomes-kill"
	rcs := recipientsFor(acct, n)
	m.setAccount(acct, map[string]any{"rate_per_sec": 150, "burst": 150, "latency_ms": 20})
	d.putAccount(acct, map[string]any{"rate_per_sec": 150, "burst": 150, "online_reserve_per_sec": 0})
	job := d.submit("outcomes-kill", jobRequest{Name: "outcomes kill", Template: testTemplate, Recipients: rcs})

	for k := 1; k <= 2; k++ {
		// Kill within the five seconds outcomes are held for batching.
		if !poll(30*time.Second, 20*time.Millisecond, func() bool {
			return len(jobDeliveries(m.deliveries(), job.ID)) >= k*n/4
		}) {
			t.Fatalf("the job made no progress before kill %d: %+v", k, d.job(job.ID))
		}
		d.kill()
		t.Logf("kill %d: the mock had %d lines of the job", k, len(jobDeliveries(m.deliveries(), job.ID)))
		d.start()
	}
	final := d.waitFinal(job.ID, 90*time.Second)
	if final.Status != "completed" {
		t.Fatalf("job %s, want completed: %+v", final.Status, final.Counts)
	}
	lines := checkExactlyOnce(t, m.deliveries(), job.ID, rcs)
	checkCompleted(t, final, n, len(lines))

	// Every recipient's outcome arrives, at least once.
	outcomes := func() (map[int64]string, int) {
		seen := map[int64]string{}
		total := 0
		for _, r := range recv.received() {
			var ev webhook.Event
			if err := json.Unmarshal(r.body, &ev); err != nil || ev.Type != webhook.ItemsOutcomes {
				continue
			}
			var data outcomesData
			if err := json.Unmarshal(ev.Data, &data); err != nil {
				t.Fatalf("items.outcomes data: %v: %s", err, ev.Data)
			}
			if data.JobID != job.ID {
				continue
			}
			for _, it := range data.Items {
				seen[it.Seq] = it.Status
				total++
			}
		}
		return seen, total
	}
	var seen map[int64]string
	var total int
	poll(30*time.Second, 100*time.Millisecond, func() bool {
		seen, total = outcomes()
		return len(seen) == n
	})
	t.Logf("%d outcomes received for %d recipients (%d published again)", total, len(seen), total-len(seen))
	if len(seen) != n {
		var missing []int64
		for seq := range int64(n) {
			if _, ok := seen[seq]; !ok {
				missing = append(missing, seq)
			}
		}
		t.Fatalf("outcomes of %d of %d recipients reached the webhook; missing %d, first %v", len(seen), n, len(missing), missing[:min(10, len(missing))])
	}
	for seq, status := range seen {
		if status != "confirmed" {
			t.Errorf("seq %d: outcome %q, want confirmed", seq, status)
		}
	}
}
