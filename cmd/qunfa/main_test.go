package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/api"
	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/control"
	"github.com/qunfa/qunfa/internal/queue/sqlitequeue"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/store/sqlitestore"
	"github.com/qunfa/qunfa/internal/submit"
)

const testToken = "cli-test-token"

// apiServer is the real API over the embedded store and queue.
type apiServer struct {
	url   string
	store *sqlitestore.Store
	clock *clock.Fake
}

func newAPIServer(t *testing.T) *apiServer { return newAPIServerWrapped(t, nil) }

// newAPIServerWrapped is newAPIServer with the API behind wrap (nil: none).
func newAPIServerWrapped(t *testing.T, wrap func(http.Handler) http.Handler) *apiServer {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	st, err := sqlitestore.Open(ctx, filepath.Join(dir, "store.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	clk := clock.NewFake(time.Date(2025, 3, 1, 9, 0, 0, 0, time.UTC))
	q, err := sqlitequeue.Open(ctx, filepath.Join(dir, "queue.db"), sqlitequeue.Options{Name: "work", Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = q.Close() })
	if err := st.PutToken(ctx, api.HashToken(testToken), "tenant-a"); err != nil {
		t.Fatal(err)
	}
	for _, a := range []string{"acct-a", "acct-b"} {
		if err := st.GrantAccount(ctx, "tenant-a", a, time.Time{}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.PutAccount(ctx, store.Account{Tenant: "tenant-a", ID: a, RatePerSec: 10, Burst: 10, MaxRecipientsPerCall: 1}); err != nil {
			t.Fatal(err)
		}
	}
	var h http.Handler = api.New(api.Deps{
		Store:     st,
		Submitter: &submit.Submitter{Store: st, Queue: q, Clock: clk},
		Control:   &control.Controller{Store: st, Queue: q, Clock: clk},
		Clock:     clk,
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
		// The webhook tests register receivers on 127.0.0.1.
		AllowPrivateURLs: true,
		// As qunfa dev: new accounts go to the tenant that first PUTs them.
		GrantOnPut: true,
	})
	if wrap != nil {
		h = wrap(h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &apiServer{url: srv.URL, store: st, clock: clk}
}

// syncBuffer is a bytes.Buffer safe for a command running in a goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// result is one finished command.
type result struct {
	code           int
	stdout, stderr string
}

// runCLI runs a command line in-process against the server.
func runCLI(ctx context.Context, srv *apiServer, stdin string, args ...string) result {
	return runCLIOut(ctx, srv, stdin, &syncBuffer{}, args...)
}

// runCLIOut is runCLI writing stdout to out as it goes.
func runCLIOut(ctx context.Context, srv *apiServer, stdin string, out *syncBuffer, args ...string) result {
	var errb syncBuffer
	env := map[string]string{"QUNFA_API_TOKEN": testToken}
	if srv != nil {
		env["QUNFA_URL"] = srv.url
	}
	c := &cli{stdin: strings.NewReader(stdin), stdout: out, stderr: &errb, getenv: func(k string) string { return env[k] },
		pollEvery: time.Millisecond}
	code := c.run(ctx, args)
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

func (r result) want(t *testing.T, code int, stdout, stderr []string) {
	t.Helper()
	if r.code != code {
		t.Errorf("exit code %d, want %d\nstdout: %s\nstderr: %s", r.code, code, r.stdout, r.stderr)
	}
	for _, s := range stdout {
		if !strings.Contains(r.stdout, s) {
			t.Errorf("stdout lacks %q:\n%s", s, r.stdout)
		}
	}
	for _, s := range stderr {
		if !strings.Contains(r.stderr, s) {
			t.Errorf("stderr lacks %q:\n%s", s, r.stderr)
		}
	}
}

const jobFile = `{"name": "spring sale", "template": "Hi {{name}}", "recipients": [
	{"account": "acct-a", "to": "u1", "vars": {"name": "Li"}},
	{"account": "acct-a", "to": "u2", "vars": {"name": "Wang"}},
	{"account": "acct-b", "to": "u3", "vars": {"name": "Zhao"}}]}`

func writeJobFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "job.json")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// submitted runs qunfa submit and returns the job id.
func submitted(t *testing.T, srv *apiServer, args ...string) string {
	t.Helper()
	r := runCLI(context.Background(), srv, jobFile, append([]string{"submit"}, args...)...)
	r.want(t, 0, []string{"running"}, nil)
	id, _, _ := strings.Cut(r.stdout, " ")
	if id == "" {
		t.Fatalf("no job id in %q", r.stdout)
	}
	return id
}

func TestHelpAndUsage(t *testing.T) {
	ctx := context.Background()
	r := runCLI(ctx, nil, "", "help")
	r.want(t, 0, []string{"submit", "status", "watch", "pause", "resume", "cancel", "mock-provider", "dev", "QUNFA_API_TOKEN", "Exit codes"}, nil)
	runCLI(ctx, nil, "", "help", "watch").want(t, 0, []string{"usage: qunfa watch JOB"}, nil)
	runCLI(ctx, nil, "").want(t, 2, nil, []string{"usage: qunfa COMMAND"})
	runCLI(ctx, nil, "", "frobnicate").want(t, 2, nil, []string{`unknown command "frobnicate"`})
	runCLI(ctx, nil, "", "status").want(t, 2, nil, []string{"missing JOB", "usage: qunfa status"})
	runCLI(ctx, nil, "", "pause", "a", "b").want(t, 2, nil, []string{"unexpected arguments: b"})
	runCLI(ctx, nil, "", "submit", "--bogus", "f").want(t, 2, nil, []string{"-bogus"})
	runCLI(ctx, nil, "", "watch", "j", "--interval", "0s").want(t, 2, nil, []string{"--interval"})
	runCLI(ctx, nil, "", "mock-provider", "--addr", "127.0.0.1:0").want(t, 2, nil, []string{"--log FILE is required"})
	runCLI(ctx, nil, "", "mock-provider", "--addr", "127.0.0.1:0", "--log", filepath.Join(t.TempDir(), "d.jsonl"), "--protocol", "sms").want(t, 2, nil, []string{`unknown --protocol "sms"`})
	runCLI(ctx, nil, "", "mock-provider", "--addr", "127.0.0.1:0", "--log", filepath.Join(t.TempDir(), "d.jsonl"), "--pprof", "0.0.0.0:0").want(t, 2, nil, []string{"--pprof must listen on a loopback address"})

	var errb bytes.Buffer
	c := &cli{stdout: io.Discard, stderr: &errb, getenv: func(string) string { return "" }}
	if code := c.run(ctx, []string{"status", "j1"}); code != 1 || !strings.Contains(errb.String(), "QUNFA_API_TOKEN is not set") {
		t.Errorf("no token: %d %s", code, errb.String())
	}
}

func TestSubmitStatusAndCommands(t *testing.T) {
	srv := newAPIServer(t)
	ctx := context.Background()
	file := writeJobFile(t, jobFile)

	id := submitted(t, srv, file, "--idempotency-key", "sale-1")
	runCLI(ctx, srv, "", "submit", "--idempotency-key", "sale-1", file).want(t, 0, []string{id + " running (already submitted"}, nil)
	if other := submitted(t, srv, "-"); other == id {
		t.Error("stdin submission without a key gave the same job")
	}

	r := runCLI(ctx, srv, "", "status", id)
	r.want(t, 0, []string{"job " + id + ` "spring sale": running`, "0 of 3 done", "pending 3", "failures:  none", "acct-a", "acct-b", "0/2", "0/1", "by tenant-a"}, nil)

	r = runCLI(ctx, srv, "", "status", "--json", id)
	r.want(t, 0, nil, nil)
	var j api.Job
	if err := json.Unmarshal([]byte(r.stdout), &j); err != nil || j.ID != id || j.Total != 3 || len(j.Shards) != 2 {
		t.Errorf("status --json: %v %s", err, r.stdout)
	}

	runCLI(ctx, srv, "", "pause", id).want(t, 0, []string{id + " paused (manual)"}, nil)
	runCLI(ctx, srv, "", "pause", id).want(t, 1, nil, []string{"qunfa pause: Not allowed in the job's current status (HTTP 409)", "it is paused"})
	runCLI(ctx, srv, "", "resume", id).want(t, 0, []string{id + " running"}, nil)
	runCLI(ctx, srv, "", "cancel", id).want(t, 0, []string{id + " cancelled"}, nil)
	runCLI(ctx, srv, "", "status", id).want(t, 0, []string{"cancelled", "finished:  2025-03-01"}, nil)
	runCLI(ctx, srv, "", "status", "nope").want(t, 1, nil, []string{"Not found (HTTP 404)"})

	// A refused submission prints every field error.
	bad := writeJobFile(t, `{"template": "Hi {{name}}", "recipients": [{"account": "acct-zz", "to": "u1"}]}`)
	runCLI(ctx, srv, "", "submit", bad).want(t, 1, nil, []string{"Invalid request (HTTP 422)",
		"  recipients[0].account: unknown account"})
	runCLI(ctx, srv, "", "submit", writeJobFile(t, `{"template": `)).want(t, 1, nil, []string{"not valid JSON"})
	runCLI(ctx, srv, "", "submit", filepath.Join(t.TempDir(), "missing.json")).want(t, 1, nil, []string{"no such file"})
	other := strings.Replace(jobFile, "spring sale", "autumn sale", 1)
	runCLI(ctx, srv, "", "submit", "--idempotency-key", "sale-1", writeJobFile(t, other)).want(t, 1, nil, []string{"(HTTP 409)", "sale-1"})

	// Wrong token, unreachable server.
	var errb bytes.Buffer
	c := &cli{stdout: io.Discard, stderr: &errb, getenv: func(k string) string {
		return map[string]string{"QUNFA_URL": srv.url, "QUNFA_API_TOKEN": "wrong"}[k]
	}}
	if code := c.run(ctx, []string{"status", id}); code != 1 || !strings.Contains(errb.String(), "(HTTP 401)") {
		t.Errorf("wrong token: %d %s", code, errb.String())
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close()
	errb.Reset()
	c.getenv = func(k string) string { return map[string]string{"QUNFA_URL": dead, "QUNFA_API_TOKEN": testToken}[k] }
	if code := c.run(ctx, []string{"status", id}); code != 1 || !strings.Contains(errb.String(), "cannot reach the qunfa API") {
		t.Errorf("unreachable: %d %s", code, errb.String())
	}
}

// finish plays the sender: every item of the job ends confirmed, except
// the first item of each shard when failFirst is set, then the job ends in
// status final.
func finish(t *testing.T, srv *apiServer, jobID string, failFirst bool, final store.JobStatus) {
	t.Helper()
	settle(t, srv, jobID, failFirst)
	if _, err := srv.store.TransitionJob(context.Background(), store.TransitionJobParams{JobID: jobID, To: final, At: srv.clock.Now()}); err != nil {
		t.Fatal(err)
	}
}

// settle is finish but for the job's own status: every shard ends
// completed, the job stays as it is.
func settle(t *testing.T, srv *apiServer, jobID string, failFirst bool) {
	t.Helper()
	ctx := context.Background()
	v, err := srv.store.GetJob(ctx, jobID)
	if err != nil {
		t.Fatal(err)
	}
	now := srv.clock.Now()
	for _, sh := range v.Shards {
		claim, err := srv.store.ClaimItems(ctx, store.ClaimItemsParams{JobID: jobID, Index: sh.Index, Max: int(sh.Size), Now: now, ClaimID: "test"})
		if err != nil {
			t.Fatal(err)
		}
		var ups []store.ItemUpdate
		for i, it := range claim.Items {
			u := store.ItemUpdate{Seq: it.Seq, From: store.ItemSubmitted, ClaimID: "test", To: store.ItemConfirmed}
			if failFirst && i == 0 {
				u.To, u.Error = store.ItemFailed, &store.ItemError{Category: store.CategoryPermanent, Code: "81013", Message: "invalid recipient"}
			}
			ups = append(ups, u)
		}
		res, err := srv.store.UpdateItems(ctx, store.UpdateItemsParams{JobID: jobID, Index: sh.Index, Updates: ups, At: now})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := srv.store.AddShardCounts(ctx, store.AddShardCountsParams{JobID: jobID, Index: sh.Index,
			Delta: claim.Delta.Add(res.Delta), FailuresDelta: res.FailuresDelta}); err != nil {
			t.Fatal(err)
		}
		if _, err := srv.store.TransitionShard(ctx, store.TransitionShardParams{JobID: jobID, Index: sh.Index, To: store.ShardCompleted, At: now}); err != nil {
			t.Fatal(err)
		}
	}
}

func TestWatch(t *testing.T) {
	srv := newAPIServer(t)
	ctx := context.Background()

	t.Run("follows a running job until it completes", func(t *testing.T) {
		id := submitted(t, srv, "-")
		done := make(chan result, 1)
		out := &syncBuffer{}
		go func() { done <- runCLIOut(ctx, srv, "", out, "watch", id) }()
		// Let watch show the job running before it ends.
		for deadline := time.Now().Add(30 * time.Second); !strings.Contains(out.String(), "running 0/3"); {
			if time.Now().After(deadline) {
				t.Fatalf("watch never showed the running job: %s", out.String())
			}
			runtime.Gosched()
		}
		finish(t, srv, id, false, store.JobCompleted)
		select {
		case r := <-done:
			r.want(t, 0, []string{"running 0/3 done", "#0 acct-a 0/2 running", "job " + id + " completed: 3 of 3 done", "failures: none"}, nil)
		case <-time.After(30 * time.Second):
			t.Fatal("watch did not end when the job completed")
		}
	})
	t.Run("partial ends 0, or 3 with --strict", func(t *testing.T) {
		id := submitted(t, srv, "-")
		finish(t, srv, id, true, store.JobPartial)
		runCLI(ctx, srv, "", "watch", id).want(t, 0, []string{"partial: 3 of 3 done", "failures: permanent 2"}, nil)
		runCLI(ctx, srv, "", "watch", "--strict", id).want(t, 3, nil, []string{"the job ended partial"})
	})
	t.Run("failed ends 3", func(t *testing.T) {
		id := submitted(t, srv, "-")
		if _, err := srv.store.TransitionJob(ctx, store.TransitionJobParams{JobID: id, To: store.JobFailed, At: srv.clock.Now()}); err != nil {
			t.Fatal(err)
		}
		runCLI(ctx, srv, "", "watch", id).want(t, 3, []string{"failed: 0 of 3 done"}, []string{"the job ended failed"})
	})
	t.Run("progress bars on a terminal", func(t *testing.T) {
		id := submitted(t, srv, "-")
		finish(t, srv, id, true, store.JobPartial)
		var out, errb syncBuffer
		yes := true
		c := &cli{stdout: &out, stderr: &errb, terminal: &yes, pollEvery: time.Millisecond,
			getenv: func(k string) string { return map[string]string{"QUNFA_URL": srv.url, "QUNFA_API_TOKEN": testToken}[k] }}
		if code := c.run(ctx, []string{"watch", id}); code != 0 {
			t.Fatalf("exit %d: %s", code, errb.String())
		}
		for _, s := range []string{"all shards", "#0 acct-a", "#1 acct-b", "3 / 3", "2 / 2", "partial", "failures: permanent 2"} {
			if !strings.Contains(out.String(), s) {
				t.Errorf("bars lack %q:\n%s", s, out.String())
			}
		}
	})
	t.Run("unknown job", func(t *testing.T) {
		runCLI(ctx, srv, "", "watch", "nope").want(t, 1, nil, []string{"Not found (HTTP 404)"})
	})
	t.Run("interrupted", func(t *testing.T) {
		id := submitted(t, srv, "-")
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		r := runCLI(cctx, srv, "", "watch", id)
		if r.code == 0 {
			t.Errorf("interrupted watch exited 0: %s", r.stderr)
		}
	})
}

func TestMockProviderCommand(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	logPath := filepath.Join(t.TempDir(), "deliveries.jsonl")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan result, 1)
	go func() {
		done <- runCLI(ctx, nil, "", "mock-provider", "--addr", addr, "--log", logPath, "--rate", "100")
	}()

	var resp *http.Response
	deadline := time.Now().Add(10 * time.Second)
	for {
		req, _ := http.NewRequest("POST", "http://"+addr+"/message/sendText",
			strings.NewReader(`{"guid": "acct-a", "toId": "u1", "content": "hi"}`))
		req.Header.Set("Idempotency-Key", "job1:0")
		resp, err = http.DefaultClient.Do(req)
		if err == nil {
			break
		}
		select {
		case r := <-done:
			t.Fatalf("mock-provider ended early: %+v", r)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("mock provider never answered: %v", err)
		}
	}
	var ans struct {
		Errcode int    `json:"errcode"`
		Msgid   string `json:"msgid"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&ans)
	resp.Body.Close()
	if ans.Errcode != 0 || ans.Msgid == "" {
		t.Errorf("send answered %+v", ans)
	}
	cancel()
	select {
	case r := <-done:
		r.want(t, 0, nil, nil)
	case <-time.After(30 * time.Second):
		t.Fatal("mock-provider did not stop")
	}
	b, err := os.ReadFile(logPath)
	if err != nil || strings.Count(string(b), "\n") != 1 || !strings.Contains(string(b), `"job1:0"`) {
		t.Errorf("delivery log: %v %q", err, b)
	}
}

// TestDevBackendFlags: a wrong combination of the backend flags of `qunfa
// dev` is refused with a readable message and exit code 2, before anything
// starts.
func TestDevBackendFlags(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--table", "t"}, "--table needs --backend aws"},
		{[]string{"--emulators"}, "--emulators needs --backend aws"},
		{[]string{"--backend", "mysql"}, `--backend must be sqlite or aws, not "mysql"`},
		{[]string{"--backend", "aws"}, "--backend aws needs --queue-url URL"},
		{[]string{"--backend", "aws", "--emulators", "--queue-url", "https://sqs.example/1/q.fifo"}, "--queue-url and --emulators exclude each other"},
		{[]string{"--backend", "aws", "--create", "--queue-url", "https://sqs.example/1/q.fifo"}, "--queue-url and --create exclude each other"},
		{[]string{"--backend", "aws", "--create", "--visibility", "1s"}, "--visibility must be at least 3s"},
	} {
		r := runCLI(ctx, nil, "", append([]string{"dev", "--data-dir", t.TempDir()}, c.args...)...)
		r.want(t, exitUsage, nil, []string{c.want})
	}
}
