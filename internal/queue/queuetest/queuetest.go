// Package queuetest is the conformance suite of the queue port. Every
// adapter's test calls Run with a factory of fresh, isolated queues; the
// suite proves the FIFO rules of package queue (order within a group, group
// lock while a message is in flight, deduplication, visibility timeouts,
// dead-letter moves, long polling) and the parameter limits.
//
// The suite runs against a fake clock when the fixture provides one
// (Fixture.Advance) and then takes no wall-clock time beyond long-poll
// waits; otherwise it waits real time, in multiples of
// Capabilities.MinVisibility, and keeps every such wait to a few seconds.
package queuetest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/queue"
)

// Options configures the queue a fixture builds.
type Options struct {
	// MaxReceiveCount is how many receives a message gets before the next
	// receive attempt moves it to the fixture's DLQ. Always > 0.
	MaxReceiveCount int
}

// Fixture is one fresh queue with its dead-letter queue. The factory
// registers any cleanup with t.Cleanup.
type Fixture struct {
	// Queue is the queue under test; its dead-letter queue is DLQ.
	Queue queue.Queue
	// DLQ is the dead-letter queue of Queue, readable as a queue.
	DLQ queue.Queue
	// Advance moves the clock both queues use. Nil means the adapter runs
	// on real time and the suite waits instead.
	Advance func(time.Duration)
}

// Capabilities declares where a backend legitimately differs; the suite
// checks more where a capability is set and never forks on the adapter.
type Capabilities struct {
	// MinVisibility is the granularity of visibility timeouts and waits
	// (SQS: 1s). Real-time runs use it as their unit of waiting; zero
	// means 1s.
	MinVisibility time.Duration
	// ReceivesManyPerGroup: one Receive may return several messages of one
	// group, in order (SQS does). When false the suite asserts that no
	// Receive returns two messages of one group.
	ReceivesManyPerGroup bool
	// FillsBatch: whenever messages are available, Receive returns
	// min(Max, available) of them (embedded adapters). SQS may return
	// fewer, so it does not declare this.
	FillsBatch bool
	// ReportsDuplicate: SendResult.Duplicate is set when a duplicate is
	// dropped.
	ReportsDuplicate bool
}

// defaultMaxReceiveCount is high enough that tests other than the
// dead-letter one never trigger a move.
const defaultMaxReceiveCount = 10

// Run runs the conformance suite. newQueue must return a fresh, isolated
// fixture on every call; subtests run in parallel.
func Run(t *testing.T, newQueue func(t *testing.T, opts Options) Fixture, caps Capabilities) {
	t.Helper()
	if caps.MinVisibility <= 0 {
		caps.MinVisibility = time.Second
	}
	tests := []struct {
		name string
		run  func(*env)
		mrc  int
	}{
		{"InvalidParams", testInvalidParams, 0},
		{"UnknownReceiptHandle", testUnknownReceiptHandle, 0},
		{"SendReceiveDelete", testSendReceiveDelete, 0},
		{"OrderWithinGroup", testOrderWithinGroup, 0},
		{"GroupLockedWhileInFlight", testGroupLockedWhileInFlight, 0},
		{"ManyPerGroup", testManyPerGroup, 0},
		{"EveryMessageOnce", testEveryMessageOnce, 0},
		{"ConcurrentReceiversNeverShareGroup", testConcurrentReceivers, 0},
		{"DedupDropsDuplicate", testDedup, 0},
		{"DedupWindowExpires", testDedupWindowExpires, 0},
		{"RedeliveryAfterVisibilityTimeout", testRedelivery, 0},
		{"ChangeVisibilityExtends", testChangeVisibilityExtends, 0},
		{"ChangeVisibilityShortens", testChangeVisibilityShortens, 0},
		{"DeadLetterAfterMaxReceives", testDeadLetter, 2},
		{"ReceiveMax", testReceiveMax, 0},
		{"LongPollWakesOnSend", testLongPollWakes, 0},
		{"LongPollTimesOutEmpty", testLongPollEmpty, 0},
		{"ReceiveStopsOnCancel", testReceiveCancel, 0},
		{"SendBatch", testSendBatch, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			mrc := tc.mrc
			if mrc == 0 {
				mrc = defaultMaxReceiveCount
			}
			fx := newQueue(t, Options{MaxReceiveCount: mrc})
			if fx.Queue == nil || fx.DLQ == nil {
				t.Fatal("factory returned a fixture without Queue or DLQ")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			t.Cleanup(cancel)
			tc.run(&env{t: t, ctx: ctx, fx: fx, caps: caps})
		})
	}
}

