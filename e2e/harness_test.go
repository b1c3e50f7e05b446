package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/api"
	"github.com/qunfa/qunfa/internal/api/apispec"
	"github.com/qunfa/qunfa/internal/awsemu"
	"github.com/qunfa/qunfa/internal/emulators"
	"github.com/qunfa/qunfa/internal/mockprovider"
)

// qunfaBin is the qunfa binary TestMain built.
var qunfaBin string

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	if bin := os.Getenv("QUNFA_E2E_BIN"); bin != "" {
		// A prebuilt binary, e.g. of another checkout.
		qunfaBin = bin
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "qunfa-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	goTool, err := exec.LookPath("go")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: the go command is needed to build qunfa:", err)
		return 1
	}
	qunfaBin = filepath.Join(dir, "qunfa")
	// The processes under test are built without -race even when the tests
	// run with it: the race detector would slow them far below the rates
	// the tests demand.
	build := exec.Command(goTool, "build", "-o", qunfaBin, "github.com/qunfa/qunfa/cmd/qunfa")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: build qunfa:", err)
		return 1
	}
	return m.Run()
}

// testToken is the API token every qunfa dev process of the tests accepts
// (admin of the default tenant), and testAdminToken their platform token.
const (
	testToken      = "qf_e2e_test_token"
	testAdminToken = "qf_e2e_platform_token"
)

// httpClient is shared by every request of the tests. Its transport checks
// every answer of a qunfa dev process against the OpenAPI description
// (specCheck).
var httpClient = &http.Client{
	Timeout: 30 * time.Second,
	Transport: &specCheckingTransport{next: &http.Transport{
		Proxy:               nil,
		MaxIdleConnsPerHost: 32,
		IdleConnTimeout:     30 * time.Second,
	}},
}

// specCheck maps the host:port of each running qunfa dev process to its
// test: every answer of that process to a request on an API v1 path (or
// /healthz) is validated with apispec, and a mismatch fails that test.
var specCheck sync.Map // host:port → testing.TB

// checkSpecOf makes the answers of the qunfa dev process at addr be
// validated against the OpenAPI description, failing t on a mismatch,
// until t's cleanup.
func checkSpecOf(t testing.TB, addr string) {
	specCheck.Store(addr, t)
	t.Cleanup(func() { specCheck.CompareAndDelete(addr, t) })
}

// specCheckingTransport validates answers of registered qunfa dev
// processes (checkSpecOf) with apispec.ValidateAgainstSpec; the answer's
// body stays readable.
type specCheckingTransport struct{ next http.RoundTripper }

func (s *specCheckingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := s.next.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	v, ok := specCheck.Load(req.URL.Host)
	if !ok || !(req.URL.Path == "/healthz" || strings.HasPrefix(req.URL.Path, "/v1/")) {
		return resp, nil
	}
	t := v.(testing.TB)
	t.Helper()
	apispec.ValidateAgainstSpec(t, req, resp)
	return resp, nil
}

// freeAddr returns a 127.0.0.1 address with a port nobody listens on.
func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("find a free port: %v", err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// proc is one run of the qunfa binary. Its stderr (and stdout) go to a file
// that successive runs of the same role append to.
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	err  error         // Wait's result, set before done is closed
}

