package sender

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/content"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/store/sqlitestore"
)

var sizingT0 = time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)

// feed gives the sizer one window of calls of n recipients, each taking
// perRecipient × n (a provider slower as batches grow), on a fake clock.
func (z *accountSizer) feed(clk *clock.Fake, perRecipient time.Duration) {
	for range SizingSamples {
		n := z.batchSize()
		d := perRecipient * time.Duration(n)
		clk.Advance(d)
		z.observe(n, d, clk.Now())
	}
}

// TestSizerShrinksUntilP99UnderTargetThenGrowsBack: an account allowing 100
// recipients per call starts at 80; a provider taking 40 ms per recipient
// (3.2 s a call) makes it shrink until the P99 is at most 2 s, where it
// stays; when the provider gets faster it grows back to 80, never beyond.
func TestSizerShrinksUntilP99UnderTargetThenGrowsBack(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(sizingT0)
	a := store.Account{Tenant: "t", ID: "a", RatePerSec: 1000, MaxRecipientsPerCall: 100}
	z := newAccountSizer(a, callBounds{most: 64}, clk.Now())
	if z.batchSize() != 80 {
		t.Fatalf("initial batch %d, want 80 (80%% of 100)", z.batchSize())
	}
	var sizes []int
	for range 6 {
		z.feed(clk, 40*time.Millisecond)
		sizes = append(sizes, z.batchSize())
	}
	last := sizes[len(sizes)-1]
	if sizes[0] >= 80 || last > 50 || last < 25 {
		t.Fatalf("batch sizes %v: want a shrink below 80 to at most 50 (2 s at 40 ms each), and not far below", sizes)
	}
	if sz := z.snapshot(); sz.P99 > SizingP99Target || sz.P99 != 40*time.Millisecond*time.Duration(last) {
		t.Fatalf("P99 %v at batch %d, want 40 ms × the batch, at most 2 s", sz.P99, last)
	}
	for i := 1; i < len(sizes); i++ {
		if sizes[i] > sizes[i-1] {
			t.Fatalf("batch sizes %v grew while the P99 was over 1.4 s", sizes)
		}
	}
	// Faster provider: 10 ms per recipient, 0.8 s for 80.
	sizes = sizes[:0]
	for range 12 {
		z.feed(clk, 10*time.Millisecond)
		sizes = append(sizes, z.batchSize())
	}
	if sizes[len(sizes)-1] != 80 {
		t.Fatalf("batch sizes %v after the provider got faster, want back to 80", sizes)
	}
	for _, s := range sizes {
		if s > 80 {
			t.Fatalf("batch sizes %v went over 80%% of the limit", sizes)
		}
	}
}

// TestSizerShrinksAtMostAQuarterAtATime: a window whose P99 is over the
// target shrinks the batch to what the target allows, by at most a
// quarter: a P99 just over 2 s takes off only what it must, and one slow
// window (a provider's hiccup of a minute) does not collapse 80 to 2.
func TestSizerShrinksAtMostAQuarterAtATime(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		p99  time.Duration
		want int
	}{
		{SizingP99Target, 80},                        // at the target: stays
		{SizingP99Target + 1, 79},                    // just over: one less
		{2500 * time.Millisecond, 64},                // allows 64, less than a quarter off
		{SizingP99Target * 80 / 60, 60},              // allows 60: exactly a quarter
		{3200 * time.Millisecond, 60},                // allows 50: a quarter at most
		{time.Minute, 60},                            // allows 2: a quarter at most
		{SizingP99Target * 80 / 60 * 101 / 100, 60},  // allows 59: a quarter at most
		{SizingP99Target * 80 / 61 * 999 / 1000, 61}, // allows 61: more than the quarter's 60
	} {
		clk := clock.NewFake(sizingT0)
		z := newAccountSizer(store.Account{Tenant: "t", ID: "a", RatePerSec: 1000, MaxRecipientsPerCall: 100}, callBounds{most: 64}, clk.Now())
		for range SizingSamples {
			clk.Advance(tt.p99)
			z.observe(z.batchSize(), tt.p99, clk.Now())
		}
		if got := z.batchSize(); got != tt.want {
			t.Errorf("P99 %v at batch 80: batch %d, want %d", tt.p99, got, tt.want)
		}
	}
}