// env is what every subtest works with.
type env struct {
	t    *testing.T
	ctx  context.Context
	fx   Fixture
	caps Capabilities
}

func (e *env) fake() bool { return e.fx.Advance != nil }

// vis is the visibility timeout used where the test waits for expiry.
func (e *env) vis() time.Duration {
	if e.fake() {
		return 10 * time.Second
	}
	return e.caps.MinVisibility
}

// pollWait is the long-poll wait used by loops that expect a message soon.
func (e *env) pollWait() time.Duration {
	if e.fake() {
		return 20 * time.Millisecond
	}
	return e.caps.MinVisibility
}

// longVis is a visibility timeout that never expires during a test.
const longVis = 5 * time.Minute

// elapse lets d pass: on the fake clock at once, else in real time.
func (e *env) elapse(d time.Duration) {
	if e.fake() {
		e.fx.Advance(d)
		return
	}
	select {
	case <-time.After(d):
	case <-e.ctx.Done():
	}
}

// passLongVis lets a longVis hold expire on the fake clock; on real time
// it does nothing (the caller's check then only covers the moment).
func (e *env) passLongVis() {
	if e.fake() {
		e.fx.Advance(longVis + time.Second)
	}
}

// slack is how long a real-time backend may lag behind an expiry.
func (e *env) slack() time.Duration {
	if e.fake() {
		return 2 * time.Second // long polls only; the clock does not move
	}
	return 5 * e.caps.MinVisibility
}

func (e *env) send(q queue.Queue, group, dedup, body string) queue.SendResult {
	e.t.Helper()
	res, err := q.Send(e.ctx, queue.SendParams{Group: group, DedupID: dedup, Body: []byte(body)})
	if err != nil {
		e.t.Fatalf("Send(group=%s dedup=%s): %v", group, dedup, err)
	}
	return res
}

func (e *env) receive(q queue.Queue, p queue.ReceiveParams) []queue.Message {
	e.t.Helper()
	msgs, err := q.Receive(e.ctx, p)
	if err != nil {
		e.t.Fatalf("Receive(%+v): %v", p, err)
	}
	e.checkBatch(msgs, p.Max)
	return msgs
}

// checkBatch asserts what holds for any single Receive result.
func (e *env) checkBatch(msgs []queue.Message, max int) {
	e.t.Helper()
	if len(msgs) > max {
		e.t.Errorf("Receive returned %d messages, Max %d", len(msgs), max)
	}
	groups := map[string]bool{}
	for _, m := range msgs {
		if m.ID == "" || m.ReceiptHandle == "" {
			e.t.Errorf("message without ID or receipt handle: %+v", m)
		}
		if m.ReceiveCount < 1 {
			e.t.Errorf("message %s: ReceiveCount %d, want >= 1", m.ID, m.ReceiveCount)
		}
		if groups[m.Group] && !e.caps.ReceivesManyPerGroup {
			e.t.Errorf("one Receive returned two messages of group %s, but ReceivesManyPerGroup is false", m.Group)
		}
		groups[m.Group] = true
	}
}

// expectNone asserts that nothing is available right now.
func (e *env) expectNone(q queue.Queue, why string) {
	e.t.Helper()
	msgs := e.receive(q, queue.ReceiveParams{Max: queue.MaxReceive, VisibilityTimeout: longVis})
	if len(msgs) > 0 {
		e.t.Fatalf("%s: got %d message(s), first %s/%q", why, len(msgs), msgs[0].Group, msgs[0].Body)
	}
}

