package sender_test

import (
	"context"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/submit"
)

// slowFactorStore makes BeginTurn report the shard's slow factor as
// given: a record without one (0) or out of range.
type slowFactorStore struct {
	store.Store
	slow float64
}

func (s slowFactorStore) BeginTurn(ctx context.Context, p store.BeginTurnParams) (store.Shard, error) {
	sh, err := s.Store.BeginTurn(ctx, p)
	if err == nil {
		sh.SlowFactor = s.slow
	}
	return sh, err
}

// TestShardWithoutASlowFactorRunsAtFullSpeed: a shard whose slow factor
// is missing (0) or above 1 was never slowed by rate limiting: its turn
// sends at the account's full rate and folds the shard's slow factor as
// 1, not as a slowdown it never had (0 would be taken for "slowed to
// nothing" and leave the shard crawling back at a tenth of its rate).
func TestShardWithoutASlowFactorRunsAtFullSpeed(t *testing.T) {
	t.Parallel()
	for _, slow := range []float64{0, -0.5, 5} {
		t.Run("", func(t *testing.T) {
			t.Parallel()
			p, _ := fakePipeline(t, sender.Config{ClaimBatch: 1})
			p.account("a", 1000, 1000, 0, 1)
			job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 3)}, "slow")
			s2 := *p.sender
			s2.Store = slowFactorStore{Store: p.store, slow: slow}
			res, err := s2.HandleTurn(context.Background(), p.nextTurn(time.Hour))
			if err != nil || res.Sent != 3 {
				t.Fatalf("slow factor %v read: turn %+v, %v; want 3 sent", slow, res, err)
			}
			sh, err := p.store.GetShard(context.Background(), job.Job.ID, 0)
			if err != nil {
				t.Fatal(err)
			}
			if sh.SlowFactor != 1 {
				t.Fatalf("slow factor %v read: the turn folded %v, want 1 (full speed)", slow, sh.SlowFactor)
			}
		})
	}
}