// startProc starts the qunfa binary with args, appending its output to
// logPath. The test's cleanup kills it if it still runs.
func startProc(t testing.TB, name, logPath string, env []string, args ...string) *proc {
	t.Helper()
	out, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatalf("open %s: %v", logPath, err)
	}
	fmt.Fprintf(out, "=== %s: %s %s\n", time.Now().Format(time.RFC3339Nano), name, strings.Join(args, " "))
	cmd := exec.Command(qunfaBin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = childProcAttr()
	if err := cmd.Start(); err != nil {
		out.Close()
		t.Fatalf("start %s: %v", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		out.Close()
		close(p.done)
	}()
	t.Cleanup(func() { p.kill() })
	return p
}

// exited reports whether the process has exited.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *proc) kill() {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// stop sends sig and waits at most timeout for the exit. It returns the
// exit code (-1 when killed by a signal) and how long the exit took; ok is
// false when the process was still running at the timeout.
func (p *proc) stop(sig os.Signal, timeout time.Duration) (code int, took time.Duration, ok bool) {
	start := time.Now()
	if err := p.cmd.Process.Signal(sig); err != nil && !p.exited() {
		return -1, 0, false
	}
	select {
	case <-p.done:
	case <-time.After(timeout):
		return -1, time.Since(start), false
	}
	took = time.Since(start)
	var ee *exec.ExitError
	switch {
	case p.err == nil:
		return 0, took, true
	case errors.As(p.err, &ee):
		return ee.ExitCode(), took, true
	default:
		return -1, took, true
	}
}

// dumpOnFailure prints the tail of a process log when the test failed.
func dumpOnFailure(t testing.TB, label, path string) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Logf("%s: %v", label, err)
			return
		}
		const most = 12_000
		if len(b) > most {
			b = append([]byte("…\n"), b[len(b)-most:]...)
		}
		t.Logf("---- %s (%s) ----\n%s---- end of %s ----", label, path, b, label)
	})
}

// poll calls cond every interval until it returns true or the deadline
// passes; it reports whether cond became true.
func poll(timeout, interval time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(interval)
	}
}

// reply is a complete HTTP answer.
type reply struct {
	Status int
	Header http.Header
	Body   []byte
}

// send makes one HTTP request and reads the whole answer. It never calls
// t.Fatal, so goroutines may use it.
func send(ctx context.Context, method, url string, hdr http.Header, body []byte) (reply, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return reply{}, err
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return reply{}, fmt.Errorf("read the answer of %s %s: %w", method, url, err)
	}
	return reply{Status: resp.StatusCode, Header: resp.Header, Body: b}, nil
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("encode JSON: %v", err)
	}
	return b
}

// ---- the mock provider process ----

// mockProc is a `qunfa mock-provider` process.
type mockProc struct {
	t       testing.TB
	URL     string
	LogPath string // the JSON-lines delivery log
	proc    *proc
}

// startMock starts the mock provider alone and waits until it answers.
func startMock(t testing.TB, extra ...string) *mockProc {
	t.Helper()
	dir := t.TempDir()
	addr := freeAddr(t)
	m := &mockProc{t: t, URL: "http://" + addr, LogPath: filepath.Join(dir, "deliveries.jsonl")}
	stderr := filepath.Join(dir, "mock.stderr")
	dumpOnFailure(t, "mock-provider stderr", stderr)
	args := append([]string{"mock-provider", "--addr", addr, "--log", m.LogPath}, extra...)
	m.proc = startProc(t, "mock-provider", stderr, nil, args...)
	ok := poll(10*time.Second, 10*time.Millisecond, func() bool {
		r, err := send(context.Background(), "GET", m.URL+"/_mock/stats", nil, nil)
		return err == nil && r.Status == http.StatusOK
	})
	if !ok {
		t.Fatalf("the mock provider at %s did not come up (exited: %v)", m.URL, m.proc.exited())
	}
	return m
}

// setAccount sets one account's behaviour (PUT /_mock/accounts/{guid}).
func (m *mockProc) setAccount(guid string, behaviour map[string]any) {
	m.t.Helper()
	r, err := send(context.Background(), "PUT", m.URL+"/_mock/accounts/"+guid, nil, mustJSON(m.t, behaviour))
	if err != nil || r.Status != http.StatusOK {
		m.t.Fatalf("mock: PUT account %s: %v %d %s", guid, err, r.Status, r.Body)
	}
}

// stats reads GET /_mock/stats.
func (m *mockProc) stats() map[string]mockprovider.AccountStats {
	m.t.Helper()
	r, err := send(context.Background(), "GET", m.URL+"/_mock/stats", nil, nil)
	if err != nil || r.Status != http.StatusOK {
		m.t.Fatalf("mock: GET stats: %v %d %s", err, r.Status, r.Body)
	}
	var s struct {
		Accounts map[string]mockprovider.AccountStats `json:"accounts"`
	}
	if err := json.Unmarshal(r.Body, &s); err != nil {
		m.t.Fatalf("mock: stats: %v: %s", err, r.Body)
	}
	return s.Accounts
}

