package control_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/qunfa/qunfa/internal/control"
	"github.com/qunfa/qunfa/internal/store"
)

// logBuffer is a logger whose text output a test reads.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestFailedRepairIsLogged: when an operator's change dies before folding
// its counts, the shard is recounted at once; if that recount fails too the
// shard stays dirty, and the operator learns it from a warning — which is
// never written when the recount repaired the counts.
func TestFailedRepairIsLogged(t *testing.T) {
	t.Parallel()
	const warning = "cannot recount a shard after a failed change; it stays dirty"
	for _, tc := range []struct {
		name     string
		wrap     func(store.Store) store.Store
		wantWarn bool
	}{
		{"fold and recount fail", func(s store.Store) store.Store { return crashBeforeFold{s} }, true},
		{"fold fails, recount repairs", func(s store.Store) store.Store { return failFold{s} }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			ctx := context.Background()
			jobID, items := f.runningJob(t, 2)
			f.mark(t, jobID, store.ItemError{Category: store.CategoryUncertain, Message: "response timeout"}, items[0].Seq)
			var logs logBuffer
			ctl := &control.Controller{Store: tc.wrap(f.store), Queue: f.ctl.Queue, Clock: f.clk,
				Log: slog.New(slog.NewTextHandler(&logs, nil))}
			if _, err := ctl.Resolve(ctx, jobID, items[0].Seq, control.Delivered); err == nil {
				t.Fatal("resolve whose fold failed: want an error")
			}
			if got := strings.Contains(logs.String(), warning); got != tc.wantWarn {
				t.Fatalf("warning %q logged: %v, want %v; log:\n%s", warning, got, tc.wantWarn, logs.String())
			}
			sh, err := f.store.GetShard(ctx, jobID, 0)
			if err != nil {
				t.Fatal(err)
			}
			// The recount makes the counts true (the mark stays for the
			// reconciler's sweep); without it they still say submitted.
			if repaired := sh.Counts.Confirmed == 1; repaired == tc.wantWarn || !sh.Dirty {
				t.Fatalf("shard dirty %v, counts %+v: the warning must say exactly when the counts were left unrepaired", sh.Dirty, sh.Counts)
			}
		})
	}
}
