package wecomapi

import (
	"context"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/qunfa/qunfa/internal/mockprovider"
	"github.com/qunfa/qunfa/internal/provider"
)

// BenchmarkSendViaMock measures single-recipient sends through the adapter
// against the mock on 127.0.0.1, with 64 concurrent callers like the
// sender.
func BenchmarkSendViaMock(b *testing.B) {
	m, err := mockprovider.New(mockprovider.Config{LogPath: filepath.Join(b.TempDir(), "d.jsonl"), Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	f := &fixture{mock: m}
	srv := newLoopbackServer(b, m)
	f.client, err = New(Config{BaseURL: srv, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	defer f.client.Close()
	var seq atomic.Int64
	b.SetParallelism(32) // 32 × GOMAXPROCS(2) = 64 callers
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			n := strconv.FormatInt(seq.Add(1), 10)
			res, err := f.client.Send(context.Background(), provider.SendRequest{
				Account: "acct-" + n[len(n)-1:], Keys: []string{"k" + n}, To: []string{"u" + n}, Content: "hello",
			})
			if err != nil || !res.Recipients[0].Accepted {
				b.Errorf("send %s: %+v %v", n, res, err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "sends/s")
}