// TestSizerConcurrencyByLittlesLaw: calls in flight are the account's call
// rate (batch rate over recipients per call) × the P99 latency × 0.7,
// rounded up, at least 1, at most the configured maximum.
func TestSizerConcurrencyByLittlesLaw(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		rate    float64
		limit   int
		latency time.Duration // per call
		want    int
	}{
		// 100 recipients/s in calls of 80 → 1.25 calls/s × 1.6 s × 0.7 = 1.4 → 2.
		{"packed", 100, 100, 1600 * time.Millisecond, 2},
		// 200 calls/s × 0.1 s × 0.7 = 14.
		{"single", 200, 1, 100 * time.Millisecond, 14},
		// 10 calls/s × 10 ms × 0.7 = 0.07 → at least 1.
		{"fast", 10, 1, 10 * time.Millisecond, 1},
		// 10,000 calls/s × 1 s × 0.7 = 7,000 → the configured 64.
		{"capped", 10000, 1, time.Second, 64},
	} {
		clk := clock.NewFake(sizingT0)
		z := newAccountSizer(store.Account{Tenant: "t", ID: "a", RatePerSec: tc.rate, MaxRecipientsPerCall: tc.limit}, callBounds{most: 64}, clk.Now())
		if z.snapshot().Concurrency != 64 {
			t.Fatalf("%s: before measuring, concurrency %d, want the maximum", tc.name, z.snapshot().Concurrency)
		}
		for range SizingSamples {
			clk.Advance(tc.latency)
			z.observe(z.batchSize(), tc.latency, clk.Now())
		}
		if got := z.snapshot().Concurrency; got != tc.want {
			t.Errorf("%s: concurrency %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestSizerSlotsBoundCallsInFlight: acquire waits while the account has
// its concurrency of calls in flight, across every turn of the process.
func TestSizerSlotsBoundCallsInFlight(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(sizingT0)
	z := newAccountSizer(store.Account{Tenant: "t", ID: "a", RatePerSec: 10, MaxRecipientsPerCall: 1}, callBounds{most: 64}, clk.Now())
	for range SizingSamples {
		z.observe(1, 10*time.Millisecond, clk.Now())
	}
	if c := z.snapshot().Concurrency; c != 1 {
		t.Fatalf("concurrency %d, want 1", c)
	}
	z.acquire()
	got := make(chan struct{})
	go func() {
		z.acquire()
		close(got)
	}()
	// The second caller is parked on the condition only once it waits.
	for {
		z.mu.Lock()
		waiting := z.inFlight == 1
		z.mu.Unlock()
		select {
		case <-got:
			t.Fatal("a second call got a slot while the only one was taken")
		default:
		}
		if waiting {
			break
		}
	}
	z.release()
	<-got
	z.release()
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.inFlight != 0 {
		t.Fatalf("in flight %d after both released", z.inFlight)
	}
}

// TestSizerSeedsFromSavedSizingAndRestartsOnNewLimits: a process that
// starts sending for an account takes the sizing another saved, if recent;
// a stale one, or new limits, start from 80%.
func TestSizerSeedsFromSavedSizingAndRestartsOnNewLimits(t *testing.T) {
	t.Parallel()
	now := sizingT0
	a := store.Account{Tenant: "t", ID: "a", RatePerSec: 100, MaxRecipientsPerCall: 100,
		Sizing: store.AccountSizing{BatchSize: 45, Concurrency: 3, P99: 1900 * time.Millisecond, At: now.Add(-10 * time.Second)}}
	z := newAccountSizer(a, callBounds{most: 64}, now)
	if sz := z.snapshot(); sz.BatchSize != 45 || sz.Concurrency != 3 {
		t.Fatalf("seeded sizing %+v, want batch 45 and 3 in flight", sz)
	}
	if _, due := z.publishDue(now); due {
		t.Fatal("a seeded sizing is saved again before it changes")
	}
	stale := a
	stale.Sizing.At = now.Add(-SizingSeedMaxAge - time.Second)
	if sz := newAccountSizer(stale, callBounds{most: 64}, now).snapshot(); sz.BatchSize != 80 || sz.Concurrency != 64 {
		t.Fatalf("stale seed gave %+v, want 80 and the maximum", sz)
	}
	a.MaxRecipientsPerCall = 50
	z.configure(a, callBounds{most: 64})
	if n := z.batchSize(); n != 40 {
		t.Fatalf("batch %d after the limit became 50, want 40", n)
	}
	// A seed below the floor of one batch's calls (its P99 is within the
	// target) is lifted to it when the sizer is made.
	a.MaxRecipientsPerCall = 100
	if c := newAccountSizer(a, callBounds{most: 64, floor: 8}, now).snapshot().Concurrency; c != 8 {
		t.Fatalf("seeded 3 calls in flight with a floor of 8: %d, want 8", c)
	}
}

// TestCopiesOfASenderShareItsSizers: a Sender copied to swap one of its
// ports (as tests and the chaos harness do), before or after its first
// turn, measures and bounds an account's calls with the same sizer as the
// original, so the account's calls in flight stay bounded across them.
func TestCopiesOfASenderShareItsSizers(t *testing.T) {
	t.Parallel()
	a := store.Account{Tenant: "t", ID: "a", RatePerSec: 10, MaxRecipientsPerCall: 100}
	s := &Sender{Sizers: &Sizers{}}
	before := *s
	z := s.sizer(a, callBounds{most: 64}, sizingT0)
	after := *s
	if zb, za := before.sizer(a, callBounds{most: 64}, sizingT0), after.sizer(a, callBounds{most: 64}, sizingT0); zb != z || za != z {
		t.Fatalf("sizers %p (copy made before), %p (copy made after), want the original's %p", zb, za, z)
	}
	if other := s.sizer(store.Account{Tenant: "t", ID: "b", RatePerSec: 10}, callBounds{most: 64}, sizingT0); other == z {
		t.Fatal("two accounts share a sizer")
	}
	if z := (&Sender{}).sizer(a, callBounds{most: 64}, sizingT0); z != nil {
		t.Fatal("a Sender without Sizers sized an account")
	}
}

// TestSizingLogLinesFollowMeaningfulChanges: a P99 hovering around the
// 2 s target moves the calls in flight at every decision (every 20
// calls); the log tells the sizing at most once a minute for that, while a
// new batch size is logged when it is chosen.
func TestSizingLogLinesFollowMeaningfulChanges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "store.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	// Single calls (a batch size of 1 never moves) at 10/s: 1.9 s gives
	// ceil(10 × 1.9 × 0.7) = 14 calls in flight, 2.1 s gives 15.
	a, err := st.PutAccount(ctx, store.Account{Tenant: "t", ID: "a", RatePerSec: 10, Burst: 10, MaxRecipientsPerCall: 1})
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(sizingT0)
	var buf bytes.Buffer
	s := &Sender{Store: st, Clock: clk, Sizers: &Sizers{}}
	tr := &turn{s: s, cfg: Config{}.withDefaults(), log: slog.New(slog.NewJSONHandler(&buf, nil)), account: a}
	tr.job.Tenant, tr.shard.Account = "t", "a"
	tr.sizing = s.sizer(a, callBounds{most: 64}, clk.Now())
	type line struct {
		Msg         string `json:"msg"`
		BatchSize   int    `json:"batch_size"`
		Concurrency int    `json:"concurrency"`
	}
	lines := func() []line {
		var out []line
		for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
			var ln line
			if err := json.Unmarshal([]byte(l), &ln); err != nil {
				t.Fatalf("log line %q: %v", l, err)
			}
			if ln.Msg == "account sizing" {
				out = append(out, ln)
			}
		}
		return out
	}
	// 18 decisions 10 s apart (3 minutes), each changing the calls in
	// flight.
	var changes int
	last := 0
	for i := range 18 {
		latency := 1900 * time.Millisecond
		if i%2 == 1 {
			latency = 2100 * time.Millisecond
		}
		clk.Advance(10 * time.Second)
		for range SizingSamples {
			tr.sizing.observe(1, latency, clk.Now())
		}
		if c := tr.sizing.snapshot().Concurrency; c != last {
			changes, last = changes+1, c
		}
		tr.noteSizing(ctx)
	}
	got := lines()
	if changes != 18 {
		t.Fatalf("%d of 18 decisions changed the calls in flight, want every one (the test's premise)", changes)
	}
	// The first decision, then one a minute: at 0:10, 1:10, 2:10.
	if len(got) != 3 {
		t.Fatalf("%d sizing log lines for 3 minutes of calls in flight moving by one, want 3: %+v", len(got), got)
	}
	if got[0].BatchSize != 1 || got[0].Concurrency != 14 {
		t.Fatalf("first line %+v, want batch 1 and 14 calls in flight", got[0])
	}

	// A provider slower by 40 ms a recipient makes an account allowing
	// 100 a call shrink its batch from 80 to 60 (a quarter at most) and
	// then to 50, then faster by 10 ms grow it back by 10 at a time: each new size is logged when chosen,
	// within the minute.
	buf.Reset()
	b, err := st.PutAccount(ctx, store.Account{Tenant: "t", ID: "b", RatePerSec: 1000, Burst: 1000, MaxRecipientsPerCall: 100})
	if err != nil {
		t.Fatal(err)
	}
	tr.account, tr.shard.Account = b, "b"
	tr.sizing = s.sizer(b, callBounds{most: 64}, clk.Now())
	var sizes []int
	for i := range 5 {
		perRecipient := 10 * time.Millisecond
		if i < 2 {
			perRecipient = 40 * time.Millisecond
		}
		tr.sizing.feed(clk, perRecipient)
		sizes = append(sizes, tr.sizing.batchSize())
		tr.noteSizing(ctx)
	}
	got = lines()
	if !slices.Equal(sizes, []int{60, 50, 60, 70, 80}) {
		t.Fatalf("batch sizes %v, want 60, 50, 60, 70, 80 (the test's premise)", sizes)
	}
	if len(got) != len(sizes) {
		t.Fatalf("%d sizing log lines for batch sizes %v, want one each: %+v", len(got), sizes, got)
	}
	for i, l := range got {
		if l.BatchSize != sizes[i] {
			t.Fatalf("log lines %+v, want batch sizes %v", got, sizes)
		}
	}
}

// TestSizerPublishesChangesAndOncePerMinute: a decision is saved once (a
// second turn asking right after gets nothing), an unchanged sizing again
// only after SizingPublishEvery.
func TestSizerPublishesChangesAndOncePerMinute(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(sizingT0)
	z := newAccountSizer(store.Account{Tenant: "t", ID: "a", RatePerSec: 100, MaxRecipientsPerCall: 100}, callBounds{most: 64}, clk.Now())
	if _, due := z.publishDue(clk.Now()); due {
		t.Fatal("nothing measured, yet due")
	}
	z.feed(clk, 40*time.Millisecond)
	sz, due := z.publishDue(clk.Now())
	if !due || sz.BatchSize >= 80 || !sz.At.Equal(clk.Now()) {
		t.Fatalf("after a decision: %+v due %v", sz, due)
	}
	if _, due := z.publishDue(clk.Now()); due {
		t.Fatal("due twice for one decision")
	}
	clk.Advance(SizingPublishEvery)
	if _, due := z.publishDue(clk.Now()); !due {
		t.Fatal("not due a minute later")
	}
}

// TestSizerSavesAChangeOfTheBatchSizeAlone: a decision that changes the
// batch size but not the calls in flight (an account without a rate
// limit always has the maximum) is saved at once, like any change: the
// account view and the gauge agree on the size.
func TestSizerSavesAChangeOfTheBatchSizeAlone(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(sizingT0)
	z := newAccountSizer(store.Account{Tenant: "t", ID: "a", MaxRecipientsPerCall: 100}, callBounds{most: 64}, clk.Now())
	z.feed(clk, 40*time.Millisecond) // 3.2 s a call of 80: down by a quarter, to 60
	if sz, due := z.publishDue(clk.Now()); !due || sz.BatchSize != 60 || sz.Concurrency != 64 {
		t.Fatalf("after the shrink: %+v due %v, want batch 60 and 64 in flight saved", sz, due)
	}
	z.feed(clk, 10*time.Millisecond) // 0.6 s: grows by 10
	if sz, due := z.publishDue(clk.Now()); !due || sz.BatchSize != 70 {
		t.Fatalf("after the batch grew: %+v due %v, want batch 70 saved", sz, due)
	}
}

// TestPackedCallsCarryTheBatchSize: identical content goes out in calls of
// the measured batch size (80 of 100 to start), a group's remainder spread
// over its calls (never over the account's limit, and never over the
// batch size once latency lowered it), and a batch claims whole calls,
// taking the shard's last items with it rather than leaving a small call
// behind.
func TestPackedCallsCarryTheBatchSize(t *testing.T) {
	t.Parallel()
	tmpl, err := content.Parse("The same words for everyone.")
	if err != nil {
		t.Fatal(err)
	}
	a := store.Account{Tenant: "t", ID: "a", RatePerSec: 1000, MaxRecipientsPerCall: 100}
	tr := &turn{s: &Sender{Sizers: &Sizers{}}, cfg: Config{}.withDefaults(), account: a, tmpl: tmpl}
	tr.sizing = tr.s.sizer(a, callBounds{most: 64}, sizingT0)
	items := func(n int) []store.Item {
		out := make([]store.Item, n)
		for i := range out {
			out[i] = store.Item{JobID: "j", Seq: int64(i), Account: "a", To: "u"}
		}
		return out
	}
	sizes := func(n int) []int {
		calls, failed := tr.buildCalls(items(n))
		if len(failed) > 0 {
			t.Fatalf("failed %v", failed)
		}
		var out []int
		for _, c := range calls {
			out = append(out, len(c.req.To))
		}
		return out
	}
	for _, tc := range []struct {
		n    int
		want []int
	}{
		{400, []int{80, 80, 80, 80, 80}},
		{479, []int{96, 96, 96, 96, 95}},
		{150, []int{75, 75}},
		{60, []int{60}},
		{190, []int{95, 95}},
	} {
		got := sizes(tc.n)
		if len(got) != len(tc.want) {
			t.Errorf("%d items: calls %v, want %v", tc.n, got, tc.want)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("%d items: calls %v, want %v", tc.n, got, tc.want)
				break
			}
		}
	}
	for _, tc := range []struct{ pending, want int }{{10000, 400}, {479, 479}, {480, 400}, {200, 400}} {
		tr.shard.Counts.Pending = int64(tc.pending)
		if got := tr.claimSize(); got != tc.want {
			t.Errorf("claim with %d pending: %d, want %d", tc.pending, got, tc.want)
		}
	}
	// Shrunk by latency: no call over the batch size.
	clk := clock.NewFake(sizingT0)
	for tr.sizing.batchSize() > 40 {
		tr.sizing.feed(clk, 60*time.Millisecond)
	}
	n := tr.sizing.batchSize()
	for _, s := range sizes(300) {
		if s > n || s < n*3/4 {
			t.Errorf("batch %d: a call of %d", n, s)
		}
	}
}

