package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/api"
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
	n := 1_000_000
	for _, env := range []string{"QUNFA_BENCH_N", "QUNFA_BENCH_RECIPIENTS"} {
		if s := os.Getenv(env); s != "" {
			v, err := strconv.Atoi(s)
			if err != nil || v <= 0 {
				b.Fatalf("%s=%q: want a positive number", env, s)
			}
			n = v
			break
		}
	}
	const accounts, perCall = 20, 100

	m := startMock(b)
	d := startDev(b, m, devOptions{ReconcileEvery: 10 * time.Second, StaleAfter: time.Minute, ProviderTimeout: 5 * time.Second})
	for a := range accounts {
		d.putAccount(fmt.Sprintf("big-%02d", a), map[string]any{"rate_per_sec": 1e6, "burst": 1e6, "max_recipients_per_call": perCall})
	}
	file := filepath.Join(b.TempDir(), "recipients.csv")
	writePackedCSV(b, file, n, accounts)

	b.ResetTimer()
	start := time.Now()
	cmd := exec.Command(qunfaBin, "submit", "--name", "packed", "--template", packedTemplate, "--recipients", file, "--key", "bench-packed")
	cmd.Env = append(os.Environ(), "QUNFA_URL="+d.URL, "QUNFA_API_TOKEN="+testToken)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		b.Fatalf("qunfa submit: %v\n%s", err, errb.String())
	}
	id := strings.TrimSpace(out.String())
	var j api.Job
	if !poll(5*time.Minute, 20*time.Millisecond, func() bool { j = d.job(id); return j.Status != "starting" }) {
		b.Fatalf("job %s still starting", id)
	}
	staged := time.Since(start)
	if !poll(30*time.Minute, 100*time.Millisecond, func() bool { j = d.job(id); return j.Status == "completed" }) {
		b.Fatalf("job %s did not complete: %s %+v", id, j.Status, j.Counts)
	}
	total := time.Since(start)
	sending := total - staged
	b.StopTimer()
	hwm := vmHWM(b, d.proc.cmd.Process.Pid)
	mockHWM := vmHWM(b, m.proc.cmd.Process.Pid)

	var calls, accepted int64
	for _, s := range m.stats() {
		calls += s.Calls
		accepted += s.Accepted
	}
	lines, distinct := countJobLines(b, m.LogPath, id)
	if lines != n || distinct != n || j.Counts.Confirmed != int64(n) || j.Total != int64(n) {
		b.Errorf("job %s: %d log lines, %d distinct keys, counts %+v, total %d; want %d each", id, lines, distinct, j.Counts, j.Total, n)
	}
	perCallAvg := float64(accepted) / float64(max(calls, 1))
	b.ReportMetric(float64(n)/total.Seconds(), "recipients/s")
	b.ReportMetric(float64(n)/sending.Seconds(), "send-recipients/s")
	b.ReportMetric(float64(calls), "calls")
	b.ReportMetric(perCallAvg, "recipients/call")
	b.ReportMetric(float64(hwm)/(1<<20), "peak-RSS-MiB")
	b.ReportMetric(float64(mockHWM)/(1<<20), "mock-peak-RSS-MiB")
	load, _ := os.ReadFile("/proc/loadavg")
	b.Logf("%d recipients, %d accounts, %d per call allowed: running after %v, completed after %v (%.0f recipients/s end to end, %.0f while sending); %d calls, %.1f recipients per call; peak RSS of qunfa dev %.0f MiB (mock %.0f MiB); load %s",
		n, accounts, perCall, staged.Round(time.Millisecond), total.Round(time.Millisecond), float64(n)/total.Seconds(), float64(n)/sending.Seconds(),
		calls, perCallAvg, float64(hwm)/(1<<20), float64(mockHWM)/(1<<20), strings.TrimSpace(string(load)))
}

// writePackedCSV writes n recipients over accounts accounts, interleaved,
// with no variables.
func writePackedCSV(b testing.TB, path string, n, accounts int) {
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	fmt.Fprintln(w, "account,to")
	for i := range n {
		fmt.Fprintf(w, "big-%02d,u%07d\n", i%accounts, i)
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
}