// deliveries reads the delivery log. A last line without its newline (a
// write in progress) is left out.
func (m *mockProc) deliveries() []mockprovider.Delivery {
	m.t.Helper()
	return readDeliveries(m.t, m.LogPath)
}

func readDeliveries(t testing.TB, path string) []mockprovider.Delivery {
	t.Helper()
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatalf("open the delivery log: %v", err)
	}
	defer f.Close()
	var out []mockprovider.Delivery
	br := bufio.NewReaderSize(f, 1<<16)
	for n := 1; ; n++ {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 && line[len(line)-1] == '\n' {
			var d mockprovider.Delivery
			if err := json.Unmarshal(line, &d); err != nil {
				t.Fatalf("delivery log line %d is not a Delivery: %v: %s", n, err, line)
			}
			out = append(out, d)
		}
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("read the delivery log: %v", err)
		}
	}
}

// ---- the qunfa dev process ----

// The backends a qunfa dev process of the tests runs on.
const (
	backendSQLite = "sqlite" // the embedded store and queue
	backendAWS    = "aws"    // DynamoDB and SQS FIFO on the emulators (--backend aws --emulators)
)

// BackendEnv chooses the backend of every test that does not name one:
// sqlite (the default) or aws (`make test-aws`).
const BackendEnv = "QUNFA_E2E_BACKEND"

// awsVisibility is the work messages' visibility on the aws backend: after
// a SIGKILL, the turns the dead process held come back within it.
const awsVisibility = 5 * time.Second

// defaultBackend is the backend of the tests that name none.
func defaultBackend(t testing.TB) string {
	switch b := os.Getenv(BackendEnv); b {
	case "", backendSQLite:
		return backendSQLite
	case backendAWS:
		return backendAWS
	default:
		t.Fatalf("%s=%q: want sqlite or aws", BackendEnv, b)
		return ""
	}
}

// devOptions are the flags of `qunfa dev` the tests vary.
type devOptions struct {
	// Backend is backendSQLite or backendAWS; empty: defaultBackend.
	Backend         string
	Workers         int           // default: qunfa dev's own
	ReconcileEvery  time.Duration // default 1 s
	StaleAfter      time.Duration // default 3 s
	ProviderTimeout time.Duration // default 1 s
	Extra           []string      // more flags
	Addr            string        // default: a free 127.0.0.1 port
}

// devProc is `qunfa dev` with an external provider, on one data directory
// across restarts.
type devProc struct {
	t       testing.TB
	URL     string
	addr    string
	dataDir string
	stderr  string
	args    []string
	proc    *proc
	starts  int
	backend string
}

// backendCaps are what a backend's store does not do yet, declared like the
// store conformance suite's capabilities (storetest.Capabilities), so a
// test checks everything else instead of forking.
type backendCaps struct {
	// manyShards: a job over hundreds of accounts is submitted and worked
	// within the bounds TestManyAccounts sets. On the aws backend the
	// emulators bound it: dynalite (one node process over LevelDB) takes
	// about 50 s to submit 400 shards on a loaded machine (every shard
	// record is a conditional write), and 100 accounts × 100 at 20/s ask
	// for 2,000 msg/s, more than the whole stack sends on the emulators
	// (BenchmarkBackends: 700–900 msg/s), so TestManyAccounts runs smaller
	// there.
	manyShards bool
}

// capsOf returns the capabilities of a backend.
func capsOf(backend string) backendCaps {
	aws := backend == backendAWS
	return backendCaps{manyShards: !aws}
}

// caps returns the capabilities of the process's backend.
func (d *devProc) caps() backendCaps { return capsOf(d.backend) }

// skipIfAllAWS skips a test that runs another test on the aws backend when
// every test runs there anyway (QUNFA_E2E_BACKEND=aws).
func skipIfAllAWS(t *testing.T) {
	if defaultBackend(t) == backendAWS {
		t.Skip("the same test without the AWS suffix runs on the aws backend already (" + BackendEnv + "=aws)")
	}
}