// TestBatchTakesItsCallSlotsBeforeClaiming: a batch takes the account's
// call slots before it claims, and claims no more items than those slots'
// calls carry, so no call of it waits for a slot after its claim; a batch
// of another turn finding none free claims nothing.
func TestBatchTakesItsCallSlotsBeforeClaiming(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(sizingT0)
	packed, err := content.Parse("The same words for everyone.")
	if err != nil {
		t.Fatal(err)
	}
	a := store.Account{Tenant: "t", ID: "a", RatePerSec: 10, MaxRecipientsPerCall: 100}
	s := &Sender{Sizers: &Sizers{}}
	z := s.sizer(a, callBounds{most: 64}, clk.Now())
	for range SizingSamples { // 10/s in calls of 80, 1.6 s each: 1 call in flight
		z.observe(80, 1600*time.Millisecond, clk.Now())
	}
	if c := z.snapshot().Concurrency; c != 1 {
		t.Fatalf("concurrency %d, want 1", c)
	}
	newTurn := func() *turn {
		tr := &turn{s: s, cfg: Config{}.withDefaults(), account: a, tmpl: packed, sizing: z}
		tr.shard.Counts.Pending = 10000
		return tr
	}
	t1, t2 := newTurn(), newTurn()
	want, ok := t1.takeCallSlots(t1.claimSize())
	if !ok || want != 80 || t1.callSlots != 1 {
		t.Fatalf("first batch: want %d ok %v slots %d, want one call of 80", want, ok, t1.callSlots)
	}
	if _, ok := t2.takeCallSlots(t2.claimSize()); ok {
		t.Fatal("a second batch took a slot while the only one was taken")
	}
	if got := t1.giveSlots(1); got != 1 || t1.callSlots != 0 {
		t.Fatalf("gave %d slots, %d left", got, t1.callSlots)
	}
	z.release() // the call answered
	if _, ok := t2.takeCallSlots(t2.claimSize()); !ok {
		t.Fatal("no slot after the call answered")
	}
	t2.returnSlots()
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.inFlight != 0 {
		t.Fatalf("%d slots held after all were returned", z.inFlight)
	}
}

