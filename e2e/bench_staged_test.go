package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/api"
)

// BenchmarkStaged1M is the scale benchmark of issue 10: 1,000,000
// single-recipient messages over 20 accounts, uploaded as a CSV file by
// `qunfa submit --recipients` to `qunfa dev`, sent to a separate `qunfa
// mock-provider` without a rate limit. It reports the staging+start time
// (upload, start, planning until the job runs), end-to-end messages per
// second, the peak resident memory of the qunfa dev process and of the
// mock (VmHWM), the loopback HTTP ceiling measured in the same run (16
// keep-alive clients against a trivial 127.0.0.1 server) and the ratio,
// and how long a page of the job's items filtered by status and category
// takes.
// QUNFA_BENCH_RECIPIENTS changes the size.
func BenchmarkStaged1M(b *testing.B) {
	n := 1_000_000
	if s := os.Getenv("QUNFA_BENCH_RECIPIENTS"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	const accounts = 20
	ceiling := loopbackCeiling(b, 16, 3*time.Second)

	m := startMock(b)
	d := startDev(b, m, devOptions{ReconcileEvery: 10 * time.Second, StaleAfter: time.Minute, ProviderTimeout: 5 * time.Second})
	for a := range accounts {
		d.putAccount(fmt.Sprintf("big-%02d", a), map[string]any{"rate_per_sec": 1e6, "burst": 1e6})
	}
	file := filepath.Join(b.TempDir(), "recipients.csv")
	writeBigCSV(b, file, n, accounts)

	b.ResetTimer()
	start := time.Now()
	cmd := exec.Command(qunfaBin, "submit", "--name", "1M", "--template", testTemplate, "--recipients", file, "--key", "bench-1m")
	cmd.Env = append(os.Environ(), "QUNFA_URL="+d.URL, "QUNFA_API_TOKEN="+testToken)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		b.Fatalf("qunfa submit: %v\n%s", err, errb.String())
	}
	submitted := time.Since(start)
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

	// Listing: a page of the job's items by status, and a filter that
	// matches nothing (the worst case of a scan).
	var listMax time.Duration
	for _, q := range []string{"status=confirmed", "status=failed&category=permanent", "status=pending", "status=submitted", "category=exhausted"} {
		for range 3 {
			t0 := time.Now()
			var page api.ItemList
			d.decode(d.call("GET", "/v1/jobs/"+id+"/items?"+q, nil, nil), http.StatusOK, &page)
			listMax = max(listMax, time.Since(t0))
		}
	}

	lines, distinct := countJobLines(b, m.LogPath, id)
	if lines != n || distinct != n || j.Counts.Confirmed != int64(n) || j.Total != int64(n) {
		b.Errorf("job %s: %d log lines, %d distinct keys, counts %+v, total %d; want %d each", id, lines, distinct, j.Counts, j.Total, n)
	}
	rate := float64(n) / sending.Seconds()
	b.ReportMetric(submitted.Seconds(), "submit-s")
	b.ReportMetric(staged.Seconds(), "staged+started-s")
	b.ReportMetric(float64(n)/total.Seconds(), "msg/s")
	b.ReportMetric(rate, "send-msg/s")
	b.ReportMetric(ceiling, "loopback-req/s")
	b.ReportMetric(rate/ceiling, "ratio")
	b.ReportMetric(float64(hwm)/(1<<20), "peak-RSS-MiB")
	b.ReportMetric(float64(mockHWM)/(1<<20), "mock-peak-RSS-MiB")
	b.ReportMetric(float64(listMax.Microseconds())/1000, "items-page-max-ms")
	b.Logf("%d recipients, %d accounts: submit %v, running after %v, completed after %v (sending %v: %.0f msg/s; loopback %.0f req/s, ratio %.2f); peak RSS of qunfa dev %.0f MiB (mock %.0f MiB); slowest items page %v",
		n, accounts, submitted.Round(time.Millisecond), staged.Round(time.Millisecond), total.Round(time.Second), sending.Round(time.Millisecond),
		rate, ceiling, rate/ceiling, float64(hwm)/(1<<20), float64(mockHWM)/(1<<20), listMax.Round(time.Millisecond))
}

// writeBigCSV writes n recipients over accounts accounts, interleaved.
func writeBigCSV(b testing.TB, path string, n, accounts int) {
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	fmt.Fprintln(w, "account,to,var.name,var.code")
	for i := range n {
		a := i % accounts
		fmt.Fprintf(w, "big-%02d,u%07d,N%d,big-%02d/%d\n", a, i, i, a, i*7)
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
}

// countJobLines streams the delivery log: the job's lines and its
// distinct message keys.
func countJobLines(b testing.TB, path, jobID string) (lines, distinct int) {
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	seen := map[string]struct{}{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	prefix := jobID + ":"
	for sc.Scan() {
		var rec struct {
			Key string `json:"key"`
		}
		if json.Unmarshal(sc.Bytes(), &rec) != nil || !strings.HasPrefix(rec.Key, prefix) {
			continue
		}
		lines++
		seen[rec.Key] = struct{}{}
	}
	if err := sc.Err(); err != nil {
		b.Fatal(err)
	}
	return lines, len(seen)
}

// vmHWM is a process's peak resident set size in bytes (/proc, Linux).
func vmHWM(b testing.TB, pid int) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Logf("peak RSS unknown: %v", err)
		return 0
	}
	for _, l := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// loopbackCeiling measures request/response round trips per second over
// keep-alive connections to a trivial server on 127.0.0.1: the ceiling of
// any HTTP pipeline on this machine.
func loopbackCeiling(b testing.TB, clients int, d time.Duration) float64 {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"errcode":0,"errmsg":"ok","msgid":"m"}`))
	}))
	defer srv.Close()
	tr := &http.Transport{MaxIdleConnsPerHost: clients, Proxy: nil}
	defer tr.CloseIdleConnections()
	cl := &http.Client{Transport: tr}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var done atomic.Int64
	var wg sync.WaitGroup
	body := []byte(`{"guid":"a","toId":"u","content":"Hi"}`)
	start := time.Now()
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+"/message/sendText", bytes.NewReader(body))
				resp, err := cl.Do(req)
				if err != nil {
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	return float64(done.Load()) / time.Since(start).Seconds()
}