// requireEmulators skips t (fails it under QUNFA_REQUIRE_EMULATORS=1) when
// the AWS emulators are not installed.
func requireEmulators(t testing.TB) {
	t.Helper()
	for _, name := range []string{"dynalite", "node"} {
		if _, err := emulators.Bin(name); err != nil {
			awsemu.Unavailable(t, "the AWS emulators for qunfa dev --backend aws --emulators", err)
		}
	}
}

// startDev starts `qunfa dev` against the mock and waits for /healthz.
func startDev(t testing.TB, m *mockProc, o devOptions) *devProc {
	t.Helper()
	if o.ReconcileEvery == 0 {
		o.ReconcileEvery = time.Second
	}
	if o.StaleAfter == 0 {
		o.StaleAfter = 3 * time.Second
	}
	if o.ProviderTimeout == 0 {
		o.ProviderTimeout = time.Second
	}
	dir := t.TempDir()
	if o.Addr == "" {
		o.Addr = freeAddr(t)
	}
	d := &devProc{t: t, addr: o.Addr, dataDir: filepath.Join(dir, "data"), stderr: filepath.Join(dir, "dev.stderr")}
	d.URL = "http://" + d.addr
	d.args = []string{"dev",
		"--addr", d.addr, "--data-dir", d.dataDir, "--provider-url", m.URL,
		"--reconcile-every", o.ReconcileEvery.String(), "--stale-after", o.StaleAfter.String(),
		"--provider-timeout", o.ProviderTimeout.String(), "--log-format", "json",
	}
	if o.Workers > 0 {
		d.args = append(d.args, "--workers", fmt.Sprint(o.Workers))
	}
	if o.Backend == "" {
		o.Backend = defaultBackend(t)
	}
	if o.Backend == backendAWS {
		requireEmulators(t)
		d.args = append(d.args, "--backend", "aws", "--emulators", "--visibility", awsVisibility.String())
	}
	d.backend = o.Backend
	d.args = append(d.args, o.Extra...)
	dumpOnFailure(t, "qunfa dev stderr", d.stderr)
	checkSpecOf(t, d.addr)
	d.start()
	return d
}

// start (re)starts the process on the same address and data directory and
// waits until /healthz answers.
func (d *devProc) start() {
	d.t.Helper()
	if d.proc != nil && !d.proc.exited() {
		d.t.Fatal("qunfa dev is already running")
	}
	d.starts++
	d.proc = startProc(d.t, "qunfa dev", d.stderr, []string{"QUNFA_API_TOKEN=" + testToken, "QUNFA_ADMIN_TOKEN=" + testAdminToken}, d.args...)
	ok := poll(20*time.Second, 10*time.Millisecond, func() bool {
		if d.proc.exited() {
			return true
		}
		r, err := send(context.Background(), "GET", d.URL+"/healthz", nil, nil)
		return err == nil && r.Status == http.StatusOK
	})
	switch {
	case d.proc.exited():
		d.t.Fatalf("qunfa dev exited at start #%d: %v", d.starts, d.proc.err)
	case !ok:
		d.t.Fatalf("qunfa dev did not answer /healthz at %s after start #%d", d.URL, d.starts)
	}
}

// kill ends the process with SIGKILL.
func (d *devProc) kill() { d.proc.kill() }

// authHeader is the header of an authenticated request.
func authHeader() http.Header {
	return http.Header{"Authorization": {"Bearer " + testToken}, "Content-Type": {"application/json"}}
}

// call makes an authenticated API request; hdr adds headers.
func (d *devProc) call(method, path string, hdr http.Header, body []byte) reply {
	d.t.Helper()
	h := authHeader()
	for k, v := range hdr {
		h[k] = v
	}
	r, err := send(context.Background(), method, d.URL+path, h, body)
	if err != nil {
		d.t.Fatalf("%s %s: %v", method, path, err)
	}
	return r
}

