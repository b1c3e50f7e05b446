package e2e

import (
	"fmt"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/api"
)

// BenchmarkBackends measures `qunfa dev` on both backends at process level:
// 20,000 single-recipient messages over 4 accounts with an effectively
// unlimited rate, to a mock without a limit, from POST /v1/jobs until the
// job is completed; every recipient exactly once in the mock's log. On the
// aws backend (DynamoDB and SQS FIFO on the emulators) it also reports the
// DynamoDB capacity units per message the store consumed (from the stack's
// qunfa_dynamodb_capacity_units_total, as dynalite reports them), submit
// included. QUNFA_BENCH_N sets another size.
func BenchmarkBackends(b *testing.B) {
	for _, backend := range []string{backendSQLite, backendAWS} {
		b.Run(backend, func(b *testing.B) {
			n := 20_000
			if os.Getenv("QUNFA_BENCH_N") != "" {
				n = benchSize(b)
			}
			benchmarkBackend(b, backend, n)
		})
	}
}

func benchmarkBackend(b *testing.B, backend string, n int) {
	const accounts = 4
	m := startMock(b)
	d := startDev(b, m, devOptions{Backend: backend, ReconcileEvery: 5 * time.Second, StaleAfter: 30 * time.Second, ProviderTimeout: 5 * time.Second})
	var rcs []recipient
	for a := range accounts {
		id := fmt.Sprintf("bench-%c", 'a'+a)
		d.putAccount(id, map[string]any{"rate_per_sec": 1e6, "burst": 1e6})
		rcs = append(rcs, recipientsFor(id, n/accounts)...)
	}
	body := mustJSON(b, jobRequest{Name: "bench", Template: testTemplate, Recipients: rcs})
	capacity := func() (read, write float64) {
		samples, _ := d.scrapeMetrics()
		for _, s := range samples {
			if s.name == "qunfa_dynamodb_capacity_units_total" {
				switch s.labels["kind"] {
				case "read":
					read = s.value
				case "write":
					write = s.value
				}
			}
		}
		return read, write
	}

	var jobs []string
	var total time.Duration
	var reads, writes float64
	b.ResetTimer()
	for i := range b.N {
		r0, w0 := capacity()
		start := time.Now()
		var j api.Job
		d.decode(d.call("POST", "/v1/jobs", http.Header{"Idempotency-Key": {fmt.Sprintf("bench-%d", i)}}, body), http.StatusAccepted, &j)
		ok := poll(10*time.Minute, 20*time.Millisecond, func() bool { return d.job(j.ID).Status == "completed" })
		total += time.Since(start)
		if !ok {
			b.Fatalf("job %s did not complete: %+v", j.ID, d.job(j.ID).Counts)
		}
		r1, w1 := capacity()
		reads, writes = reads+r1-r0, writes+w1-w0
		jobs = append(jobs, j.ID)
	}
	b.StopTimer()

	ds := m.deliveries()
	for _, id := range jobs {
		lines := checkExactlyOnce(b, ds, id, rcs)
		checkCompleted(b, d.job(id), len(rcs), len(lines))
	}
	msgs := float64(len(rcs) * b.N)
	b.ReportMetric(msgs/total.Seconds(), "msg/s")
	if backend == backendAWS {
		b.ReportMetric(writes/msgs, "WCU/msg")
		b.ReportMetric(reads/msgs, "RCU/msg")
	}
}
