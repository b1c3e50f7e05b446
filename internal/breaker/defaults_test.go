package breaker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/store"
)

// TestDefaultCooldownIsAMinute: an account whose breaker config leaves the
// cool-down at 0 gets a minute: its shards wait until then, and the first
// to ask at the minute probes.
func TestDefaultCooldownIsAMinute(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	f.account(t, "a", store.BreakerConfig{ConsecutiveFailures: 3})
	if _, err := f.b.Open(ctx, "t", "a", "test"); err != nil {
		t.Fatal(err)
	}
	f.clk.Advance(time.Minute - time.Second)
	if d, err := f.b.Gate(ctx, "t", "a", "s1"); err != nil || d.Allow || d.Wait != time.Second {
		t.Fatalf("a second before the default cool-down ends: %+v %v; want a wait of 1s", d, err)
	}
	f.clk.Advance(time.Second)
	if d, err := f.b.Gate(ctx, "t", "a", "s1"); err != nil || !d.Allow || !d.Probe {
		t.Fatalf("at the end of the default cool-down: %+v %v; want a probe", d, err)
	}
}

// releaseFails is a store whose lease releases fail: a check that dies
// before releasing its lease.
type releaseFails struct{ store.Store }

func (releaseFails) ReleaseLease(context.Context, store.ReleaseLeaseParams) error {
	return errors.New("process died")
}

// TestDeadCheckKeepsOthersOutForItsLease: a check that dies holding the
// lease keeps the next checks out for two minutes (longer than any check
// runs, so two never overlap), and no longer.
func TestDeadCheckKeepsOthersOutForItsLease(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	dying := *f.b
	dying.Store = releaseFails{f.st}
	if _, err := dying.Check(ctx); err == nil {
		t.Fatal("a check whose lease release failed reported no error")
	}
	f.clk.Advance(2*time.Minute - time.Second)
	if rep, err := f.b.Check(ctx); err != nil || !rep.Skipped {
		t.Fatalf("check within the dead check's lease: %+v %v; want skipped", rep, err)
	}
	f.clk.Advance(time.Second)
	if rep, err := f.b.Check(ctx); err != nil || rep.Skipped {
		t.Fatalf("check once the dead check's lease expired: %+v %v; want it to run", rep, err)
	}
}