// receiveUntil receives (one message at a time) until want accepts a
// message, failing on any message reject accepts or when slack runs out.
// Messages neither accepted nor rejected are returned to the caller in
// order with the accepted one last.
func (e *env) receiveUntil(q queue.Queue, visibility time.Duration, want, reject func(queue.Message) bool) []queue.Message {
	e.t.Helper()
	deadline := time.Now().Add(e.slack())
	var got []queue.Message
	for {
		msgs := e.receive(q, queue.ReceiveParams{Max: 1, VisibilityTimeout: visibility, Wait: e.pollWait()})
		for _, m := range msgs {
			if reject != nil && reject(m) {
				e.t.Fatalf("unexpected message %s/%q (receive count %d)", m.Group, m.Body, m.ReceiveCount)
			}
			got = append(got, m)
			if want(m) {
				return got
			}
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("no expected message within %v (got %d others)", e.slack(), len(got))
		}
	}
}

func (e *env) del(q queue.Queue, m queue.Message) {
	e.t.Helper()
	if err := q.Delete(e.ctx, m.ReceiptHandle); err != nil {
		e.t.Fatalf("Delete(%s/%q): %v", m.Group, m.Body, err)
	}
}

func bodyIs(b string) func(queue.Message) bool {
	return func(m queue.Message) bool { return string(m.Body) == b }
}

func testInvalidParams(e *env) {
	q := e.fx.Queue
	ok := queue.SendParams{Group: "g", DedupID: "d", Body: []byte("b")}
	with := func(f func(*queue.SendParams)) queue.SendParams { p := ok; f(&p); return p }
	sends := []struct {
		name string
		p    queue.SendParams
	}{
		{"empty group", with(func(p *queue.SendParams) { p.Group = "" })},
		{"empty dedup id", with(func(p *queue.SendParams) { p.DedupID = "" })},
		{"group too long", with(func(p *queue.SendParams) { p.Group = strings.Repeat("g", queue.MaxIDLength+1) })},
		{"dedup id too long", with(func(p *queue.SendParams) { p.DedupID = strings.Repeat("d", queue.MaxIDLength+1) })},
		{"space in group", with(func(p *queue.SendParams) { p.Group = "a b" })},
		{"non-ASCII dedup id", with(func(p *queue.SendParams) { p.DedupID = "dé" })},
		{"empty body", with(func(p *queue.SendParams) { p.Body = nil })},
		{"body too large", with(func(p *queue.SendParams) { p.Body = []byte(strings.Repeat("b", queue.MaxBodyBytes+1)) })},
		{"body not UTF-8", with(func(p *queue.SendParams) { p.Body = []byte{'o', 'k', 0xff, 0xfe} })},
		{"NUL in body", with(func(p *queue.SendParams) { p.Body = []byte("a\x00b") })},
		{"control character in body", with(func(p *queue.SendParams) { p.Body = []byte("a\x07b") })},
	}
	for _, tc := range sends {
		if _, err := q.Send(e.ctx, tc.p); !errors.Is(err, queue.ErrInvalidArgument) {
			e.t.Errorf("Send with %s: err %v, want ErrInvalidArgument", tc.name, err)
		}
	}
	// Longest legal ids are accepted.
	e.send(q, strings.Repeat("G", queue.MaxIDLength), strings.Repeat("D", queue.MaxIDLength), "max ids")

	receives := []struct {
		name string
		p    queue.ReceiveParams
	}{
		{"zero max", queue.ReceiveParams{Max: 0}},
		{"negative max", queue.ReceiveParams{Max: -1}},
		{"max above MaxReceive", queue.ReceiveParams{Max: queue.MaxReceive + 1}},
		{"negative visibility", queue.ReceiveParams{Max: 1, VisibilityTimeout: -time.Second}},
		{"visibility too long", queue.ReceiveParams{Max: 1, VisibilityTimeout: queue.MaxVisibilityTimeout + time.Second}},
		{"negative wait", queue.ReceiveParams{Max: 1, Wait: -time.Second}},
		{"wait too long", queue.ReceiveParams{Max: 1, Wait: queue.MaxWait + time.Second}},
	}
	for _, tc := range receives {
		if _, err := q.Receive(e.ctx, tc.p); !errors.Is(err, queue.ErrInvalidArgument) {
			e.t.Errorf("Receive with %s: err %v, want ErrInvalidArgument", tc.name, err)
		}
	}
	if err := q.Delete(e.ctx, ""); !errors.Is(err, queue.ErrInvalidArgument) {
		e.t.Errorf("Delete(\"\"): err %v, want ErrInvalidArgument", err)
	}
	if err := q.ChangeVisibility(e.ctx, "", 0); !errors.Is(err, queue.ErrInvalidArgument) {
		e.t.Errorf("ChangeVisibility(\"\"): err %v, want ErrInvalidArgument", err)
	}

	// A bad timeout on a valid handle is refused and leaves the hold alone.
	m := e.receiveUntil(q, longVis, bodyIs("max ids"), nil)[0]
	for _, d := range []time.Duration{-time.Second, queue.MaxVisibilityTimeout + time.Second} {
		if err := q.ChangeVisibility(e.ctx, m.ReceiptHandle, d); !errors.Is(err, queue.ErrInvalidArgument) {
			e.t.Errorf("ChangeVisibility(valid handle, %v): err %v, want ErrInvalidArgument", d, err)
		}
	}
	e.expectNone(q, "after refused ChangeVisibility")
	e.del(q, m)
}

