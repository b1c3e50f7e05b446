package queuetest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/qunfa/qunfa/internal/queue"
)

func testRedelivery(e *env) {
	q := e.fx.Queue
	v := e.vis()
	e.send(q, "g", "r", "redeliver")
	m1 := e.receiveUntil(q, v, bodyIs("redeliver"), nil)[0]
	if m1.ReceiveCount != 1 {
		e.t.Errorf("first ReceiveCount %d, want 1", m1.ReceiveCount)
	}
	e.expectNone(q, "before the visibility timeout")
	e.elapse(v)
	m2 := e.receiveUntil(q, longVis, bodyIs("redeliver"), nil)[0]
	if m2.ID != m1.ID {
		e.t.Errorf("redelivered ID %s, want %s", m2.ID, m1.ID)
	}
	if m2.ReceiveCount != 2 {
		e.t.Errorf("redelivered ReceiveCount %d, want 2", m2.ReceiveCount)
	}
	if m2.ReceiptHandle == m1.ReceiptHandle {
		e.t.Error("redelivery reused the receipt handle")
	}
	if err := q.Delete(e.ctx, m1.ReceiptHandle); !errors.Is(err, queue.ErrNotFound) {
		e.t.Errorf("Delete with the stale handle: err %v, want ErrNotFound", err)
	}
	if err := q.ChangeVisibility(e.ctx, m1.ReceiptHandle, 0); !errors.Is(err, queue.ErrNotFound) {
		e.t.Errorf("ChangeVisibility with the stale handle: err %v, want ErrNotFound", err)
	}
	e.expectNone(q, "while the redelivery is in flight")
	e.del(q, m2)
	e.passLongVis()
	e.expectNone(q, "after Delete of the redelivery")
}

func testChangeVisibilityExtends(e *env) {
	q := e.fx.Queue
	v := e.vis()
	e.send(q, "g", "x0", "extend#0")
	e.send(q, "g", "x1", "extend#1")
	m := e.receiveUntil(q, v, bodyIs("extend#0"), nil)[0]
	if err := q.ChangeVisibility(e.ctx, m.ReceiptHandle, 3*v); err != nil {
		e.t.Fatalf("ChangeVisibility: %v", err)
	}
	e.elapse(2 * v) // past the original timeout, inside the extended one
	e.expectNone(q, "inside the extended visibility timeout (group must stay locked)")
	e.elapse(v)
	again := e.receiveUntil(q, longVis, func(queue.Message) bool { return true }, nil)[0]
	if again.ID != m.ID || again.ReceiveCount != 2 {
		e.t.Fatalf("after the extended timeout got %q (count %d), want extend#0 again (count 2)", again.Body, again.ReceiveCount)
	}
	e.del(q, again)
}

func testChangeVisibilityShortens(e *env) {
	q := e.fx.Queue
	e.send(q, "g", "s0", "shorten")
	m := e.receiveUntil(q, longVis, bodyIs("shorten"), nil)[0]
	e.expectNone(q, "while in flight")
	if err := q.ChangeVisibility(e.ctx, m.ReceiptHandle, 0); err != nil {
		e.t.Fatalf("ChangeVisibility(0): %v", err)
	}
	again := e.receiveUntil(q, longVis, bodyIs("shorten"), nil)[0]
	if again.ID != m.ID || again.ReceiveCount != 2 {
		e.t.Errorf("got ID %s count %d, want ID %s count 2", again.ID, again.ReceiveCount, m.ID)
	}
	if err := q.Delete(e.ctx, m.ReceiptHandle); !errors.Is(err, queue.ErrNotFound) {
		e.t.Errorf("Delete with the stale handle: err %v, want ErrNotFound", err)
	}
	e.del(q, again)
}

