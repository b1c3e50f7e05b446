package sqlitequeue_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/queue"
	"github.com/qunfa/qunfa/internal/queue/queuetest"
	"github.com/qunfa/qunfa/internal/queue/sqlitequeue"
)

var epoch = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

// quiet drops the dead-letter warnings the suite provokes on purpose.
var quiet = slog.New(slog.DiscardHandler)

func open(t testing.TB, path string, opts sqlitequeue.Options) *sqlitequeue.Queue {
	t.Helper()
	q, err := sqlitequeue.Open(context.Background(), path, opts)
	if err != nil {
		t.Fatalf("Open(%s, %s): %v", path, opts.Name, err)
	}
	t.Cleanup(func() { q.Close() })
	return q
}

func TestConformance(t *testing.T) {
	t.Parallel()
	queuetest.Run(t, func(t *testing.T, opts queuetest.Options) queuetest.Fixture {
		path := filepath.Join(t.TempDir(), "queue.db")
		clk := clock.NewFake(epoch)
		work := open(t, path, sqlitequeue.Options{Name: "work", MaxReceiveCount: opts.MaxReceiveCount, DeadLetter: "work-dlq", Clock: clk, Logger: quiet})
		dlq := open(t, path, sqlitequeue.Options{Name: "work-dlq", Clock: clk})
		return queuetest.Fixture{Queue: work, DLQ: dlq, Advance: clk.Advance}
	}, queuetest.Capabilities{FillsBatch: true, ReportsDuplicate: true})
}

func TestOpenRejectsBadOptions(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "queue.db")
	for _, opts := range []sqlitequeue.Options{
		{},
		{Name: "work", MaxReceiveCount: -1},
		{Name: "work", MaxReceiveCount: 3},
		{Name: "work", MaxReceiveCount: 3, DeadLetter: "work"},
	} {
		if q, err := sqlitequeue.Open(context.Background(), path, opts); !errors.Is(err, queue.ErrInvalidArgument) {
			if q != nil {
				q.Close()
			}
			t.Errorf("Open(%+v): err %v, want ErrInvalidArgument", opts, err)
		}
	}
}

// TestNamedQueuesShareFile: queues in one file see only their own messages
// and dedup ids.
func TestNamedQueuesShareFile(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "queue.db")
	a := open(t, path, sqlitequeue.Options{Name: "a"})
	b := open(t, path, sqlitequeue.Options{Name: "b"})
	if _, err := a.Send(ctx, queue.SendParams{Group: "g", DedupID: "d", Body: []byte("for a")}); err != nil {
		t.Fatal(err)
	}
	res, err := b.Send(ctx, queue.SendParams{Group: "g", DedupID: "d", Body: []byte("for b")})
	if err != nil || res.Duplicate {
		t.Fatalf("send to b with a's dedup id: %+v, %v", res, err)
	}
	for name, q := range map[string]*sqlitequeue.Queue{"a": a, "b": b} {
		msgs, err := q.Receive(ctx, queue.ReceiveParams{Max: queue.MaxReceive, VisibilityTimeout: time.Minute})
		if err != nil || len(msgs) != 1 || string(msgs[0].Body) != "for "+name {
			t.Fatalf("queue %s: %v, %v", name, msgs, err)
		}
		if err := map[string]*sqlitequeue.Queue{"a": b, "b": a}[name].Delete(ctx, msgs[0].ReceiptHandle); !errors.Is(err, queue.ErrNotFound) {
			t.Errorf("deleting %s's message through the other queue: %v, want ErrNotFound", name, err)
		}
	}
}