func testUnknownReceiptHandle(e *env) {
	q := e.fx.Queue
	for _, h := range []string{"no-such-receipt-handle", strings.Repeat("A", 64)} {
		if err := q.Delete(e.ctx, h); !errors.Is(err, queue.ErrNotFound) {
			e.t.Errorf("Delete(%q): err %v, want ErrNotFound", h, err)
		}
		if err := q.ChangeVisibility(e.ctx, h, 0); !errors.Is(err, queue.ErrNotFound) {
			e.t.Errorf("ChangeVisibility(%q): err %v, want ErrNotFound", h, err)
		}
	}
}

func testSendReceiveDelete(e *env) {
	q := e.fx.Queue
	body := "{\"to\": \"用户\"}\t\r\n \uE000 end"
	res := e.send(q, "grp-1", "dedup-1", body)
	if res.MessageID == "" {
		e.t.Fatal("Send returned an empty MessageID")
	}
	if res.Duplicate {
		e.t.Error("first Send reported Duplicate")
	}
	m := e.receiveUntil(q, longVis, func(queue.Message) bool { return true }, nil)[0]
	if m.ID != res.MessageID || m.Group != "grp-1" || m.DedupID != "dedup-1" || string(m.Body) != body || m.ReceiveCount != 1 {
		e.t.Errorf("received %+v, want ID %s group grp-1 dedup dedup-1 body %q count 1", m, res.MessageID, body)
	}
	if m.SentAt.IsZero() {
		e.t.Error("SentAt is zero")
	}
	e.expectNone(q, "while the only message is in flight")
	// ChangeVisibility keeps the receipt handle valid.
	if err := q.ChangeVisibility(e.ctx, m.ReceiptHandle, longVis); err != nil {
		e.t.Fatalf("ChangeVisibility: %v", err)
	}
	e.del(q, m)
	e.passLongVis()
	e.expectNone(q, "after Delete")
	if err := q.ChangeVisibility(e.ctx, m.ReceiptHandle, 0); !errors.Is(err, queue.ErrNotFound) {
		e.t.Errorf("ChangeVisibility after Delete: err %v, want ErrNotFound", err)
	}
	msgs, _ := e.fx.DLQ.Receive(e.ctx, queue.ReceiveParams{Max: queue.MaxReceive})
	if len(msgs) != 0 {
		e.t.Errorf("DLQ holds %d message(s) after a plain delete", len(msgs))
	}
}

// seqOf parses the sequence number out of a "group#seq" body.
func seqOf(t *testing.T, m queue.Message) int {
	t.Helper()
	_, s, ok := strings.Cut(string(m.Body), "#")
	n, err := strconv.Atoi(s)
	if !ok || err != nil {
		t.Fatalf("unexpected body %q", m.Body)
	}
	return n
}

func testOrderWithinGroup(e *env) {
	q := e.fx.Queue
	const n = 6
	groups := []string{"alpha", "beta", "gamma"}
	for i := range n {
		for _, g := range groups {
			e.send(q, g, fmt.Sprintf("%s-%d", g, i), fmt.Sprintf("%s#%d", g, i))
		}
	}
	next := map[string]int{}
	deadline := time.Now().Add(e.slack() * 3)
	for total := 0; total < n*len(groups); {
		msgs := e.receive(q, queue.ReceiveParams{Max: queue.MaxReceive, VisibilityTimeout: longVis, Wait: e.pollWait()})
		for _, m := range msgs {
			if got := seqOf(e.t, m); got != next[m.Group] {
				e.t.Fatalf("group %s: got message %d, want %d", m.Group, got, next[m.Group])
			}
			next[m.Group]++
		}
		for _, m := range msgs {
			e.del(q, m)
			total++
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("only %d of %d messages received", total, n*len(groups))
		}
	}
	e.expectNone(q, "after draining")
}

