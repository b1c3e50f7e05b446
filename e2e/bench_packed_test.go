package e2e

import (
	"os"
	"strings"
	"testing"
	"time"
)

// packedTemplate has no variables: every recipient gets the same text, so
// the sender may put up to max_recipients_per_call of them in one call.
const packedTemplate = "Service notice: maintenance tonight from 01:00 to 03:00."

// BenchmarkPacked1M is the packed-send benchmark of issues 10 and 13:
// 1,000,000 recipients of identical content over 20 accounts allowing 100
// recipients per call, uploaded as a CSV file by `qunfa submit
// --recipients` to `qunfa dev`, sent to a separate `qunfa mock-provider`
// without a rate limit. It reports end-to-end recipients per second, the
// provider calls made and the recipients they carried on average (by the
// mock's counts), and the peak resident memory of qunfa dev and the mock;
// every recipient must be in the mock's log exactly once.
// QUNFA_BENCH_N (or QUNFA_BENCH_RECIPIENTS) changes the size.
func BenchmarkPacked1M(b *testing.B) {
	n, accounts := benchSize(b), 20
	const perCall = 100
	r := runScaleJob(b, n, accounts, map[string]any{"rate_per_sec": 1e6, "burst": 1e6, "max_recipients_per_call": perCall},
		packedTemplate, "bench-packed", false)
	var calls, accepted int64
	for _, s := range r.m.stats() {
		calls += s.Calls
		accepted += s.Accepted
	}
	sending := r.total - r.staged
	perCallAvg := float64(accepted) / float64(max(calls, 1))
	b.ReportMetric(float64(n)/r.total.Seconds(), "recipients/s")
	b.ReportMetric(float64(n)/sending.Seconds(), "send-recipients/s")
	b.ReportMetric(float64(calls), "calls")
	b.ReportMetric(perCallAvg, "recipients/call")
	b.ReportMetric(r.cpuTotal.Seconds(), "dev-CPU-s")
	b.ReportMetric(r.cpuTotal.Seconds()/float64(n)*1e5, "dev-CPU-s/100k")
	b.ReportMetric(r.mockCPU.Seconds(), "mock-CPU-s")
	b.ReportMetric(r.mockCPU.Seconds()/float64(n)*1e5, "mock-CPU-s/100k")
	b.ReportMetric(float64(r.hwm)/(1<<20), "peak-RSS-MiB")
	b.ReportMetric(float64(r.mockHWM)/(1<<20), "mock-peak-RSS-MiB")
	load, _ := os.ReadFile("/proc/loadavg")
	b.Logf("%d recipients, %d accounts, %d per call allowed: running after %v, completed after %v (%.0f recipients/s end to end, %.0f while sending); %d calls, %.1f recipients per call; CPU of qunfa dev %.1f s (%.1f s until the job ran; %.2f s per 100,000); CPU of the mock %.1f s (%.2f s per 100,000); peak RSS of qunfa dev %.0f MiB (mock %.0f MiB); load %s",
		n, accounts, perCall, r.staged.Round(time.Millisecond), r.total.Round(time.Millisecond), float64(n)/r.total.Seconds(), float64(n)/sending.Seconds(),
		calls, perCallAvg, r.cpuTotal.Seconds(), r.cpuStaged.Seconds(), r.cpuTotal.Seconds()/float64(n)*1e5, r.mockCPU.Seconds(), r.mockCPU.Seconds()/float64(n)*1e5, float64(r.hwm)/(1<<20), float64(r.mockHWM)/(1<<20), strings.TrimSpace(string(load)))
}
