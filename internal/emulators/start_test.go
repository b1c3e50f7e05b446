package emulators

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestHelperEmulator is not a test: run as a child by a fake emulator
// script, it listens on the port given after "--" until killed.
func TestHelperEmulator(t *testing.T) {
	if os.Getenv("QUNFA_HELPER_EMULATOR") != "1" {
		t.Skip("helper process")
	}
	args := os.Args
	for len(args) > 0 && args[0] != "--" {
		args = args[1:]
	}
	l, err := net.Listen("tcp", "127.0.0.1:"+args[1])
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	for {
		c, err := l.Accept()
		if err != nil {
			os.Exit(0)
		}
		c.Close()
	}
}

// fakeEmulator installs an emulator named name in a temporary tools
// directory: a script that fails with failOutput the first failures
// times it runs, then listens on its port.
func fakeEmulator(t *testing.T, name, failOutput string, failures int) {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "node_modules", ".bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	counter := filepath.Join(dir, "runs")
	script := fmt.Sprintf(`#!/bin/sh
n=$(cat %[1]q 2>/dev/null || echo 0)
echo $((n + 1)) > %[1]q
if [ "$n" -lt %[2]d ]; then echo %[3]q; exit 1; fi
QUNFA_HELPER_EMULATOR=1 exec %[4]q -test.run='^TestHelperEmulator$' -- "$@"
`, counter, failures, failOutput, self)
	if err := os.WriteFile(filepath.Join(bin, name), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(DirEnv, dir)
	t.Cleanup(func() {
		b, _ := os.ReadFile(counter)
		t.Logf("%s ran %s times", name, strings.TrimSpace(string(b)))
	})
}

func runs(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(os.Getenv(DirEnv), "runs"))
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// An emulator whose port another process bound between FreePort and its
// own listen (EADDRINUSE) is started again on another port.
func TestStartRetriesATakenPort(t *testing.T) {
	fakeEmulator(t, "fake", "Error: listen EADDRINUSE: address already in use 127.0.0.1:1", 2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := Start(ctx, "fake", nil, func(port int) []string { return []string{strconv.Itoa(port)} })
	if err != nil {
		t.Fatalf("Start after two taken ports: %v", err)
	}
	defer p.Stop()
	c, err := net.DialTimeout("tcp", strings.TrimPrefix(p.Endpoint, "http://"), 5*time.Second)
	if err != nil {
		t.Fatalf("the emulator started does not listen at %s: %v", p.Endpoint, err)
	}
	c.Close()
	if got := runs(t); got != 3 {
		t.Fatalf("emulator started %d times, want 3 (two taken ports, then listening)", got)
	}
}

// moto_server is started from PATH, not the tools directory (StartBin);
// Python's werkzeug says "Address already in use" where node says
// EADDRINUSE, and a taken port is tried again just the same.
func TestStartBinRetriesATakenPortOfAProgramOnPath(t *testing.T) {
	fakeEmulator(t, "fake", "OSError: [Errno 98] Address already in use", 1)
	installed := os.Getenv(DirEnv)
	bin := filepath.Join(installed, "node_modules", ".bin", "fake")
	t.Setenv(DirEnv, t.TempDir()) // nothing installed there: StartBin must not look
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := StartBin(ctx, "moto_server", bin, nil, func(port int) []string { return []string{strconv.Itoa(port)} })
	if err != nil {
		t.Fatalf("StartBin after a taken port: %v", err)
	}
	defer p.Stop()
	c, err := net.DialTimeout("tcp", strings.TrimPrefix(p.Endpoint, "http://"), 5*time.Second)
	if err != nil {
		t.Fatalf("the program started does not listen at %s: %v", p.Endpoint, err)
	}
	c.Close()
	t.Setenv(DirEnv, installed)
	if got := runs(t); got != 2 {
		t.Fatalf("program started %d times, want 2 (a taken port, then listening)", got)
	}
	if !strings.Contains(filepath.Base(p.LogPath), "moto_server") {
		t.Errorf("log %s is not named for the program", p.LogPath)
	}
}

// Start gives up after startAttempts taken ports, and never retries an
// emulator that failed for another reason.
func TestStartGivesUp(t *testing.T) {
	t.Run("taken every time", func(t *testing.T) {
		fakeEmulator(t, "fake", "Error: listen EADDRINUSE", 100)
		_, err := Start(context.Background(), "fake", nil, func(port int) []string { return []string{strconv.Itoa(port)} })
		if !errors.Is(err, errPortTaken) {
			t.Fatalf("err = %v, want errPortTaken", err)
		}
		if got := runs(t); got != startAttempts {
			t.Fatalf("emulator started %d times, want %d", got, startAttempts)
		}
	})
	t.Run("other failure", func(t *testing.T) {
		fakeEmulator(t, "fake", "SyntaxError: unexpected token", 100)
		_, err := Start(context.Background(), "fake", nil, func(port int) []string { return []string{strconv.Itoa(port)} })
		if err == nil || errors.Is(err, errPortTaken) || !strings.Contains(err.Error(), "exited before listening") {
			t.Fatalf("err = %v, want an exit before listening, not a taken port", err)
		}
		if got := runs(t); got != 1 {
			t.Fatalf("emulator started %d times, want 1", got)
		}
	})
}