func testGroupLockedWhileInFlight(e *env) {
	q := e.fx.Queue
	for i := range 3 {
		e.send(q, "locked", fmt.Sprintf("locked-%d", i), fmt.Sprintf("locked#%d", i))
	}
	e.send(q, "other", "other-0", "other#0")

	// Take the first message of "locked" (and maybe followers, in order).
	held := e.receiveUntil(q, longVis, func(m queue.Message) bool { return m.Group == "locked" }, nil)
	var lockedHeld []queue.Message
	for _, m := range held {
		if m.Group == "locked" {
			lockedHeld = append(lockedHeld, m)
		} else {
			e.del(q, m)
		}
	}
	if seqOf(e.t, lockedHeld[0]) != 0 {
		e.t.Fatalf("first message of group is %q, want locked#0", lockedHeld[0].Body)
	}
	// While it is in flight, nothing more of the group, but others flow.
	for range 2 {
		for _, m := range e.receive(q, queue.ReceiveParams{Max: queue.MaxReceive, VisibilityTimeout: longVis, Wait: e.pollWait()}) {
			if m.Group == "locked" {
				e.t.Fatalf("got %q while locked#0 is in flight", m.Body)
			}
			e.del(q, m)
		}
	}
	// Deleting it releases the group, in order.
	e.del(q, lockedHeld[0])
	next := e.receiveUntil(q, longVis, func(m queue.Message) bool { return m.Group == "locked" }, nil)
	if got := seqOf(e.t, next[len(next)-1]); got != 1 {
		e.t.Fatalf("after delete got locked#%d, want locked#1", got)
	}
}

func testManyPerGroup(e *env) {
	if !e.caps.ReceivesManyPerGroup || !e.caps.FillsBatch {
		e.t.Skip("needs ReceivesManyPerGroup and FillsBatch; the single-message rule is asserted on every Receive")
	}
	q := e.fx.Queue
	for i := range 3 {
		e.send(q, "many", fmt.Sprintf("many-%d", i), fmt.Sprintf("many#%d", i))
	}
	msgs := e.receive(q, queue.ReceiveParams{Max: queue.MaxReceive, VisibilityTimeout: longVis})
	if len(msgs) != 3 {
		e.t.Fatalf("got %d messages, want all 3 of the group", len(msgs))
	}
	for i, m := range msgs {
		if seqOf(e.t, m) != i {
			e.t.Fatalf("message %d is %q", i, m.Body)
		}
	}
}

func testEveryMessageOnce(e *env) {
	q := e.fx.Queue
	const groups, perGroup = 7, 6
	ids := map[string]string{}
	for i := range perGroup {
		for g := range groups {
			group := fmt.Sprintf("g%d", g)
			body := fmt.Sprintf("%s#%d", group, i)
			ids[e.send(q, group, body, body).MessageID] = body
		}
	}
	if len(ids) != groups*perGroup {
		e.t.Fatalf("%d distinct message ids for %d sends", len(ids), groups*perGroup)
	}
	seen := map[string]bool{}
	deadline := time.Now().Add(e.slack() * 3)
	for len(seen) < groups*perGroup {
		msgs := e.receive(q, queue.ReceiveParams{Max: queue.MaxReceive, VisibilityTimeout: longVis, Wait: e.pollWait()})
		for _, m := range msgs {
			if seen[m.ID] {
				e.t.Fatalf("message %s (%q) delivered twice", m.ID, m.Body)
			}
			if ids[m.ID] != string(m.Body) {
				e.t.Fatalf("message %s has body %q, sent %q", m.ID, m.Body, ids[m.ID])
			}
			seen[m.ID] = true
			e.del(q, m)
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("only %d of %d messages received", len(seen), groups*perGroup)
		}
	}
	e.expectNone(q, "after all were deleted")
}

