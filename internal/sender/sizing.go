package sender

import (
	"context"
	"log/slog"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/qunfa/qunfa/internal/metrics"
	"github.com/qunfa/qunfa/internal/store"
)

// Batch size and calls in flight from measurement (issue 13).
//
// Calls of identical content carry up to SizingShare (80%) of the
// account's max_recipients_per_call: the headroom the requirement asks for,
// as other systems may call the same account. Every SizingSamples answered
// calls of an account, the P99 of their latencies decides: over
// SizingP99Target (2 s) the batch shrinks (to the share of the target the
// P99 allows, at most by a quarter at a time); under SizingGrowBelow of
// the target it grows back by an eighth of the 80% size, never beyond it.
// Between the two it stays, so it settles instead of swinging.
//
// Calls in flight per account follow Little's law: the account's call rate
// (its batch rate over the recipients per call) times the call latency,
// times SizingSafety (0.7), rounded up, at least 1 and at most
// Config.AccountConcurrency. The latency is the window's P99, not its
// mean: the slots must carry the rate through the slow calls too (a mean
// of 20 ms under a tail of 200 ms would leave the account one slot and
// starve it), while the factor keeps the calls in flight under what the
// tail alone would ask for. An account whose calls all take equally long
// still sends at no less than 70% of its batch rate when the calls in
// flight bind, the safety margin the requirement asks for; the token
// bucket bounds it above as always. Before the first measurement the
// account may use the maximum.
//
// Where the measurement lives: in the process, per account, shared by all
// the turns (shards) of the account the process works — the latencies are
// this process's own calls, and a call's answer updates it without a store
// write. The chosen sizing is saved on the account (SaveAccountSizing)
// when it changes and at least every SizingPublishEvery while the account
// sends: the API, the dashboard and the metrics of any process show it, and
// a process that starts sending for the account (a new Lambda instance)
// starts from it instead of from 80%, if it is less than SizingSeedMaxAge
// old. Lambda instances working the same account each measure their own
// calls and bound their own calls in flight; the sizing saved is the last
// one that changed.
//
// The log tells a new batch size when it is chosen (it moves only past the
// target or under SizingGrowBelow of it, so rarely). A change of the calls
// in flight alone (they follow the P99 at every decision, and jump when it
// hovers around the target, where the floor of one batch's calls comes and
// goes) is logged at most once every SizingLogEvery per account; the
// metrics take every decision.
const (
	SizingShare         = 0.8
	SizingP99Target     = 2 * time.Second
	SizingGrowBelow     = 0.7
	SizingSafety        = 0.7
	SizingSamples       = 20
	SizingPublishEvery  = time.Minute
	SizingSeedMaxAge    = 15 * time.Minute
	SizingLogEvery      = time.Minute
	sizingShrinkAtMost  = 0.75
	sizingGrowStepShare = 8
)

// Sizers holds the process's sizer of every account it sends for: what it
// measured of the account's calls and the calls it has in flight, shared
// by all the process's turns. A Sender takes it as a pointer made where the
// Sender is wired, so every copy of the Sender shares it; the zero value is
// ready to use.
type Sizers struct {
	mu sync.Mutex
	m  map[string]*accountSizer
}

// accountSizer measures one account's calls and chooses its batch size and
// calls in flight. Its slots bound the account's calls in flight.
type accountSizer struct {
	mu   sync.Mutex
	cond *sync.Cond

	limit int     // the account's max_recipients_per_call it sizes for
	top   int     // SizingShare of limit, at least 1
	rate  float64 // the account's batch rate (0: unlimited)
	most  int     // the configured maximum of calls in flight
	floor int     // the fewest calls in flight it allows (callBounds)

	batch       int
	concurrency int
	p99         time.Duration
	at          time.Time // when last decided (zero: never measured)

	window     []time.Duration
	recipients int // in the window's calls

	inFlight int

	version          int64 // bumped by every decision that changed the sizing
	published        int64 // the version last saved or being saved
	publishedAt      time.Time
	decisions        int64 // bumped by every decision
	publishedMetrics int64 // the decision last given to the metrics
	loggedVersion    int64 // the version last logged
	loggedBatch      int   // the batch size last logged
	loggedAt         time.Time
}

