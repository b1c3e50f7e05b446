package e2e

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/api"
)

// BenchmarkEndToEnd20k measures what a user gets from `qunfa dev`: 20,000
// single-recipient messages on one account with an effectively unlimited
// rate, to a mock without a limit, from POST /v1/jobs until GET
// /v1/jobs/{id} says completed. It reports messages per second overall and
// the time the submission itself took. Run it with `make bench` (or `go
// test -run '^$' -bench . -benchtime 1x ./e2e/`).
func BenchmarkEndToEnd20k(b *testing.B) {
	for _, workers := range []int{8, 16} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			benchmarkEndToEnd(b, workers, 20_000)
		})
	}
}

func benchmarkEndToEnd(b *testing.B, workers, n int) {
	m := startMock(b)
	d := startDev(b, m, devOptions{Workers: workers, ReconcileEvery: 5 * time.Second, StaleAfter: 30 * time.Second, ProviderTimeout: 5 * time.Second})
	d.putAccount("bench-a", map[string]any{"rate_per_sec": 1e6, "burst": 1e6})
	rcs := recipientsFor("bench-a", n)
	body := mustJSON(b, jobRequest{Name: "bench", Template: testTemplate, Recipients: rcs})

	var jobs []string
	var submitting, total time.Duration
	b.ResetTimer()
	for i := range b.N {
		start := time.Now()
		var j api.Job
		d.decode(d.call("POST", "/v1/jobs", http.Header{"Idempotency-Key": {fmt.Sprintf("bench-%d", i)}}, body), http.StatusAccepted, &j)
		submitting += time.Since(start)
		ok := poll(5*time.Minute, 10*time.Millisecond, func() bool { return d.job(j.ID).Status == "completed" })
		total += time.Since(start)
		if !ok {
			b.Fatalf("job %s did not complete: %+v", j.ID, d.job(j.ID).Counts)
		}
		jobs = append(jobs, j.ID)
	}
	b.StopTimer()

	ds := m.deliveries()
	for _, id := range jobs {
		lines := checkExactlyOnce(b, ds, id, rcs)
		checkCompleted(b, d.job(id), n, len(lines))
	}
	b.ReportMetric(float64(n*b.N)/total.Seconds(), "msg/s")
	b.ReportMetric(float64(submitting.Milliseconds())/float64(b.N), "submit-ms/job")
}
