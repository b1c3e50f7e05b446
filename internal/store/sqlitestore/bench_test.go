package sqlitestore

import (
	"fmt"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/store"
)

const benchBatch = 100

// benchStore opens a store in a temp dir with one running job of one shard
// holding n pending items.
func benchStore(b *testing.B, n int) *Store {
	b.Helper()
	ctx := b.Context()
	s, err := Open(ctx, filepath.Join(b.TempDir(), "store.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	p := store.CreateJobParams{Job: store.Job{ID: "bench", Tenant: "t", Total: int64(n), CreatedAt: crashEpoch},
		Shards: []store.Shard{{Index: 0, Account: "acct", Size: int64(n)}}}
	if _, err := s.CreateJob(ctx, p); err != nil {
		b.Fatal(err)
	}
	page := make([]store.Item, 0, store.MaxPutItems)
	for seq := range int64(n) {
		page = append(page, store.Item{Seq: seq, Account: "acct", To: fmt.Sprintf("wxid_%012d", seq),
			Vars: map[string]string{"name": "Li Lei", "coupon": "ABCD-1234"}})
		if len(page) == cap(page) || seq == int64(n)-1 {
			if err := s.PutItems(ctx, store.PutItemsParams{JobID: "bench", Items: page}); err != nil {
				b.Fatal(err)
			}
			page = page[:0]
		}
	}
	if _, err := s.TransitionJob(ctx, store.TransitionJobParams{JobID: "bench", To: store.JobRunning, At: crashEpoch}); err != nil {
		b.Fatal(err)
	}
	return s
}

// BenchmarkClaimAndConfirm measures the sender's store cost per message:
// each iteration claims 50 items and confirms the same 50 with UpdateItems.
func BenchmarkClaimAndConfirm(b *testing.B) {
	s := benchStore(b, b.N*benchBatch)
	ctx := b.Context()
	now := crashEpoch
	ups := make([]store.ItemUpdate, benchBatch)
	b.ResetTimer()
	cpu0 := cpuTime(b)
	for i := range b.N {
		claimID := fmt.Sprintf("c%d", i)
		c, err := s.ClaimItems(ctx, store.ClaimItemsParams{JobID: "bench", Max: benchBatch, Now: now, ClaimID: claimID})
		if err != nil || len(c.Items) != benchBatch {
			b.Fatalf("claim %d: %d items, %v", i, len(c.Items), err)
		}
		for k, it := range c.Items {
			ups[k] = store.ItemUpdate{Seq: it.Seq, From: store.ItemSubmitted, ClaimID: claimID, To: store.ItemConfirmed}
		}
		u, err := s.UpdateItems(ctx, store.UpdateItemsParams{JobID: "bench", Updates: ups, At: now})
		if err != nil || len(u.Rejected) != 0 {
			b.Fatalf("confirm %d: rejected %v, %v", i, u.Rejected, err)
		}
	}
	reportItems(b, cpu0)
}

// BenchmarkSenderTurn adds what a sender turn does around claim and
// confirm: taking the batch's tokens and advancing the shard.
func BenchmarkSenderTurn(b *testing.B) {
	s := benchStore(b, b.N*benchBatch)
	ctx := b.Context()
	now := crashEpoch
	if _, err := s.BeginTurn(ctx, store.BeginTurnParams{JobID: "bench", Turn: 1, MessageID: "m", At: now}); err != nil {
		b.Fatal(err)
	}
	ups := make([]store.ItemUpdate, benchBatch)
	b.ResetTimer()
	cpu0 := cpuTime(b)
	for i := range b.N {
		now = now.Add(time.Millisecond)
		if _, err := s.TakeTokens(ctx, store.TakeTokensParams{Bucket: "acct", Want: benchBatch, RatePerSec: 1e9, Burst: 1e6, Now: now}); err != nil {
			b.Fatal(err)
		}
		claimID := fmt.Sprintf("c%d", i)
		c, err := s.ClaimItems(ctx, store.ClaimItemsParams{JobID: "bench", Max: benchBatch, Now: now, ClaimID: claimID})
		if err != nil || len(c.Items) != benchBatch {
			b.Fatalf("claim %d: %d items, %v", i, len(c.Items), err)
		}
		for k, it := range c.Items {
			ups[k] = store.ItemUpdate{Seq: it.Seq, From: store.ItemSubmitted, ClaimID: claimID, To: store.ItemConfirmed}
		}
		u, err := s.UpdateItems(ctx, store.UpdateItemsParams{JobID: "bench", Updates: ups, At: now})
		if err != nil || len(u.Rejected) != 0 {
			b.Fatalf("confirm %d: rejected %v, %v", i, u.Rejected, err)
		}
		if _, err := s.AdvanceShard(ctx, store.AdvanceShardParams{JobID: "bench", Turn: 1, Delta: c.Delta.Add(u.Delta),
			Cursor: c.Items[benchBatch-1].Seq + 1, At: now}); err != nil {
			b.Fatal(err)
		}
	}
	reportItems(b, cpu0)
}

// cpuTime is the CPU time (user + system) the process has used so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportItems reports throughput in items per wall-clock second and the
// CPU time spent per item, which stays meaningful on a busy machine.
func reportItems(b *testing.B, cpu0 time.Duration) {
	items := float64(b.N * benchBatch)
	b.ReportMetric(items/b.Elapsed().Seconds(), "items/s")
	b.ReportMetric(float64(cpuTime(b)-cpu0)/items, "cpu-ns/item")
}

// BenchmarkPutItems measures planning's store cost per item: writing
// pages of store.MaxPutItems pending items of one shard.
func BenchmarkPutItems(b *testing.B) {
	ctx := b.Context()
	s, err := Open(ctx, filepath.Join(b.TempDir(), "store.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	n := b.N * store.MaxPutItems
	if _, err := s.CreateJob(ctx, store.CreateJobParams{Job: store.Job{ID: "bench", Tenant: "t", Total: int64(n), CreatedAt: crashEpoch},
		Shards: []store.Shard{{Index: 0, Account: "acct", Size: int64(n)}}}); err != nil {
		b.Fatal(err)
	}
	page := make([]store.Item, store.MaxPutItems)
	b.ResetTimer()
	cpu0 := cpuTime(b)
	seq := int64(0)
	for range b.N {
		for k := range page {
			page[k] = store.Item{Seq: seq, Account: "acct", To: fmt.Sprintf("wxid_%012d", seq)}
			seq++
		}
		if err := s.PutItems(ctx, store.PutItemsParams{JobID: "bench", Items: page}); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	items := float64(b.N * len(page))
	b.ReportMetric(items/b.Elapsed().Seconds(), "items/s")
	b.ReportMetric(float64(cpuTime(b)-cpu0)/items, "cpu-ns/item")
}

// BenchmarkListItemsPage measures an operator's page of 50 items of a
// job of 20,000 read after a cursor, for items in runs of up to runMax
// and for items that each have a ref (a run of one each, so the runSpan
// seqs before the cursor are as many rows).
func BenchmarkListItemsPage(b *testing.B) {
	for _, refs := range []bool{false, true} {
		b.Run(fmt.Sprintf("refs=%v", refs), func(b *testing.B) {
			ctx := b.Context()
			s, err := Open(ctx, filepath.Join(b.TempDir(), "store.db"))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = s.Close() })
			const n = 20000
			if _, err := s.CreateJob(ctx, store.CreateJobParams{Job: store.Job{ID: "bench", Tenant: "t", Total: n, CreatedAt: crashEpoch},
				Shards: []store.Shard{{Index: 0, Account: "acct", Size: n}}}); err != nil {
				b.Fatal(err)
			}
			page := make([]store.Item, 0, store.MaxPutItems)
			for seq := range int64(n) {
				it := store.Item{Seq: seq, Account: "acct", To: fmt.Sprintf("wxid_%012d", seq)}
				if refs {
					it.Ref = fmt.Sprintf("order-%d", seq)
				}
				if page = append(page, it); len(page) == cap(page) {
					if err := s.PutItems(ctx, store.PutItemsParams{JobID: "bench", Items: page}); err != nil {
						b.Fatal(err)
					}
					page = page[:0]
				}
			}
			b.ResetTimer()
			for i := range b.N {
				after := int64(5000 + i%10000)
				res, err := s.ListItems(ctx, store.ListItemsParams{JobID: "bench", Limit: 50, Cursor: encodeCursor("i", after)})
				if err != nil || len(res.Items) != 50 || res.Items[0].Seq != after+1 {
					b.Fatalf("page after %d: %d items, %v", after, len(res.Items), err)
				}
			}
		})
	}
}
