package mockprovider

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestLogSurvivesKill runs the mock in a child process, kills it with
// SIGKILL right after its last answer, and checks that every answered
// delivery is in the log.
func TestLogSurvivesKill(t *testing.T) {
	if path := os.Getenv("QUNFA_MOCK_CHILD_LOG"); path != "" {
		runKillChild(path)
		return
	}
	t.Parallel()
	path := filepath.Join(t.TempDir(), "log.jsonl")
	cmd := exec.Command(os.Args[0], "-test.run=^TestLogSurvivesKill$")
	cmd.Env = append(os.Environ(), "QUNFA_MOCK_CHILD_LOG="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	addr, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("child gave no address: %v", err)
	}
	url := "http://" + strings.TrimSpace(addr) + "/message/sendText"
	const n = 50
	for i := 0; i < n; i++ {
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"guid":"a","toId":"u","content":"x"}`))
		req.Header.Set("Idempotency-Key", fmt.Sprint("k", i))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("HTTP %d", resp.StatusCode)
		}
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	lines := readLog(t, path)
	if len(lines) != n || lines[n-1]["key"] != fmt.Sprint("k", n-1) {
		t.Fatalf("log has %d lines after SIGKILL, want %d", len(lines), n)
	}
}

// runKillChild serves a mock and prints its address, until killed.
func runKillChild(path string) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		os.Exit(2)
	}
	fmt.Println(ln.Addr().String())
	_ = serveListener(context.Background(), ln, Config{LogPath: path, Logger: slog.New(slog.DiscardHandler)})
	os.Exit(3)
}
