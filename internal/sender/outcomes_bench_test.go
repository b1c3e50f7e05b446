package sender

import (
	"context"
	"fmt"
	"log/slog"
	"testing"

	"github.com/qunfa/qunfa/internal/alert"
	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/store"
)

type countingPublisher struct{ outcomes int }

func (p *countingPublisher) Publish(_ context.Context, events ...alert.Event) error {
	for _, e := range events {
		p.outcomes += len(e.Detail.(alert.ItemOutcomesDetail).Items)
	}
	return nil
}

// BenchmarkPublishOutcomes records the outcomes of a batch of five calls
// of 80 confirmed recipients each, as a packed send does, publishing them
// when they fill an event.
func BenchmarkPublishOutcomes(b *testing.B) {
	pub := &countingPublisher{}
	tr := &turn{s: &Sender{Outcomes: pub, Clock: clock.NewFake(sizingT0)}, log: slog.New(slog.DiscardHandler),
		job: store.Job{ID: "job-1", Tenant: "t1"}}
	var calls []*pendingCall
	var updates []store.ItemUpdate
	for c := range 5 {
		pc := &pendingCall{}
		for i := range 80 {
			seq := int64(c*80 + i)
			pc.c.items = append(pc.c.items, store.Item{Seq: seq, Account: "big-01", To: fmt.Sprintf("user-%07d", seq), Status: store.ItemPending})
			updates = append(updates, store.ItemUpdate{Seq: seq, To: store.ItemConfirmed, MsgID: fmt.Sprintf("m-%d", seq)})
		}
		calls = append(calls, pc)
	}
	b.ReportAllocs()
	for b.Loop() {
		tr.publishOutcomes(context.Background(), calls, nil, updates, nil, sizingT0)
	}
	if tr.flushOutcomes(context.Background()); pub.outcomes != b.N*len(updates) {
		b.Fatalf("%d outcomes published, want %d", pub.outcomes, b.N*len(updates))
	}
}