// TestClaimSizeTakesTheLastItemsWithinACall: a batch of two calls of a
// message without variables, on an account taking 100 recipients a call
// (a batch size of 80), claims two calls' worth (160); when the shard's
// pending items are within a call of that and still fit two calls of at
// most 100, it claims them all, so the last call is not left with a
// handful; beyond that it claims 160. A personalised message claims one
// item a call.
func TestClaimSizeTakesTheLastItemsWithinACall(t *testing.T) {
	t.Parallel()
	same, err := content.Parse("hello all")
	if err != nil {
		t.Fatal(err)
	}
	personal, err := content.Parse("hello {{n}}")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		tmpl    content.Template
		pending int64
		want    int
	}{
		{same, 150, 160},
		{same, 160, 160},
		{same, 161, 161},
		{same, 200, 200},
		{same, 201, 160},
		{same, 239, 160},
		{same, 1000, 160},
		{personal, 1000, 2},
	} {
		tr := &turn{cfg: Config{ClaimBatch: 2, Concurrency: 2}, tmpl: tc.tmpl,
			account: store.Account{RatePerSec: 1000, MaxRecipientsPerCall: 100},
			shard:   store.Shard{Counts: store.Counts{Pending: tc.pending}}}
		if got := tr.claimSize(); got != tc.want {
			t.Errorf("template variables %v, %d pending: claim %d, want %d", tc.tmpl.Vars(), tc.pending, got, tc.want)
		}
	}
}