// decode reads a 2xx answer into v.
func (d *devProc) decode(r reply, want int, v any) {
	d.t.Helper()
	if r.Status != want {
		d.t.Fatalf("HTTP %d, want %d: %s", r.Status, want, r.Body)
	}
	if err := json.Unmarshal(r.Body, v); err != nil {
		d.t.Fatalf("decode the answer: %v: %s", err, r.Body)
	}
}

// putAccount configures a sending account.
func (d *devProc) putAccount(id string, req map[string]any) api.Account {
	d.t.Helper()
	var a api.Account
	d.decode(d.call("PUT", "/v1/accounts/"+id, nil, mustJSON(d.t, req)), http.StatusOK, &a)
	return a
}

// submit posts a job and expects 202.
func (d *devProc) submit(key string, req jobRequest) api.Job {
	d.t.Helper()
	var j api.Job
	d.decode(d.call("POST", "/v1/jobs", http.Header{"Idempotency-Key": {key}}, mustJSON(d.t, req)), http.StatusAccepted, &j)
	return j
}

// job reads GET /v1/jobs/{id}.
func (d *devProc) job(id string) api.Job {
	d.t.Helper()
	var j api.Job
	d.decode(d.call("GET", "/v1/jobs/"+id, nil, nil), http.StatusOK, &j)
	return j
}

// jobs reads every page of GET /v1/jobs.
func (d *devProc) jobs() []api.Job {
	d.t.Helper()
	var all []api.Job
	cursor := ""
	for {
		var page api.JobList
		path := "/v1/jobs"
		if cursor != "" {
			path += "?cursor=" + cursor
		}
		d.decode(d.call("GET", path, nil, nil), http.StatusOK, &page)
		all = append(all, page.Jobs...)
		if page.NextCursor == "" {
			return all
		}
		cursor = page.NextCursor
	}
}

// waitFinal polls the job until it is in a final status or timeout passes,
// and returns the last view.
func (d *devProc) waitFinal(id string, timeout time.Duration) api.Job {
	d.t.Helper()
	var j api.Job
	poll(timeout, 50*time.Millisecond, func() bool {
		j = d.job(id)
		switch j.Status {
		case "completed", "partial", "failed", "cancelled":
			return true
		}
		return false
	})
	return j
}

// logEvents returns the JSON log records of the process (all runs) whose
// msg is msg.
func (d *devProc) logEvents(msg string) []map[string]any {
	d.t.Helper()
	b, err := os.ReadFile(d.stderr)
	if err != nil {
		d.t.Fatalf("read qunfa dev's log: %v", err)
	}
	var out []map[string]any
	for _, line := range bytes.Split(b, []byte("\n")) {
		if len(line) == 0 || line[0] != '{' {
			continue
		}
		var rec map[string]any
		if json.Unmarshal(line, &rec) == nil && rec["msg"] == msg {
			out = append(out, rec)
		}
	}
	return out
}

// ---- jobs and their judgement by the delivery log ----

// jobRequest is the body of POST /v1/jobs.
type jobRequest struct {
	Name       string      `json:"name"`
	Template   string      `json:"template"`
	Recipients []recipient `json:"recipients"`
	Budget     int64       `json:"budget,omitempty"`
	RatePerSec float64     `json:"rate_per_sec,omitempty"`
}

type recipient struct {
	Account string            `json:"account"`
	To      string            `json:"to"`
	Vars    map[string]string `json:"vars,omitempty"`
}

// testTemplate is the template of the generated jobs; expectedContent is
// what it renders to.
const testTemplate = "Hi {{name}}, your code is {{code}}."

func expectedContent(r recipient) string {
	return "Hi " + r.Vars["name"] + ", your code is " + r.Vars["code"] + "."
}

// recipientsFor makes n recipients of one account.
func recipientsFor(account string, n int) []recipient {
	out := make([]recipient, n)
	for i := range out {
		out[i] = recipient{Account: account, To: fmt.Sprintf("%s-u%05d", account, i),
			Vars: map[string]string{"name": fmt.Sprintf("客户%d", i), "code": fmt.Sprintf("%s/%d", account, i*7)}}
	}
	return out
}

