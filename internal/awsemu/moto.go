package awsemu

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/emulators"
)

// MotoEndpointEnv names the variable that points tests at an existing
// moto server (or another endpoint serving the same APIs) instead of
// starting one.
const MotoEndpointEnv = "QUNFA_TEST_MOTO_ENDPOINT"

// moto is the process-wide moto server, started at most once.
var moto struct {
	once sync.Once
	proc *Process
	err  error
}

// Moto returns the endpoint of a moto server (python moto, `moto_server` on
// PATH), which emulates many AWS APIs on one port, EventBridge and SQS
// among them: QUNFA_TEST_MOTO_ENDPOINT when set, otherwise a server started
// once per test process on 127.0.0.1 (StopAll from TestMain stops it). If
// it cannot start, tb is skipped (or failed, see Unavailable).
func Moto(tb testing.TB) string {
	tb.Helper()
	if ep := os.Getenv(MotoEndpointEnv); ep != "" {
		return ep
	}
	moto.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		moto.proc, moto.err = startMoto(ctx)
	})
	if moto.err != nil {
		Unavailable(tb, "moto_server (EventBridge/SQS emulator)", moto.err)
	}
	return moto.proc.Endpoint
}

// startMoto runs moto_server in its own process group on a free port of
// 127.0.0.1 and waits until it accepts connections (emulators.StartBin: a
// port taken before moto bound it is tried again on another). moto is not
// an npm package, so it is looked up on PATH rather than through Bin.
func startMoto(ctx context.Context) (*Process, error) {
	bin, err := exec.LookPath("moto_server")
	if err != nil {
		return nil, fmt.Errorf("moto_server not on PATH (pip install 'moto[server]'): %w", err)
	}
	p, err := emulators.StartBin(ctx, "moto_server", bin, nil, func(port int) []string {
		return []string{"-H", "127.0.0.1", "-p", strconv.Itoa(port)}
	})
	if err != nil {
		return nil, err
	}
	register(p)
	return p, nil
}