// TestSizerFollowsARateChange: the calls in flight are sized for the
// account's rate as it is now: an account raised from 10/s to 100/s
// (one recipient a call, answers in 500 ms) gets ⌈100 × 0.5 × 0.7⌉ = 35
// calls in flight at the next decision, not the 4 its old rate needed.
func TestSizerFollowsARateChange(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(sizingT0)
	a := store.Account{Tenant: "t", ID: "a", RatePerSec: 10, MaxRecipientsPerCall: 1}
	z := newAccountSizer(a, callBounds{most: 64}, clk.Now())
	z.feed(clk, 500*time.Millisecond)
	if c := z.snapshot().Concurrency; c != 4 {
		t.Fatalf("%d calls in flight at 10/s, want ⌈10 × 0.5 × 0.7⌉ = 4", c)
	}
	a.RatePerSec = 100
	z.configure(a, callBounds{most: 64})
	z.feed(clk, 500*time.Millisecond)
	if c := z.snapshot().Concurrency; c != 35 {
		t.Fatalf("%d calls in flight after the rate rose to 100/s, want 35", c)
	}
}

// TestSizerLiftsToTheFloorAtTheTarget: a P99 of exactly the target is
// within it, so a raised floor (a sender whose batches make more calls)
// lifts the calls in flight to it at once, and a decision keeps it.
func TestSizerLiftsToTheFloorAtTheTarget(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(sizingT0)
	a := store.Account{Tenant: "t", ID: "a", RatePerSec: 1, MaxRecipientsPerCall: 1}
	z := newAccountSizer(a, callBounds{most: 64}, clk.Now())
	z.feed(clk, SizingP99Target)
	if sz := z.snapshot(); sz.P99 != SizingP99Target || sz.Concurrency != 2 {
		t.Fatalf("sizing %+v, want a P99 of %v and ⌈1 × 2 × 0.7⌉ = 2 calls in flight", sz, SizingP99Target)
	}
	z.configure(a, callBounds{most: 64, floor: 10})
	if c := z.snapshot().Concurrency; c != 10 {
		t.Fatalf("%d calls in flight after the floor rose to 10 with the P99 at its target, want 10", c)
	}
	// And a decision with the P99 at its target keeps the floor.
	z = newAccountSizer(a, callBounds{most: 64, floor: 10}, clk.Now())
	z.feed(clk, SizingP99Target)
	if sz := z.snapshot(); sz.P99 != SizingP99Target || sz.Concurrency != 10 {
		t.Fatalf("sizing %+v with a floor of 10, want the floor kept at a P99 of %v", sz, SizingP99Target)
	}
}

