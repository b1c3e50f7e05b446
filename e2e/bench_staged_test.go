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
	n, accounts := benchSize(b), 20
	ceiling := loopbackCeiling(b, 16, 3*time.Second)
	r := runScaleJob(b, n, accounts, map[string]any{"rate_per_sec": 1e6, "burst": 1e6}, testTemplate, "bench-1m", true)

	// Listing: a page of the job's items by status, and a filter that
	// matches nothing (the worst case of a scan).
	var listMax time.Duration
	for _, q := range []string{"status=confirmed", "status=failed&category=permanent", "status=pending", "status=submitted", "category=exhausted"} {
		for range 3 {
			t0 := time.Now()
			var page api.ItemList
			r.d.decode(r.d.call("GET", "/v1/jobs/"+r.id+"/items?"+q, nil, nil), http.StatusOK, &page)
			listMax = max(listMax, time.Since(t0))
		}
	}

	sending := r.total - r.staged
	rate := float64(n) / sending.Seconds()
	b.ReportMetric(r.submitted.Seconds(), "submit-s")
	b.ReportMetric(r.staged.Seconds(), "staged+started-s")
	b.ReportMetric(float64(n)/r.total.Seconds(), "msg/s")
	b.ReportMetric(rate, "send-msg/s")
	b.ReportMetric(ceiling, "loopback-req/s")
	b.ReportMetric(rate/ceiling, "ratio")
	b.ReportMetric(float64(r.hwm)/(1<<20), "peak-RSS-MiB")
	b.ReportMetric(float64(r.mockHWM)/(1<<20), "mock-peak-RSS-MiB")
	b.ReportMetric(float64(listMax.Microseconds())/1000, "items-page-max-ms")
	b.ReportMetric(r.cpuTotal.Seconds(), "dev-CPU-s")
	b.ReportMetric(r.cpuTotal.Seconds()/float64(n)*1e5, "dev-CPU-s/100k")
	load, _ := os.ReadFile("/proc/loadavg")
	b.Logf("%d recipients, %d accounts: submit %v, running after %v, completed after %v (sending %v: %.0f msg/s; loopback %.0f req/s, ratio %.2f); CPU of qunfa dev %.1f s (%.2f s per 100,000); peak RSS of qunfa dev %.0f MiB (mock %.0f MiB); slowest items page %v; load %s",
		n, accounts, r.submitted.Round(time.Millisecond), r.staged.Round(time.Millisecond), r.total.Round(time.Second), sending.Round(time.Millisecond),
		rate, ceiling, rate/ceiling, r.cpuTotal.Seconds(), r.cpuTotal.Seconds()/float64(n)*1e5, float64(r.hwm)/(1<<20), float64(r.mockHWM)/(1<<20), listMax.Round(time.Millisecond),
		strings.TrimSpace(string(load)))
}

// benchSize is the recipients of a scale benchmark: 1,000,000 unless
// QUNFA_BENCH_N or QUNFA_BENCH_RECIPIENTS says otherwise.
func benchSize(b *testing.B) int {
	for _, env := range []string{"QUNFA_BENCH_N", "QUNFA_BENCH_RECIPIENTS"} {
		if s := os.Getenv(env); s != "" {
			v, err := strconv.Atoi(s)
			if err != nil || v <= 0 {
				b.Fatalf("%s=%q: want a positive number", env, s)
			}
			return v
		}
	}
	return 1_000_000
}

// scaleRun is one scale benchmark's job, sent to the end.
type scaleRun struct {
	d                        *devProc
	m                        *mockProc
	id                       string
	submitted, staged, total time.Duration // since the upload started
	hwm, mockHWM             int64         // peak RSS of qunfa dev and the mock
	cpuStaged, cpuTotal      time.Duration // CPU (user + system) of qunfa dev since the upload started
	mockCPU                  time.Duration // CPU (user + system) of the mock provider since the upload started
}

