package sender_test

import (
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/submit"
)

// BenchmarkPipeline20k measures the in-process engine end to end: submit
// 20,000 single-recipient messages over one unlimited account, then the
// local event source and senders deliver them to the mock provider over
// HTTP on 127.0.0.1. Reports messages per second from submit to completed.
func BenchmarkPipeline20k(b *testing.B) {
	for range b.N {
		p := newPipeline(b, pipelineOptions{sender: sender.Config{ClaimBatch: 100, Concurrency: 32}, shardSplit: 2500})
		p.account("bulk", 1e6, 1e6, 0, 1)
		start := time.Now()
		job := p.submit(submit.Request{Name: "bench", Template: "hello {{n}}", Recipients: recipients([]string{"bulk"}, 20000)}, "bench")
		v := p.runUntilFinal(job.Job.ID, 8, 5*time.Minute)
		el := time.Since(start)
		if v.Job.Status != store.JobCompleted || v.Counts().Confirmed != 20000 {
			b.Fatalf("status %s counts %+v", v.Job.Status, v.Counts())
		}
		b.ReportMetric(20000/el.Seconds(), "msg/s")
	}
}
