package browser

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// testToken is the API token of the qunfa dev process under test.
const testToken = "qf_browser_test_token"

var httpClient = &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{Proxy: nil}}

// chromiumPath finds the browser, or skips the test (fails it under
// QUNFA_REQUIRE_BROWSER=1).
func chromiumPath(t *testing.T) string {
	t.Helper()
	candidates := []string{os.Getenv("QUNFA_CHROMIUM"), "/usr/bin/chromium", "chromium", "chromium-browser"}
	for _, c := range candidates {
		if c == "" {
			continue
		}
		if p, err := exec.LookPath(c); err == nil {
			return p
		}
	}
	msg := "BROWSER TESTS NOT RUN: no chromium found (install it with `apt-get install -y chromium`, or set QUNFA_CHROMIUM)"
	if os.Getenv("QUNFA_REQUIRE_BROWSER") == "1" {
		t.Fatal(msg + "; QUNFA_REQUIRE_BROWSER=1 demands it")
	}
	fmt.Fprintln(os.Stderr, "e2e/browser: "+msg)
	t.Skip(msg)
	return ""
}

// artifactsDir is where screenshots go.
func artifactsDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("QUNFA_ARTIFACTS")
	if dir == "" {
		dir = "artifacts" // e2e/browser/artifacts: tests run in the package directory
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

// buildQunfa builds the qunfa binary, or returns QUNFA_E2E_BIN.
func buildQunfa(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("QUNFA_E2E_BIN"); bin != "" {
		return bin
	}
	bin := filepath.Join(t.TempDir(), "qunfa")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/qunfa/qunfa/cmd/qunfa")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build qunfa: %v\n%s", err, out)
	}
	return bin
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// stack is a running `qunfa dev`.
type stack struct {
	t       *testing.T
	apiURL  string
	mockURL string
	log     string
}

// startStack runs `qunfa dev` with the mock provider on free ports and
// stops it (SIGINT, then SIGKILL) when the test ends.
func startStack(t *testing.T, bin string) *stack {
	t.Helper()
	dir := t.TempDir()
	addr, mockAddr := freeAddr(t), freeAddr(t)
	s := &stack{t: t, apiURL: "http://" + addr, mockURL: "http://" + mockAddr, log: filepath.Join(dir, "qunfa-dev.log")}
	logf, err := os.Create(s.log)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "dev", "--addr", addr, "--mock-addr", mockAddr, "--data-dir", filepath.Join(dir, "data"), "--workers", "4", "--allow-private-urls", "--webhook-retry-base", "1s")
	cmd.Env = append(os.Environ(), "QUNFA_API_TOKEN="+testToken)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(s.log)
			if len(b) > 4000 {
				b = b[len(b)-4000:]
			}
			t.Logf("tail of qunfa dev's log:\n%s", b)
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := httpClient.Get(s.apiURL + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s
			}
		}
		select {
		case <-done:
			b, _ := os.ReadFile(s.log)
			t.Fatalf("qunfa dev exited at start:\n%s", b)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("qunfa dev did not answer /healthz within 20 s: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// call does an API request with the token and decodes a 2xx answer into out.
func (s *stack) call(method, path string, body, out any) {
	s.t.Helper()
	if err := s.do(method, s.apiURL+path, body, out, map[string]string{"Authorization": "Bearer " + testToken}); err != nil {
		s.t.Fatal(err)
	}
}

// mock configures the mock provider.
func (s *stack) mock(method, path string, body any) {
	s.t.Helper()
	if err := s.do(method, s.mockURL+path, body, nil, nil); err != nil {
		s.t.Fatal(err)
	}
}

func (s *stack) do(method, u string, body, out any, headers map[string]string) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, u, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %s: %s", method, u, resp.Status, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("%s %s: decode %s: %w", method, u, b, err)
		}
	}
	return nil
}

// job is the part of the API's job view the test reads.
type job struct {
	ID          string           `json:"id"`
	Status      string           `json:"status"`
	PauseReason *string          `json:"pause_reason"`
	Total       int64            `json:"total"`
	Counts      map[string]int64 `json:"counts"`
	Failures    map[string]int64 `json:"failures"`
}

func (s *stack) job(id string) job {
	s.t.Helper()
	var j job
	s.call("GET", "/v1/jobs/"+url.PathEscape(id), nil, &j)
	return j
}

// itemSeqs lists the seqs of a job's items with the given status and
// category, every page.
func (s *stack) itemSeqs(id, status, category string) map[int64]bool {
	s.t.Helper()
	seqs := map[int64]bool{}
	cursor := ""
	for {
		var page struct {
			Items []struct {
				Seq int64 `json:"seq"`
			} `json:"items"`
			NextCursor string `json:"next_cursor"`
		}
		q := url.Values{"status": {status}, "category": {category}, "limit": {"1000"}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		s.call("GET", "/v1/jobs/"+url.PathEscape(id)+"/items?"+q.Encode(), nil, &page)
		for _, it := range page.Items {
			seqs[it.Seq] = true
		}
		if page.NextCursor == "" {
			return seqs
		}
		cursor = page.NextCursor
	}
}

// newBrowser starts headless Chromium with a fresh profile, with the flags
// a closed network needs, and returns a tab's context.
func newBrowser(t *testing.T, chromium string) context.Context {
	t.Helper()
	out, err := os.Create(filepath.Join(t.TempDir(), "chromium.log"))
	if err != nil {
		t.Fatal(err)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("no-proxy-server", true),
		chromedp.Flag("lang", "en-US"),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1366, 900), // a laptop screen
		chromedp.CombinedOutput(out),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc()
		out.Close()
	})
	// Start the browser on the tab's own context: a browser started by a
	// derived context (one with a timeout) would die with it.
	if err := chromedp.Do(ctx); err != nil {
		b, _ := os.ReadFile(out.Name())
		t.Fatalf("start chromium: %v\n%s", err, b)
	}
	return ctx
}

// screenshot saves a full-page PNG into the artifacts directory.
func screenshot(t *testing.T, ctx context.Context, dir, name string) string {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if !bytes.HasPrefix(png, []byte("\x89PNG")) {
		t.Fatalf("screenshot %s is not a PNG", name)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", p)
	return p
}

// digits keeps the digits of a formatted number ("1,234" → "1234").
func digits(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' {
			return r
		}
		return -1
	}, s)
}