// runScaleJob starts a mock and qunfa dev with accounts big-00… (settings
// acct), uploads n recipients over them as a CSV file by `qunfa submit
// --recipients` (with two variables each when vars, none otherwise), waits
// for the job to complete, and fails the benchmark unless every recipient
// is in the mock's log exactly once and the counts say so. The benchmark
// timer runs from the upload to the end.
func runScaleJob(b *testing.B, n, accounts int, acct map[string]any, template, key string, vars bool) scaleRun {
	r := scaleRun{m: startMock(b)}
	r.d = startDev(b, r.m, devOptions{ReconcileEvery: 10 * time.Second, StaleAfter: time.Minute, ProviderTimeout: 5 * time.Second})
	for a := range accounts {
		r.d.putAccount(fmt.Sprintf("big-%02d", a), acct)
	}
	file := filepath.Join(b.TempDir(), "recipients.csv")
	writeBenchCSV(b, file, n, accounts, vars)

	b.ResetTimer()
	start := time.Now()
	pid := r.d.proc.cmd.Process.Pid
	cpu0 := procCPU(b, pid)
	mockPid := r.m.proc.cmd.Process.Pid
	mockCPU0 := procCPU(b, mockPid)
	cmd := exec.Command(qunfaBin, "submit", "--name", key, "--template", template, "--recipients", file, "--key", key)
	cmd.Env = append(os.Environ(), "QUNFA_URL="+r.d.URL, "QUNFA_API_TOKEN="+testToken)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		b.Fatalf("qunfa submit: %v\n%s", err, errb.String())
	}
	r.submitted = time.Since(start)
	r.id = strings.TrimSpace(out.String())
	var j api.Job
	if !poll(5*time.Minute, 20*time.Millisecond, func() bool { j = r.d.job(r.id); return j.Status != "starting" }) {
		b.Fatalf("job %s still starting", r.id)
	}
	r.staged = time.Since(start)
	r.cpuStaged = procCPU(b, pid) - cpu0
	if !poll(30*time.Minute, 100*time.Millisecond, func() bool { j = r.d.job(r.id); return j.Status == "completed" }) {
		b.Fatalf("job %s did not complete: %s %+v", r.id, j.Status, j.Counts)
	}
	r.total = time.Since(start)
	r.cpuTotal = procCPU(b, pid) - cpu0
	r.mockCPU = procCPU(b, mockPid) - mockCPU0
	b.StopTimer()
	r.hwm = vmHWM(b, r.d.proc.cmd.Process.Pid)
	r.mockHWM = vmHWM(b, r.m.proc.cmd.Process.Pid)
	lines, distinct := countJobLines(b, r.m.LogPath, r.id)
	if lines != n || distinct != n || j.Counts.Confirmed != int64(n) || j.Total != int64(n) {
		b.Errorf("job %s: %d log lines, %d distinct keys, counts %+v, total %d; want %d each", r.id, lines, distinct, j.Counts, j.Total, n)
	}
	return r
}

// writeBenchCSV writes n recipients over accounts accounts, interleaved,
// with the variables of testTemplate when vars.
func writeBenchCSV(b testing.TB, path string, n, accounts int, vars bool) {
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	if vars {
		fmt.Fprintln(w, "account,to,var.name,var.code")
	} else {
		fmt.Fprintln(w, "account,to")
	}
	for i := range n {
		a := i % accounts
		if vars {
			fmt.Fprintf(w, "big-%02d,u%07d,N%d,big-%02d/%d\n", a, i, i, a, i*7)
		} else {
			fmt.Fprintf(w, "big-%02d,u%07d\n", a, i)
		}
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
// procCPU is the CPU time (user + system) process pid has used, from
// /proc/PID/stat in clock ticks of 1/100 s (0 when unreadable).
func procCPU(b testing.TB, pid int) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Logf("CPU time unknown: %v", err)
		return 0
	}
	// Fields after the command name (which may hold spaces) in parentheses:
	// state is the 3rd field of the line, utime the 14th, stime the 15th.
	f := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))
	if len(f) < 13 {
		b.Logf("CPU time unknown: short /proc/%d/stat", pid)
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

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