// callBounds are the sender's bounds on an account's calls in flight.
type callBounds struct {
	// most is the configured maximum (Config.AccountConcurrency).
	most int
	// floor is the fewest allowed while the P99 latency is within its
	// target: the calls one batch of the sender makes. Little's law sizes
	// the calls in flight of an even flow (rate × latency), but a sender
	// starts a batch's calls together, after the batch's store work: with
	// fewer slots than one batch's calls, the store work and the calls
	// take turns and a fast provider's account falls well below its rate
	// (measured: 23–53% of the batch rate on DynamoDB). Once the latency
	// is over the target, Little's law alone rules.
	floor int
}

// callBounds of the sender's config.
func (c Config) callBounds() callBounds {
	return callBounds{most: c.AccountConcurrency, floor: min(c.ClaimBatch, c.Concurrency)}
}

// sizer returns the process's sizer of the turn's account, creating it
// (from the sizing saved on the account, if recent) on first use, and
// keeps it in line with the account's limits. With no Sizers there is
// none (nil): calls carry SizingShare of the account's limit and only the
// turn's Concurrency bounds its calls in flight.
func (s *Sender) sizer(a store.Account, b callBounds, now time.Time) *accountSizer {
	reg := s.Sizers
	if reg == nil {
		return nil
	}
	reg.mu.Lock()
	k := a.Tenant + "\x00" + a.ID
	z := reg.m[k]
	if z == nil {
		z = newAccountSizer(a, b, now)
		if reg.m == nil {
			reg.m = map[string]*accountSizer{}
		}
		reg.m[k] = z
		reg.mu.Unlock()
		return z
	}
	reg.mu.Unlock()
	z.configure(a, b)
	return z
}

func newAccountSizer(a store.Account, b callBounds, now time.Time) *accountSizer {
	z := &accountSizer{}
	z.cond = sync.NewCond(&z.mu)
	z.configure(a, b)
	if sz := a.Sizing; sz.Measured() && now.Sub(sz.At) < SizingSeedMaxAge && sz.BatchSize > 0 && sz.Concurrency > 0 {
		z.batch, z.concurrency = min(sz.BatchSize, z.top), min(sz.Concurrency, z.most)
		z.p99, z.at = sz.P99, sz.At
		z.published, z.publishedAt = z.version, sz.At
		z.liftToFloor()
	}
	return z
}

// configure takes the account's current limits and the sender's bounds
// when they changed: a new max_recipients_per_call starts the measurement
// afresh, and the calls in flight are kept within the bounds.
func (z *accountSizer) configure(a store.Account, b callBounds) {
	limit, rate, most := perCall(a), a.BatchRate(), max(1, b.most)
	z.mu.Lock()
	defer z.mu.Unlock()
	if limit == z.limit && rate == z.rate && most == z.most && b.floor == z.floor {
		return
	}
	z.rate, z.most, z.floor = rate, most, b.floor
	z.concurrency = min(max(z.concurrency, 1), z.most)
	if limit != z.limit {
		z.limit = limit
		z.top = topCallSize(limit)
		z.batch = z.top
		z.window, z.recipients = z.window[:0], 0
		if z.at.IsZero() {
			z.concurrency = z.most
		}
	}
	z.liftToFloor()
	z.cond.Broadcast()
}

// liftToFloor raises the calls in flight to the floor while the P99
// latency is within its target (see callBounds); z.mu is held.
func (z *accountSizer) liftToFloor() {
	if z.concurrency < z.floor && z.concurrency < z.most && z.p99 <= SizingP99Target {
		z.concurrency = min(z.floor, z.most)
	}
}

// BatchSize is the recipients a call of identical content carries now.
func (z *accountSizer) batchSize() int {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.batch
}