// TestSizerCountsCallsCarryingARemainder: at the top batch size a call
// carrying more (a group's remainder riding along, up to the account's
// limit) is a call of the size chosen, and its latency counts: twenty slow
// calls of 90 recipients (batch size 80, limit 100) shrink the batch.
func TestSizerCountsCallsCarryingARemainder(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(sizingT0)
	a := store.Account{Tenant: "t", ID: "a", RatePerSec: 1000, MaxRecipientsPerCall: 100}
	z := newAccountSizer(a, callBounds{most: 64}, clk.Now())
	for range SizingSamples {
		clk.Advance(3 * time.Second)
		z.observe(90, 3*time.Second, clk.Now())
	}
	if sz := z.snapshot(); sz.P99 != 3*time.Second || sz.BatchSize >= 80 {
		t.Fatalf("sizing %+v after %d calls of 90 taking 3 s, want a P99 of 3 s and a batch under 80", sz, SizingSamples)
	}
}

// TestSizerP99IsTheSlowestOfTwentyCalls: the P99 of a window of twenty
// calls is its slowest (nearest rank), so one call over the target among
// fast ones is enough to shrink the batch.
func TestSizerP99IsTheSlowestOfTwentyCalls(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(sizingT0)
	a := store.Account{Tenant: "t", ID: "a", RatePerSec: 1000, MaxRecipientsPerCall: 100}
	z := newAccountSizer(a, callBounds{most: 64}, clk.Now())
	for i := range SizingSamples {
		d := 100 * time.Millisecond
		if i == 7 {
			d = 4 * time.Second
		}
		clk.Advance(d)
		z.observe(80, d, clk.Now())
	}
	if sz := z.snapshot(); sz.P99 != 4*time.Second || sz.BatchSize >= 80 {
		t.Fatalf("sizing %+v, want the P99 of the one 4 s call among 100 ms ones, and a smaller batch", sz)
	}
}