func testConcurrentReceivers(e *env) {
	q := e.fx.Queue
	const groups, perGroup, receivers = 16, 6, 8
	const total = groups * perGroup

	var sends sync.WaitGroup
	for g := range groups {
		sends.Go(func() {
			group := fmt.Sprintf("c%02d", g)
			for i := range perGroup {
				body := fmt.Sprintf("%s#%d", group, i)
				if _, err := q.Send(e.ctx, queue.SendParams{Group: group, DedupID: body, Body: []byte(body)}); err != nil {
					e.t.Errorf("Send %s: %v", body, err)
				}
			}
		})
	}
	sends.Wait()
	if e.t.Failed() {
		return
	}

	ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
	defer cancel()
	var (
		mu      sync.Mutex
		held    = map[string]int{} // group -> receiver holding it
		next    = map[string]int{} // group -> next expected sequence
		seen    = map[string]bool{}
		deleted atomic.Int64
		maxHeld int
	)
	var wg sync.WaitGroup
	for r := range receivers {
		wg.Go(func() {
			for deleted.Load() < total && ctx.Err() == nil {
				msgs, err := q.Receive(ctx, queue.ReceiveParams{Max: 1 + r%3, VisibilityTimeout: longVis, Wait: e.pollWait()})
				if err != nil {
					if ctx.Err() == nil {
						e.t.Errorf("receiver %d: Receive: %v", r, err)
					}
					return
				}
				var order []string
				for _, m := range msgs {
					if !slices.Contains(order, m.Group) {
						order = append(order, m.Group)
					}
				}
				mu.Lock()
				for _, g := range order {
					if h, ok := held[g]; ok {
						e.t.Errorf("receiver %d got group %s while receiver %d holds it", r, g, h)
					}
					held[g] = r
				}
				maxHeld = max(maxHeld, len(held))
				for _, m := range msgs {
					_, s, _ := strings.Cut(string(m.Body), "#")
					n, _ := strconv.Atoi(s)
					if seen[string(m.Body)] {
						e.t.Errorf("%q delivered twice", m.Body)
					}
					seen[string(m.Body)] = true
					if n != next[m.Group] {
						e.t.Errorf("group %s: receiver %d got #%d, want #%d", m.Group, r, n, next[m.Group])
					}
					next[m.Group] = n + 1
				}
				mu.Unlock()
				runtime.Gosched() // hold the groups while others receive
				mu.Lock()
				for _, g := range order {
					delete(held, g)
				}
				mu.Unlock()
				for _, m := range msgs {
					if err := q.Delete(ctx, m.ReceiptHandle); err != nil {
						e.t.Errorf("receiver %d: Delete %q: %v", r, m.Body, err)
						return
					}
					deleted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if got := deleted.Load(); got != total {
		e.t.Fatalf("deleted %d of %d messages (timeout: %v)", got, total, ctx.Err())
	}
	for g := range groups {
		if n := next[fmt.Sprintf("c%02d", g)]; n != perGroup {
			e.t.Errorf("group c%02d: %d of %d delivered", g, n, perGroup)
		}
	}
	if len(seen) != total {
		e.t.Errorf("%d distinct messages seen, want %d", len(seen), total)
	}
	e.t.Logf("at most %d groups held at once by %d receivers", maxHeld, receivers)
	e.expectNone(q, "after all were deleted")
}

func testDedup(e *env) {
	q := e.fx.Queue
	first := e.send(q, "g", "same-id", "first")
	dup := e.send(q, "g", "same-id", "second")
	if e.caps.ReportsDuplicate && (!dup.Duplicate || first.Duplicate) {
		e.t.Errorf("Duplicate flags: first %v, second %v; want false, true", first.Duplicate, dup.Duplicate)
	}
	e.send(q, "g", "other-id", "third")
	got := e.receiveUntil(q, longVis, bodyIs("first"), nil)
	m := got[len(got)-1]
	e.del(q, m)
	// A duplicate sent after the original was deleted, still within the
	// window, is dropped too.
	e.send(q, "g", "same-id", "fourth")
	next := e.receiveUntil(q, longVis, func(queue.Message) bool { return true }, nil)[0]
	if string(next.Body) != "third" {
		e.t.Fatalf("after the original, got %q, want \"third\" (duplicates must be dropped)", next.Body)
	}
	e.del(q, next)
	e.expectNone(q, "after the non-duplicates were deleted")
}

func testDedupWindowExpires(e *env) {
	if !e.fake() {
		e.t.Skip("needs a fake clock to pass queue.DedupWindow")
	}
	q := e.fx.Queue
	e.send(q, "g", "win", "first")
	e.fx.Advance(queue.DedupWindow - time.Second)
	if res := e.send(q, "g", "win", "inside"); e.caps.ReportsDuplicate && !res.Duplicate {
		e.t.Error("send inside the window not reported as duplicate")
	}
	e.fx.Advance(2 * time.Second)
	if res := e.send(q, "g", "win", "after"); res.Duplicate {
		e.t.Error("send after the window reported as duplicate")
	}
	var bodies []string
	for range 10 { // drain; the fake clock makes every receive exact
		msgs := e.receive(q, queue.ReceiveParams{Max: queue.MaxReceive, VisibilityTimeout: longVis})
		for _, m := range msgs {
			bodies = append(bodies, string(m.Body))
			e.del(q, m)
		}
	}
	if !slices.Equal(bodies, []string{"first", "after"}) {
		e.t.Fatalf("got %q, want [first after]", bodies)
	}
}

// testSendBatch: a queue that sends batches (queue.BatchSender) refuses a
// batch with one invalid message before sending any, and sends a batch of
// more messages than one request carries with the FIFO rules of Send: each
// message in its group, in the slice's order, a deduplication id already
// sent (earlier in the same batch or before it) dropped. Skipped for a
// queue without the capability.
func testSendBatch(e *env) {
	q := e.fx.Queue
	bs, ok := q.(queue.BatchSender)
	if !ok {
		e.t.Skip("the queue sends one message at a time")
	}
	bad := []queue.SendParams{{Group: "g", DedupID: "ok", Body: []byte("x")}, {Group: "", DedupID: "no-group", Body: []byte("x")}}
	if _, err := bs.SendBatch(e.ctx, bad); !errors.Is(err, queue.ErrInvalidArgument) {
		e.t.Fatalf("batch with a message without group: err %v, want ErrInvalidArgument", err)
	}
	e.expectNone(q, "after a refused batch")

	e.send(q, "beta", "beta-sent-before", "beta#0")
	var batch []queue.SendParams
	const perGroup = 5
	for i := range perGroup {
		for _, g := range []string{"alpha", "beta", "gamma"} {
			seq := i
			if g == "beta" {
				seq = i + 1 // after the message sent alone
			}
			batch = append(batch, queue.SendParams{Group: g, DedupID: fmt.Sprintf("%s-%d", g, seq), Body: []byte(fmt.Sprintf("%s#%d", g, seq))})
		}
	}
	// Duplicates: of one sent before the batch and of one earlier in it.
	batch = append(batch, queue.SendParams{Group: "beta", DedupID: "beta-sent-before", Body: []byte("beta#99")},
		queue.SendParams{Group: "alpha", DedupID: "alpha-0", Body: []byte("alpha#99")})
	if len(batch) <= queue.MaxSendBatch {
		e.t.Fatalf("test batch of %d fits one request", len(batch))
	}
	results, err := bs.SendBatch(e.ctx, batch)
	if err != nil || len(results) != len(batch) {
		e.t.Fatalf("SendBatch: %d results, err %v; want %d, nil", len(results), err, len(batch))
	}
	for i, r := range results {
		if r.Err != nil || (r.MessageID == "" && !r.Duplicate && i < 3*perGroup) {
			e.t.Errorf("message %d (%s): result %+v, want sent with an id", i, batch[i].DedupID, r)
		}
	}

	next := map[string]int{}
	want := 3*perGroup + 1
	deadline := time.Now().Add(e.slack() * 3)
	for total := 0; total < want; {
		msgs := e.receive(q, queue.ReceiveParams{Max: queue.MaxReceive, VisibilityTimeout: longVis, Wait: e.pollWait()})
		for _, m := range msgs {
			if got := seqOf(e.t, m); got != next[m.Group] {
				e.t.Fatalf("group %s: got message %d (%s), want %d: order kept, duplicates dropped", m.Group, got, m.Body, next[m.Group])
			}
			next[m.Group]++
			e.del(q, m)
			total++
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("only %d of %d messages received", total, want)
		}
	}
	e.expectNone(q, "after draining (the duplicates are dropped)")
}
