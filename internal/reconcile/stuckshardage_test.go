package reconcile_test

import (
	"context"
	"testing"
	"time"
)

// TestStuckShardAgeIsTheStalestShards: with several stale shards, the
// stuck-shard age a pass reports and publishes (the StuckShard alarm's
// metric) is that of the shard stalest of all, whichever order the pass
// re-drives them in — not of the last one re-driven.
func TestStuckShardAgeIsTheStalestShards(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	g := &gauges{}
	f.rec.Gauges = g
	f.job(t, 1, 2, 0, 0) // its shard last advanced now: 10 minutes stale at the pass
	f.clk.Advance(3 * time.Minute)
	f.job(t, 1, 2, 0, 0) // 7 minutes stale at the pass
	f.clk.Advance(7 * time.Minute)
	rep, err := f.rec.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Redriven != 2 || rep.OldestStuck != 10*time.Minute {
		t.Fatalf("redriven %d, oldest stuck %v; want 2 and 10m (the stalest shard's age)", rep.Redriven, rep.OldestStuck)
	}
	if len(g.stuck) != 1 || g.stuck[0] != 10*time.Minute {
		t.Fatalf("stuck-shard gauge %v, want [10m]", g.stuck)
	}
}