// tryAcquire takes up to n free call slots of the account at once and
// tells how many it took (0: none free).
func (z *accountSizer) tryAcquire(n int) int {
	z.mu.Lock()
	defer z.mu.Unlock()
	g := max(0, min(n, z.concurrency-z.inFlight))
	z.inFlight += g
	return g
}

// releaseN frees n call slots.
func (z *accountSizer) releaseN(n int) {
	if n <= 0 {
		return
	}
	z.mu.Lock()
	z.inFlight -= n
	z.cond.Broadcast()
	z.mu.Unlock()
}

// acquire waits for a call slot of the account.
func (z *accountSizer) acquire() {
	z.mu.Lock()
	for z.inFlight >= z.concurrency {
		z.cond.Wait()
	}
	z.inFlight++
	z.mu.Unlock()
}

// release frees a call slot.
func (z *accountSizer) release() {
	z.mu.Lock()
	z.inFlight--
	z.cond.Broadcast()
	z.mu.Unlock()
}

// observe records one answered call of n recipients that took d, and
// decides when the window is full.
func (z *accountSizer) observe(n int, d time.Duration, now time.Time) {
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.batch < z.top && n > z.batch {
		// A call made before the batch shrank: it tells nothing of the
		// size chosen since.
		return
	}
	z.window = append(z.window, d)
	z.recipients += max(n, 1)
	if len(z.window) < SizingSamples {
		return
	}
	sorted := slices.Clone(z.window)
	slices.Sort(sorted)
	// Nearest rank: the smallest latency at least 99% of the calls
	// took no longer than.
	p99 := sorted[int(math.Ceil(0.99*float64(len(sorted))))-1]
	perCall := float64(z.recipients) / float64(len(sorted))
	was := [2]int{z.batch, z.concurrency}
	switch {
	case p99 > SizingP99Target && z.batch > 1:
		// To what the target allows, but by at most a quarter: one slow
		// window (a provider's hiccup) must not collapse the batch, and a
		// P99 just over the target takes off only what it must.
		allowed := int(math.Floor(float64(z.batch) * float64(SizingP99Target) / float64(p99)))
		z.batch = max(1, allowed, int(math.Floor(float64(z.batch)*sizingShrinkAtMost)))
	case float64(p99) < SizingGrowBelow*float64(SizingP99Target) && z.batch < z.top:
		z.batch = min(z.top, z.batch+max(1, z.top/sizingGrowStepShare))
	}
	z.concurrency = z.most
	if z.rate > 0 {
		c := math.Ceil(z.rate / perCall * p99.Seconds() * SizingSafety)
		if p99 <= SizingP99Target {
			c = max(c, float64(z.floor))
		}
		z.concurrency = int(min(float64(z.most), max(1, c)))
	}
	z.p99, z.at = p99, now
	z.window, z.recipients = z.window[:0], 0
	z.decisions++
	if was != [2]int{z.batch, z.concurrency} || z.decisions == 1 {
		z.version++
	}
	z.cond.Broadcast()
}

// snapshot is the sizing as chosen now.
func (z *accountSizer) snapshot() store.AccountSizing {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.snapshotLocked()
}

func (z *accountSizer) snapshotLocked() store.AccountSizing {
	return store.AccountSizing{BatchSize: z.batch, Concurrency: z.concurrency, P99: z.p99, At: z.at}
}

// publishDue tells whether the sizing should be saved now (it changed
// since it was last saved, or that was SizingPublishEvery ago) and, if so,
// takes the turn to save it: another turn asking right after gets false.
func (z *accountSizer) publishDue(now time.Time) (store.AccountSizing, bool) {
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.at.IsZero() || (z.published == z.version && now.Sub(z.publishedAt) < SizingPublishEvery) {
		return store.AccountSizing{}, false
	}
	z.published, z.publishedAt = z.version, now
	sz := z.snapshotLocked()
	sz.At = now
	return sz, true
}