// deliveryKey names one recipient of a job.
type deliveryKey struct{ guid, to string }

// jobDeliveries returns the log lines of one job (message keys are
// "<job id>:<seq>").
func jobDeliveries(ds []mockprovider.Delivery, jobID string) []mockprovider.Delivery {
	var out []mockprovider.Delivery
	for _, d := range ds {
		if strings.HasPrefix(d.Key, jobID+":") {
			out = append(out, d)
		}
	}
	return out
}

// checkExactlyOnce asserts that the job's lines of the delivery log hold
// every recipient exactly once, with its rendered content, and nothing
// else. It returns the job's lines.
func checkExactlyOnce(t testing.TB, ds []mockprovider.Delivery, jobID string, rcs []recipient) []mockprovider.Delivery {
	t.Helper()
	want := make(map[deliveryKey]string, len(rcs))
	for _, r := range rcs {
		want[deliveryKey{r.Account, r.To}] = expectedContent(r)
	}
	lines := jobDeliveries(ds, jobID)
	keys := map[string]int{}
	got := map[deliveryKey]int{}
	var dupKeys, dupRecipients, unexpected, wrongContent []string
	for _, d := range lines {
		if keys[d.Key]++; keys[d.Key] == 2 {
			dupKeys = append(dupKeys, d.Key)
		}
		k := deliveryKey{d.GUID, d.ToID}
		if got[k]++; got[k] == 2 {
			dupRecipients = append(dupRecipients, d.GUID+"/"+d.ToID)
		}
		content, ok := want[k]
		switch {
		case !ok:
			unexpected = append(unexpected, d.GUID+"/"+d.ToID)
		case d.Content != content:
			wrongContent = append(wrongContent, fmt.Sprintf("%s/%s: %q, want %q", d.GUID, d.ToID, d.Content, content))
		}
	}
	var missing []string
	for k := range want {
		if got[k] == 0 {
			missing = append(missing, k.guid+"/"+k.to)
		}
	}
	report := func(what string, xs []string) {
		if len(xs) > 0 {
			t.Errorf("delivery log of job %s: %d %s, e.g. %v", jobID, len(xs), what, xs[:min(len(xs), 5)])
		}
	}
	report("message keys delivered more than once (DESIGN rule 1: no duplicate sends)", dupKeys)
	report("recipients delivered more than once (DESIGN rule 1: no duplicate sends)", dupRecipients)
	report("recipients missing (DESIGN rule 2: nothing lost)", missing)
	report("deliveries to recipients not in the job", unexpected)
	report("deliveries with the wrong content", wrongContent)
	return lines
}

// checkCompleted asserts the job completed with every item confirmed and
// counts that agree with the delivery log.
func checkCompleted(t testing.TB, j api.Job, total, logLines int) {
	t.Helper()
	c := j.Counts
	if j.Status != "completed" {
		t.Errorf("job %s is %q, want completed (counts %+v, failures %v)", j.ID, j.Status, c, j.Failures)
	}
	if j.Total != int64(total) {
		t.Errorf("job %s total = %d, want %d", j.ID, j.Total, total)
	}
	if c.Confirmed != j.Total || c.Pending+c.Submitted+c.Failed+c.Abandoned != 0 {
		t.Errorf("job %s counts %+v, want all %d confirmed", j.ID, c, j.Total)
	}
	if c.Confirmed != int64(logLines) {
		t.Errorf("job %s confirmed %d, but the delivery log has %d lines of it", j.ID, c.Confirmed, logLines)
	}
	if j.FinishedAt == nil && j.Status == "completed" {
		t.Errorf("job %s is completed without finished_at", j.ID)
	}
}

// checkNoRateLimited asserts the mock never refused a call for rate.
func checkNoRateLimited(t testing.TB, stats map[string]mockprovider.AccountStats) {
	t.Helper()
	for guid, s := range stats {
		if s.RateLimited != 0 {
			t.Errorf("mock answered 45009 %d times to account %s (DESIGN rule 3: never over the rate); stats %+v", s.RateLimited, guid, s)
		}
	}
}