// TestTwoInstancesShareGroupLock: two Queues on one file (as two processes
// would open it), four receivers each, never hold one group at once and
// together deliver every message once, in order.
func TestTwoInstancesShareGroupLock(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	path := filepath.Join(t.TempDir(), "queue.db")
	// Real time: the instances are separate, as processes would be.
	qs := []*sqlitequeue.Queue{
		open(t, path, sqlitequeue.Options{Name: "work"}),
		open(t, path, sqlitequeue.Options{Name: "work"}),
	}
	const groups, perGroup = 12, 8
	for i := range perGroup {
		for g := range groups {
			body := fmt.Sprintf("g%d#%d", g, i)
			if _, err := qs[(g+i)%2].Send(ctx, queue.SendParams{Group: fmt.Sprintf("g%d", g), DedupID: body, Body: []byte(body)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	var (
		mu      sync.Mutex
		held    = map[string]bool{}
		next    = map[string]int{}
		total   int
		wg      sync.WaitGroup
		overlap int
	)
	for r := range 8 {
		q := qs[r%2]
		wg.Go(func() {
			for ctx.Err() == nil {
				mu.Lock()
				done := total == groups*perGroup
				mu.Unlock()
				if done {
					return
				}
				msgs, err := q.Receive(ctx, queue.ReceiveParams{Max: 2, VisibilityTimeout: time.Minute, Wait: 100 * time.Millisecond})
				if err != nil {
					if ctx.Err() == nil {
						t.Error(err)
					}
					return
				}
				mu.Lock()
				for _, m := range msgs {
					if held[m.Group] {
						t.Errorf("group %s delivered to two receivers at once", m.Group)
					}
					held[m.Group] = true
					var g, i int
					fmt.Sscanf(string(m.Body), "g%d#%d", &g, &i)
					if i != next[m.Group] {
						t.Errorf("group %s: got #%d, want #%d", m.Group, i, next[m.Group])
					}
					next[m.Group] = i + 1
				}
				overlap = max(overlap, len(held))
				mu.Unlock()
				runtime.Gosched() // hold the groups while others receive
				mu.Lock()
				for _, m := range msgs {
					delete(held, m.Group)
				}
				mu.Unlock()
				for _, m := range msgs {
					if err := q.Delete(ctx, m.ReceiptHandle); err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					total++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if total != groups*perGroup {
		t.Fatalf("delivered %d of %d (%v)", total, groups*perGroup, ctx.Err())
	}
	t.Logf("at most %d groups held at once", overlap)
}

// TestDeadLetterJoinsTheEndOfItsGroup: a message moved to a dead-letter
// queue whose group is in flight there waits behind it.
func TestDeadLetterJoinsTheEndOfItsGroup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "queue.db")
	clk := clock.NewFake(epoch)
	work := open(t, path, sqlitequeue.Options{Name: "work", MaxReceiveCount: 1, DeadLetter: "dlq", Clock: clk})
	dlq := open(t, path, sqlitequeue.Options{Name: "dlq", Clock: clk})
	recv := func(q *sqlitequeue.Queue) []queue.Message {
		t.Helper()
		vis := time.Minute
		if q == dlq {
			vis = time.Hour
		}
		msgs, err := q.Receive(ctx, queue.ReceiveParams{Max: queue.MaxReceive, VisibilityTimeout: vis})
		if err != nil {
			t.Fatal(err)
		}
		return msgs
	}
	for _, b := range []string{"first", "second"} {
		if _, err := work.Send(ctx, queue.SendParams{Group: "g", DedupID: b, Body: []byte(b)}); err != nil {
			t.Fatal(err)
		}
	}
	first := recv(work)[0]
	clk.Advance(time.Minute)
	second := recv(work) // moves "first", delivers "second"
	if len(second) != 1 || string(second[0].Body) != "second" {
		t.Fatalf("after the move got %v", second)
	}
	held := recv(dlq)
	if len(held) != 1 || held[0].ID != first.ID || held[0].ReceiveCount != 2 {
		t.Fatalf("dead letter: %+v, want ID %s with receive count 2", held, first.ID)
	}
	clk.Advance(time.Minute) // "second" moves too, behind "first" in flight in dlq
	if got := recv(work); len(got) != 0 {
		t.Fatalf("work still delivers %v", got)
	}
	if got := recv(dlq); len(got) != 0 {
		t.Fatalf("dlq delivered %q while its group is in flight", got[0].Body)
	}
	if err := dlq.Delete(ctx, held[0].ReceiptHandle); err != nil {
		t.Fatal(err)
	}
	if got := recv(dlq); len(got) != 1 || string(got[0].Body) != "second" {
		t.Fatalf("after deleting the first dead letter got %v, want second", got)
	}
}

// TestLongPollWakesAcrossInstances: a Send through one instance wakes a
// long poll in another by polling, well before the wait ends.
func TestLongPollWakesAcrossInstances(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "queue.db")
	a := open(t, path, sqlitequeue.Options{Name: "work"})
	b := open(t, path, sqlitequeue.Options{Name: "work"})
	got := make(chan []queue.Message, 1)
	go func() {
		msgs, err := a.Receive(ctx, queue.ReceiveParams{Max: 1, VisibilityTimeout: time.Minute, Wait: queue.MaxWait})
		if err != nil {
			t.Error(err)
		}
		got <- msgs
	}()
	if _, err := b.Send(ctx, queue.SendParams{Group: "g", DedupID: "d", Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	select {
	case msgs := <-got:
		if len(msgs) != 1 {
			t.Fatalf("got %d messages", len(msgs))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("long poll in another instance not woken within 5s")
	}
}

// TestDuplicateReturnsOriginalID: a dropped duplicate reports the id of the
// message it duplicates.
func TestDuplicateReturnsOriginalID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q := open(t, filepath.Join(t.TempDir(), "queue.db"), sqlitequeue.Options{Name: "work", Clock: clock.NewFake(epoch)})
	first, err := q.Send(ctx, queue.SendParams{Group: "g", DedupID: "d", Body: []byte("1")})
	if err != nil {
		t.Fatal(err)
	}
	dup, err := q.Send(ctx, queue.SendParams{Group: "other", DedupID: "d", Body: []byte("2")})
	if err != nil || !dup.Duplicate || dup.MessageID != first.MessageID {
		t.Fatalf("duplicate: %+v, %v; want Duplicate with ID %s", dup, err, first.MessageID)
	}
}

func TestStats(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clock.NewFake(epoch)
	q := open(t, filepath.Join(t.TempDir(), "queue.db"), sqlitequeue.Options{Name: "work", Clock: clk})
	for i := range 3 {
		if _, err := q.Send(ctx, queue.SendParams{Group: fmt.Sprint("g", i%2), DedupID: fmt.Sprint(i), Body: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := q.Receive(ctx, queue.ReceiveParams{Max: 1, VisibilityTimeout: time.Minute}); err != nil {
		t.Fatal(err)
	}
	check := func(want sqlitequeue.Stats) {
		t.Helper()
		got, err := q.Stats(ctx)
		if err != nil || got != want {
			t.Fatalf("Stats = %+v, %v; want %+v", got, err, want)
		}
	}
	check(sqlitequeue.Stats{Visible: 2, InFlight: 1})
	clk.Advance(time.Minute)
	check(sqlitequeue.Stats{Visible: 3, InFlight: 0})
}

// TestSurvivesReopen: messages, holds and dedup ids outlive the Queue.
func TestSurvivesReopen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "queue.db")
	clk := clock.NewFake(epoch)
	q1, err := sqlitequeue.Open(ctx, path, sqlitequeue.Options{Name: "work", Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if _, err := q1.Send(ctx, queue.SendParams{Group: "g", DedupID: fmt.Sprint(i), Body: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	held, err := q1.Receive(ctx, queue.ReceiveParams{Max: 1, VisibilityTimeout: time.Minute})
	if err != nil || len(held) != 1 {
		t.Fatalf("receive: %v, %v", held, err)
	}
	q1.Close()

	q2 := open(t, path, sqlitequeue.Options{Name: "work", Clock: clk})
	if res, err := q2.Send(ctx, queue.SendParams{Group: "g", DedupID: "0", Body: []byte("again")}); err != nil || !res.Duplicate {
		t.Errorf("dedup id forgotten across reopen: %+v, %v", res, err)
	}
	if msgs, _ := q2.Receive(ctx, queue.ReceiveParams{Max: 1, VisibilityTimeout: time.Minute}); len(msgs) != 0 {
		t.Fatalf("group lock forgotten across reopen: got %q", msgs[0].Body)
	}
	if err := q2.Delete(ctx, held[0].ReceiptHandle); err != nil {
		t.Fatalf("receipt handle from before the reopen: %v", err)
	}
	msgs, err := q2.Receive(ctx, queue.ReceiveParams{Max: 1, VisibilityTimeout: time.Minute})
	if err != nil || len(msgs) != 1 || string(msgs[0].Body) != "1" {
		t.Fatalf("after reopen: %v, %v", msgs, err)
	}
}

// BenchmarkSendReceiveDelete measures one message's full trip.
func BenchmarkSendReceiveDelete(b *testing.B) {
	ctx := context.Background()
	q := open(b, filepath.Join(b.TempDir(), "queue.db"), sqlitequeue.Options{Name: "work", MaxReceiveCount: 5, DeadLetter: "dlq"})
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		id := fmt.Sprint(i)
		if _, err := q.Send(ctx, queue.SendParams{Group: "shard-" + fmt.Sprint(i%16), DedupID: id, Body: []byte(id)}); err != nil {
			b.Fatal(err)
		}
		msgs, err := q.Receive(ctx, queue.ReceiveParams{Max: 1, VisibilityTimeout: time.Minute})
		if err != nil || len(msgs) != 1 {
			b.Fatalf("receive: %d, %v", len(msgs), err)
		}
		if err := q.Delete(ctx, msgs[0].ReceiptHandle); err != nil {
			b.Fatal(err)
		}
	}
}

// childEnv names the file a re-executed test binary works on in
// TestSurvivesKill9.
const childEnv = "SQLITEQUEUE_KILL9_CHILD"

// TestKill9Child is the process TestSurvivesKill9 kills: it sends, receives
// and deletes until it dies, reporting each committed step on stdout.
func TestKill9Child(t *testing.T) {
	path := os.Getenv(childEnv)
	if path == "" {
		t.Skip("helper process of TestSurvivesKill9")
	}
	ctx := context.Background()
	q := open(t, path, sqlitequeue.Options{Name: "work", Clock: clock.NewFake(epoch)})
	for i := 0; ; i++ {
		body := fmt.Sprint(i)
		if _, err := q.Send(ctx, queue.SendParams{Group: fmt.Sprint("g", i%4), DedupID: body, Body: []byte(body)}); err != nil {
			t.Fatal(err)
		}
		fmt.Printf("sent %s\n", body)
		if i%2 == 1 {
			msgs, err := q.Receive(ctx, queue.ReceiveParams{Max: 1, VisibilityTimeout: time.Hour})
			if err != nil || len(msgs) != 1 {
				t.Fatalf("receive: %v %v", msgs, err)
			}
			fmt.Printf("received %s\n", msgs[0].Body)
			if err := q.Delete(ctx, msgs[0].ReceiptHandle); err != nil {
				t.Fatal(err)
			}
			fmt.Printf("deleted %s\n", msgs[0].Body)
		}
	}
}

// TestSurvivesKill9: a process killed with SIGKILL in the middle of its
// work leaves a file where every committed send is still there and every
// committed delete stays deleted.
func TestSurvivesKill9(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "queue.db")
	cmd := exec.Command(os.Args[0], "-test.run=^TestKill9Child$", "-test.count=1")
	cmd.Env = append(os.Environ(), childEnv+"="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sent, deleted := map[string]bool{}, map[string]bool{}
	lastReceived := ""
	lines := bufio.NewScanner(out)
	killed := false
	for lines.Scan() { // after the kill, read what the pipe still holds
		if b, ok := strings.CutPrefix(lines.Text(), "sent "); ok {
			sent[b] = true
		} else if b, ok := strings.CutPrefix(lines.Text(), "deleted "); ok {
			deleted[b] = true
		} else if b, ok := strings.CutPrefix(lines.Text(), "received "); ok {
			lastReceived = b
		}
		if len(sent) >= 300 && !killed {
			if err := cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			killed = true
		}
	}
	_ = cmd.Wait()
	if len(sent) < 300 {
		t.Fatalf("child reported only %d sends before exiting", len(sent))
	}

	ctx := context.Background()
	// Two hours on, the message the child held (for an hour) is visible.
	q := open(t, path, sqlitequeue.Options{Name: "work", Clock: clock.NewFake(epoch.Add(2 * time.Hour))})
	left := map[string]bool{}
	for {
		msgs, err := q.Receive(ctx, queue.ReceiveParams{Max: queue.MaxReceive})
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) == 0 {
			break
		}
		for _, m := range msgs {
			left[string(m.Body)] = true
			if err := q.Delete(ctx, m.ReceiptHandle); err != nil {
				t.Fatal(err)
			}
		}
	}
	for b := range sent {
		// The last message received may have been deleted just before
		// the kill, too late to say so.
		if !deleted[b] && !left[b] && b != lastReceived {
			t.Errorf("message %s: send committed, neither deleted nor in the queue", b)
		}
	}
	for b := range left {
		if deleted[b] {
			t.Errorf("message %s: delete committed, but still in the queue", b)
		}
	}
	t.Logf("child committed %d sends and %d deletes; %d messages left", len(sent), len(deleted), len(left))
}

// BenchmarkReceiveWithBacklog measures a trip with 10,000 messages in 1,000
// groups waiting: the cost of finding group heads grows with the backlog.
func BenchmarkReceiveWithBacklog(b *testing.B) {
	ctx := context.Background()
	q := open(b, filepath.Join(b.TempDir(), "queue.db"), sqlitequeue.Options{Name: "work"})
	const backlog, groups = 10000, 1000
	for i := range backlog {
		id := fmt.Sprint("backlog-", i)
		if _, err := q.Send(ctx, queue.SendParams{Group: fmt.Sprint("shard-", i%groups), DedupID: id, Body: []byte(id)}); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		msgs, err := q.Receive(ctx, queue.ReceiveParams{Max: 1, VisibilityTimeout: time.Minute})
		if err != nil || len(msgs) != 1 {
			b.Fatalf("receive: %d, %v", len(msgs), err)
		}
		if err := q.Delete(ctx, msgs[0].ReceiptHandle); err != nil {
			b.Fatal(err)
		}
		id := fmt.Sprint(i)
		if _, err := q.Send(ctx, queue.SendParams{Group: msgs[0].Group, DedupID: id, Body: []byte(id)}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParallelTrips measures trips from concurrent goroutines of one
// process sharing a Queue.
func BenchmarkParallelTrips(b *testing.B) {
	ctx := context.Background()
	q := open(b, filepath.Join(b.TempDir(), "queue.db"), sqlitequeue.Options{Name: "work"})
	var n atomic.Int64
	b.SetParallelism(4)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			id := fmt.Sprint(n.Add(1))
			if _, err := q.Send(ctx, queue.SendParams{Group: "shard-" + id, DedupID: id, Body: []byte(id)}); err != nil {
				b.Error(err)
				return
			}
			msgs, err := q.Receive(ctx, queue.ReceiveParams{Max: 1, VisibilityTimeout: time.Minute})
			if err != nil {
				b.Error(err)
				return
			}
			for _, m := range msgs {
				if err := q.Delete(ctx, m.ReceiptHandle); err != nil {
					b.Error(err)
					return
				}
			}
		}
	})
}

// TestOddPathNames: the file is created under exactly the name given, even
// with characters that mean something in a SQLite URI.
func TestOddPathNames(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	name := "a b%20c?d#e.db"
	open(t, filepath.Join(dir, name), sqlitequeue.Options{Name: "work"})
	if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
		t.Fatalf("queue file not created under its name: %v", err)
	}
}

// TestReleaseInFlight: after a crash, the restarted owner releases what its
// previous life held: in-flight and handed-back messages are delivered
// again at once, in group order, with their receive count kept.
func TestReleaseInFlight(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	path := filepath.Join(t.TempDir(), "q.db")
	q := open(t, path, sqlitequeue.Options{Name: "work", Clock: clk})
	for i, g := range []string{"g1", "g1", "g2"} {
		if _, err := q.Send(ctx, queue.SendParams{Group: g, DedupID: fmt.Sprint("d", i), Body: []byte(fmt.Sprint("m", i))}); err != nil {
			t.Fatal(err)
		}
	}
	held, err := q.Receive(ctx, queue.ReceiveParams{Max: 10, VisibilityTimeout: time.Hour})
	if err != nil || len(held) != 2 {
		t.Fatalf("receive: %v %d", err, len(held))
	}
	if err := q.ChangeVisibility(ctx, held[1].ReceiptHandle, 30*time.Minute); err != nil { // a hand-back
		t.Fatal(err)
	}
	if again, _ := q.Receive(ctx, queue.ReceiveParams{Max: 10, VisibilityTimeout: time.Hour}); len(again) != 0 {
		t.Fatalf("%d messages visible while held", len(again))
	}
	n, err := q.ReleaseInFlight(ctx)
	if err != nil || n != 2 {
		t.Fatalf("released %d, %v; want 2", n, err)
	}
	again, err := q.Receive(ctx, queue.ReceiveParams{Max: 10, VisibilityTimeout: time.Hour})
	if err != nil || len(again) != 2 {
		t.Fatalf("after release: %v %d", err, len(again))
	}
	for _, m := range again {
		if m.ReceiveCount != 2 || (m.Group == "g1" && string(m.Body) != "m0") {
			t.Fatalf("redelivered %+v, want the group heads with receive count 2", m)
		}
	}
}