// metricsDue tells whether the metrics have not seen the latest decision,
// and marks it seen; log tells whether the sizing is to be logged (and
// marks it logged): it changed since it was last logged, and its batch
// size did or the last log line is SizingLogEvery old.
func (z *accountSizer) metricsDue(now time.Time) (sz store.AccountSizing, due, log bool) {
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.at.IsZero() || z.publishedMetrics == z.decisions {
		return store.AccountSizing{}, false, false
	}
	z.publishedMetrics = z.decisions
	log = z.loggedVersion != z.version &&
		(z.loggedAt.IsZero() || z.batch != z.loggedBatch || now.Sub(z.loggedAt) >= SizingLogEvery)
	if log {
		z.loggedVersion, z.loggedBatch, z.loggedAt = z.version, z.batch, now
	}
	return z.snapshotLocked(), true, log
}

// noteSizing passes the account's latest sizing to the metrics and saves
// it on the account when due (see publishDue). A failed save is logged and
// retried at the next due time: the sizing is advice to readers, the
// sending goes on from the process's own.
func (tr *turn) noteSizing(ctx context.Context) {
	z := tr.sizing
	if z == nil {
		return
	}
	if sz, due, log := z.metricsDue(tr.s.Clock.Now()); due {
		if r, ok := tr.s.metrics().(metrics.SizingRecorder); ok {
			r.AccountSizing(ctx, tr.shard.Account, sz.BatchSize, sz.Concurrency, sz.P99)
		}
		if log {
			tr.log.Info("account sizing", slog.String("account", tr.shard.Account), slog.Int("batch_size", sz.BatchSize),
				slog.Int("concurrency", sz.Concurrency), slog.Duration("p99", sz.P99))
		}
	}
	sz, ok := z.publishDue(tr.s.Clock.Now())
	if !ok {
		return
	}
	if err := tr.s.Store.SaveAccountSizing(context.WithoutCancel(ctx), store.SaveAccountSizingParams{
		Tenant: tr.job.Tenant, Account: tr.shard.Account, Sizing: sz,
	}); err != nil {
		tr.log.Warn("save account sizing", slog.String("account", tr.shard.Account), slog.Any("err", err))
	}
}

// slotPoll is how long a turn waits before looking for a free call slot
// of its account again.
const slotPoll = 20 * time.Millisecond

// takeCallSlots takes the account's call slots for a batch of want items
// before tokens are taken and items claimed, so every call of the batch
// starts right after its claim (the reconciler's settle delay counts from
// the claim: a call queued behind others for long could be looked up as
// never sent, resent, and then go out too). With fewer slots free than the
// batch needs, the batch shrinks to them; with none, ok is false.
func (tr *turn) takeCallSlots(want int) (int, bool) {
	z := tr.sizing
	if z == nil || tr.account.Pacing.Random() {
		// A paced account's calls are spaced by its schedule's slots,
		// which bound its calls in flight by themselves.
		return want, true
	}
	need := tr.callsFor(want)
	n := z.tryAcquire(need)
	if n == 0 {
		return 0, false
	}
	tr.callSlots = n
	if n < need {
		want = min(want, tr.claimSizeFor(n))
	}
	return want, true
}

// waitForCallSlot records this turn's calls that have answered (freeing their
// slots) and waits a little before the batch is tried again.
func (tr *turn) waitForCallSlot(ctx context.Context) (Result, bool, error) {
	if err := tr.collectStragglers(context.WithoutCancel(ctx), false); err != nil {
		return Result{}, true, err
	}
	return tr.wait(ctx, slotPoll, "waiting for a call slot")
}

// giveSlots hands the batch's slots to its n calls and frees the rest; it
// tells how many calls got one.
func (tr *turn) giveSlots(n int) int {
	given := min(n, tr.callSlots)
	if z := tr.sizing; z != nil {
		z.releaseN(tr.callSlots - given)
	}
	tr.callSlots = 0
	return given
}

// returnSlots frees the slots the batch took and gave to no call.
func (tr *turn) returnSlots() {
	if tr.callSlots > 0 && tr.sizing != nil {
		tr.sizing.releaseN(tr.callSlots)
	}
	tr.callSlots = 0
}