func testDeadLetter(e *env) {
	q, dlq := e.fx.Queue, e.fx.DLQ
	v := e.vis()
	e.send(q, "poison", "p0", "poison#0")
	e.send(q, "poison", "p1", "poison#1")
	first := e.receiveUntil(q, v, bodyIs("poison#0"), nil)[0]
	e.elapse(v)
	second := e.receiveUntil(q, v, bodyIs("poison#0"), nil)[0] // MaxReceiveCount is 2
	if second.ReceiveCount != 2 || second.ID != first.ID {
		e.t.Fatalf("second receive: count %d id %s, want count 2 id %s", second.ReceiveCount, second.ID, first.ID)
	}
	e.elapse(v)
	// The next receive attempt moves poison#0 away; the group flows on.
	next := e.receiveUntil(q, longVis, bodyIs("poison#1"), bodyIs("poison#0"))
	e.del(q, next[len(next)-1])
	dead := e.receiveUntil(dlq, longVis, bodyIs("poison#0"), nil)
	d := dead[len(dead)-1]
	if d.Group != "poison" {
		e.t.Errorf("dead letter group %q, want poison", d.Group)
	}
	e.del(dlq, d)
	e.expectNone(q, "after the group was drained")
	e.expectNone(dlq, "after the dead letter was deleted")
}

func testReceiveMax(e *env) {
	q := e.fx.Queue
	const n = 5
	for i := range n {
		e.send(q, fmt.Sprintf("m%d", i), fmt.Sprintf("m%d", i), fmt.Sprintf("m%d#0", i))
	}
	seen := map[string]bool{}
	first := true
	deadline := time.Now().Add(e.slack() * 2)
	for len(seen) < n {
		msgs := e.receive(q, queue.ReceiveParams{Max: 3, VisibilityTimeout: longVis, Wait: e.pollWait()})
		if first && e.caps.FillsBatch && len(msgs) != 3 {
			e.t.Errorf("first Receive(Max 3) with %d available returned %d", n, len(msgs))
		}
		if len(msgs) > 0 {
			first = false
		}
		for _, m := range msgs {
			if seen[m.ID] {
				e.t.Fatalf("%q delivered twice", m.Body)
			}
			seen[m.ID] = true
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("only %d of %d received", len(seen), n)
		}
	}
	e.expectNone(q, "with every group in flight")
}

func testLongPollWakes(e *env) {
	q := e.fx.Queue
	type result struct {
		msgs []queue.Message
		err  error
	}
	done := make(chan result, 1)
	go func() {
		msgs, err := q.Receive(e.ctx, queue.ReceiveParams{Max: 1, VisibilityTimeout: longVis, Wait: queue.MaxWait})
		done <- result{msgs, err}
	}()
	sent := make(chan struct{})
	time.AfterFunc(100*time.Millisecond, func() {
		defer close(sent)
		if _, err := q.Send(e.ctx, queue.SendParams{Group: "g", DedupID: "lp", Body: []byte("wake")}); err != nil {
			e.t.Errorf("Send: %v", err)
		}
	})
	// The receive may see the message before Send returns; the test's
	// context must outlive the Send.
	defer func() { <-sent }()
	select {
	case r := <-done:
		if r.err != nil {
			e.t.Fatalf("Receive: %v", r.err)
		}
		if len(r.msgs) != 1 || string(r.msgs[0].Body) != "wake" {
			e.t.Fatalf("long poll returned %d messages, want the one sent", len(r.msgs))
		}
	case <-time.After(queue.MaxWait / 2):
		e.t.Fatalf("long poll did not return within %v of a send", queue.MaxWait/2)
	}
}

func testLongPollEmpty(e *env) {
	msgs := e.receive(e.fx.Queue, queue.ReceiveParams{Max: 1, VisibilityTimeout: longVis, Wait: e.pollWait()})
	if len(msgs) != 0 {
		e.t.Fatalf("empty queue returned %d messages", len(msgs))
	}
}

func testReceiveCancel(e *env) {
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() {
		_, err := e.fx.Queue.Receive(ctx, queue.ReceiveParams{Max: 1, VisibilityTimeout: longVis, Wait: queue.MaxWait})
		done <- err
	}()
	stop := time.AfterFunc(50*time.Millisecond, cancel)
	defer stop.Stop()
	select {
	case err := <-done:
		if err == nil {
			e.t.Error("Receive returned no error after its context was cancelled")
		}
	case <-time.After(queue.MaxWait / 2):
		e.t.Fatal("Receive did not stop when its context was cancelled")
	}
}