// TestSizerFollowsAChangeOfItsMost: a lower AccountConcurrency alone
// bounds the calls in flight at once.
func TestSizerFollowsAChangeOfItsMost(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(sizingT0)
	a := store.Account{Tenant: "t", ID: "a", RatePerSec: 1000, MaxRecipientsPerCall: 1}
	z := newAccountSizer(a, callBounds{most: 64}, clk.Now())
	if c := z.snapshot().Concurrency; c != 64 {
		t.Fatalf("%d calls in flight before any measurement, want the most, 64", c)
	}
	z.configure(a, callBounds{most: 8})
	if c := z.snapshot().Concurrency; c != 8 {
		t.Fatalf("%d calls in flight after the most fell to 8, want 8", c)
	}
}

// TestSizerSavesAnUnchangedSizingOnceAMinute: after a sizing is saved,
// decisions that change nothing are not saved again until
// SizingPublishEvery has passed: a store write per window of calls would
// cost more than the sizing saves.
func TestSizerSavesAnUnchangedSizingOnceAMinute(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(sizingT0)
	z := newAccountSizer(store.Account{Tenant: "t", ID: "a", RatePerSec: 1000, MaxRecipientsPerCall: 100}, callBounds{most: 8}, clk.Now())
	// 1.5 s a call of 80: within the target, over the grow threshold:
	// the batch stays 80 and the calls in flight at the most, 8.
	perRecipient := 1500 * time.Millisecond / 80
	z.feed(clk, perRecipient)
	if sz, due := z.publishDue(clk.Now()); !due || sz.BatchSize != 80 || sz.Concurrency != 8 {
		t.Fatalf("first decision: %+v due %v, want batch 80 and 8 in flight saved", sz, due)
	}
	z.feed(clk, perRecipient) // 30 s later, the same sizing
	if sz, due := z.publishDue(clk.Now()); due {
		t.Fatalf("an unchanged sizing saved again after %v: %+v", SizingSamples*1500*time.Millisecond, sz)
	}
	z.feed(clk, perRecipient)
	if _, due := z.publishDue(clk.Now()); !due {
		t.Fatalf("an unchanged sizing not saved again after a minute")
	}
}
