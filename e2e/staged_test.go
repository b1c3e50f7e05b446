package e2e

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/api"
)

// TestStagedUploadKillAndRestart uploads a job in parts — JSON, NDJSON
// and CSV, with recipients repeated across parts, a part sent twice, a
// conflicting part, a part with a bad line and a start naming a part never
// uploaded — starts it, SIGKILLs `qunfa dev` while it plans and again
// while it sends, restarting it on the same data directory each time, and
// judges by the mock's delivery log: every distinct recipient delivered
// exactly once, the job completed with exact counts.
func TestStagedUploadKillAndRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("kills and restarts qunfa; skipped with -short")
	}
	t.Parallel()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("QUNFA_E2E_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	rng := rand.New(rand.NewPCG(seed, 0x51ed))
	t.Logf("seed %d (set QUNFA_E2E_SEED to repeat)", seed)

	m := startMock(t)
	d := startDev(t, m, devOptions{})
	var rcs []recipient
	for _, a := range []struct {
		id   string
		rate float64
		n    int
	}{{"stg-a", 400, 1500}, {"stg-b", 300, 1000}, {"stg-c", 200, 600}} {
		m.setAccount(a.id, map[string]any{"rate_per_sec": a.rate, "burst": int(a.rate), "latency_ms": 20})
		d.putAccount(a.id, map[string]any{"rate_per_sec": a.rate, "burst": a.rate, "online_reserve_per_sec": a.rate / 10})
		rcs = append(rcs, recipientsFor(a.id, a.n)...)
	}
	rng.Shuffle(len(rcs), func(i, j int) { rcs[i], rcs[j] = rcs[j], rcs[i] })

	var job api.Job
	d.decode(d.call("POST", "/v1/jobs", http.Header{"Idempotency-Key": {"staged-kill"}},
		mustJSON(t, map[string]any{"name": "staged kill test", "template": testTemplate, "staged": true})), http.StatusCreated, &job)
	if job.Status != "staging" {
		t.Fatalf("staged job is %q", job.Status)
	}
	put := func(part int, mediaType string, body []byte) reply {
		t.Helper()
		return d.call("PUT", fmt.Sprintf("/v1/jobs/%s/recipients/%d", job.ID, part), http.Header{"Content-Type": {mediaType}}, body)
	}
	// Three parts a third of the recipients each, and 200 of each part's
	// recipients again in the next one (duplicates across parts).
	third := len(rcs) / 3
	slices := [][]recipient{rcs[:third], append(append([]recipient{}, rcs[third:2*third]...), rcs[:200]...), append(append([]recipient{}, rcs[2*third:]...), rcs[third:third+200]...)}
	jsonPart := mustJSON(t, map[string]any{"recipients": slices[0]})
	var nd bytes.Buffer
	for _, r := range slices[1] {
		nd.Write(mustJSON(t, r))
		nd.WriteByte('\n')
	}
	var cs bytes.Buffer
	w := csv.NewWriter(&cs)
	_ = w.Write([]string{"account", "to", "var.name", "var.code"})
	for _, r := range slices[2] {
		_ = w.Write([]string{r.Account, r.To, r.Vars["name"], r.Vars["code"]})
	}
	w.Flush()
	wantStatus := func(what string, r reply, status int, contains ...string) {
		t.Helper()
		if r.Status != status {
			t.Fatalf("%s: HTTP %d, want %d: %s", what, r.Status, status, r.Body)
		}
		for _, c := range contains {
			if !strings.Contains(string(r.Body), c) {
				t.Errorf("%s: the answer lacks %q: %s", what, c, r.Body)
			}
		}
	}
	wantStatus("part 1 (JSON)", put(1, "application/json", jsonPart), http.StatusOK, `"recipients":`+strconv.Itoa(len(slices[0])))
	wantStatus("part 2 (NDJSON)", put(2, "application/x-ndjson", nd.Bytes()), http.StatusOK)
	wantStatus("part 2 again, the same body", put(2, "application/x-ndjson", nd.Bytes()), http.StatusOK)
	wantStatus("part 2 with another body", put(2, "application/x-ndjson", nd.Bytes()[:nd.Len()/2]), http.StatusConflict)
	wantStatus("part 3 (CSV)", put(3, "text/csv", cs.Bytes()), http.StatusOK)
	bad := []byte(`{"account": "stg-a", "to": "extra-1", "vars": {"name": "x", "code": "y"}}` + "\n" +
		`{"account": "nobody", "to": "extra-2", "vars": {"name": "x", "code": "y"}}` + "\n")
	wantStatus("part 4 with a bad line", put(4, "application/x-ndjson", bad), http.StatusUnprocessableEntity, "line 2")
	var parts api.PartList
	d.decode(d.call("GET", "/v1/jobs/"+job.ID+"/recipients", nil, nil), http.StatusOK, &parts)
	if len(parts.Parts) != 3 {
		t.Fatalf("stored parts %+v, want 1-3 (nothing of the bad part 4)", parts.Parts)
	}
	wantStatus("start with part 4 missing", d.call("POST", "/v1/jobs/"+job.ID+"/start", nil, []byte(`{"parts": 4}`)),
		http.StatusUnprocessableEntity, "parts 4 have not been uploaded")
	if j := d.job(job.ID); j.Status != "staging" {
		t.Fatalf("a refused start left the job %q", j.Status)
	}

	// Start, and kill at once: planning runs in the background.
	wantStatus("start", d.call("POST", "/v1/jobs/"+job.ID+"/start", nil, []byte(`{"parts": 3}`)), http.StatusAccepted, `"status":"starting"`)
	d.kill()
	released := func() int {
		n := 0
		for _, ev := range d.logEvents("staged job released") {
			if ev["job"] == job.ID {
				n++
			}
		}
		return n
	}
	if released() != 0 {
		t.Logf("planning finished before the kill (the kill came too late to interrupt it)")
	} else {
		t.Logf("killed while the job was starting")
	}
	d.start()
	sane := countsChecker(t)
	if !poll(30*time.Second, 20*time.Millisecond, func() bool { return d.job(job.ID).Status != "starting" }) {
		t.Fatalf("job %s still starting 30 s after a restart", job.ID)
	}

	// Kill twice while it sends.
	for k := 1; k <= 2; k++ {
		time.Sleep(300*time.Millisecond + time.Duration(rng.Int64N(int64(900*time.Millisecond)))) // a random moment
		before := d.job(job.ID)
		sane(before, fmt.Sprintf("before kill %d", k))
		d.kill()
		atKill := len(jobDeliveries(m.deliveries(), job.ID))
		t.Logf("kill %d while %s: %d of %d delivered at the kill", k, before.Status, atKill, before.Total)
		d.start()
		sane(d.job(job.ID), fmt.Sprintf("after restart %d", k))
	}
	final := d.waitFinal(job.ID, 90*time.Second)
	sane(final, "at the end")
	// The distinct recipients, in order of first appearance.
	seen := map[deliveryKey]bool{}
	var distinct []recipient
	for _, s := range slices {
		for _, r := range s {
			if k := (deliveryKey{r.Account, r.To}); !seen[k] {
				seen[k] = true
				distinct = append(distinct, r)
			}
		}
	}
	if len(distinct) != len(rcs) {
		t.Fatalf("test setup: %d distinct recipients, want %d", len(distinct), len(rcs))
	}
	lines := checkExactlyOnce(t, m.deliveries(), job.ID, distinct)
	checkCompleted(t, final, len(distinct), len(lines))
	checkNoRateLimited(t, m.stats())
	var views []map[string]any
	for _, ev := range d.logEvents("staged job counted") {
		if ev["job"] == job.ID {
			views = append(views, ev)
		}
	}
	if len(views) == 0 {
		t.Error("no planning step of the job in the log")
	}
	b, _ := json.Marshal(final.Counts)
	t.Logf("job %s %s: %d recipients (%d uploaded, %d duplicates across parts), counts %s, planning released %d time(s)",
		job.ID, final.Status, final.Total, len(slices[0])+len(slices[1])+len(slices[2]), 400, b, released())
}
