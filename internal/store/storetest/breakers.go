package storetest

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/store"
)

// normBreaker returns b with times in UTC without monotonic readings, for
// deep comparison.
func normBreaker(b store.Breaker) store.Breaker {
	for _, t := range []*time.Time{&b.OpenedAt, &b.Until, &b.WindowAt, &b.UpdatedAt} {
		*t = t.UTC().Round(0)
	}
	return b
}

func sameBreaker(a, b store.Breaker) bool { return reflect.DeepEqual(normBreaker(a), normBreaker(b)) }

func getBreaker(t tb, s store.Store, tenant, account string) store.Breaker {
	t.Helper()
	b, err := s.GetBreaker(ctxOf(t), tenant, account)
	if err != nil {
		t.Fatalf("GetBreaker(%s/%s): %v", tenant, account, err)
	}
	return b
}

func saveBreaker(t tb, s store.Store, b store.Breaker) store.Breaker {
	t.Helper()
	got, err := s.SaveBreaker(ctxOf(t), b)
	if err != nil {
		t.Fatalf("SaveBreaker(%s/%s, version %d): %v", b.Tenant, b.Account, b.Version, err)
	}
	want := b
	want.Version = b.Version + 1
	if !sameBreaker(got, want) {
		t.Fatalf("SaveBreaker returned %+v, want %+v", got, want)
	}
	if stored := getBreaker(t, s, b.Tenant, b.Account); !sameBreaker(stored, got) {
		t.Fatalf("GetBreaker after SaveBreaker = %+v, want %+v", stored, got)
	}
	return got
}

// openBreaker is a breaker of tenant/account opened at Epoch + d with every
// field set.
func openBreaker(tenant, account string, d time.Duration) store.Breaker {
	return store.Breaker{
		Tenant: tenant, Account: account, State: store.BreakerOpen, Reason: "failure rate 0.6",
		OpenedAt: at(d), Until: at(d + time.Minute), Opens: 2, ProbeShard: "job-x/3",
		WindowAt: at(d - time.Minute), WindowAttempts: 120, WindowFailures: 72, UpdatedAt: at(d),
	}
}

func testBreakers(t *testing.T, s store.Store, _ Capabilities) {
	ctx := ctxOf(t)
	// Never saved: closed, version 0, never ErrNotFound.
	b := getBreaker(t, s, "tenant-a", "acct-1")
	if want := (store.Breaker{Tenant: "tenant-a", Account: "acct-1", State: store.BreakerClosed}); !sameBreaker(b, want) {
		t.Fatalf("GetBreaker(never saved) = %+v, want %+v", b, want)
	}

	// The first save is conditional on there being none (version 0).
	b = saveBreaker(t, s, openBreaker("tenant-a", "acct-1", time.Second))
	if b.Version != 1 {
		t.Fatalf("first SaveBreaker: Version %d, want 1", b.Version)
	}
	for _, v := range []int64{0, 2, 7} {
		stale := openBreaker("tenant-a", "acct-1", time.Hour)
		stale.Version = v
		if _, err := s.SaveBreaker(ctx, stale); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("SaveBreaker(version %d, stored 1) error = %v, want ErrConflict", v, err)
		}
		if got := getBreaker(t, s, "tenant-a", "acct-1"); !sameBreaker(got, b) {
			t.Fatalf("refused SaveBreaker changed the breaker: %+v", got)
		}
	}

	// Half-open, then closed by a successful probe; each save moves the
	// version on.
	b.State, b.ProbeShard, b.UpdatedAt = store.BreakerHalfOpen, "job-y/0", at(2*time.Minute)
	b = saveBreaker(t, s, b)
	b.State, b.Opens, b.ProbeShard, b.Reason, b.Until = store.BreakerClosed, 0, "", "", time.Time{}
	b = saveBreaker(t, s, b)
	if b.Version != 3 {
		t.Fatalf("Version after three saves = %d, want 3", b.Version)
	}

	// An empty state reads as closed.
	empty := saveBreaker(t, s, store.Breaker{Tenant: "tenant-a", Account: "acct-2", State: store.BreakerClosed, UpdatedAt: at(time.Second)})
	empty.State = ""
	if got, err := s.SaveBreaker(ctx, empty); err != nil || (got.State != store.BreakerClosed && got.State != "") {
		t.Fatalf("SaveBreaker(empty state) = %+v, %v", got, err)
	}
	if got := getBreaker(t, s, "tenant-a", "acct-2"); got.State != store.BreakerClosed || got.Version != 2 {
		t.Fatalf("breaker saved with an empty state reads %q, version %d; want closed, 2", got.State, got.Version)
	}

	// Tenants and accounts are separate.
	if got := getBreaker(t, s, "tenant-b", "acct-1"); got.State != store.BreakerClosed || got.Version != 0 {
		t.Fatalf("another tenant's breaker of the same account = %+v, want closed at version 0", got)
	}
	if got := getBreaker(t, s, "tenant-a", "acct-3"); got.State != store.BreakerClosed || got.Version != 0 {
		t.Fatalf("another account's breaker = %+v, want closed at version 0", got)
	}
	if _, err := s.SaveBreaker(ctx, store.Breaker{Account: "acct-1", State: store.BreakerOpen}); !errors.Is(err, store.ErrInvalidArgument) {
		t.Fatalf("SaveBreaker(empty tenant) error = %v, want ErrInvalidArgument", err)
	}
}

// testSaveBreakerConcurrent: savers racing from the same version — exactly
// one wins, the others get ErrConflict, and the winner's breaker is stored.
func testSaveBreakerConcurrent(t *testing.T, s store.Store, caps Capabilities) {
	n := caps.sizes().workers
	for round, version := range []int64{0, 1} {
		errs := make([]error, n)
		got := make([]store.Breaker, n)
		var wg sync.WaitGroup
		for g := range n {
			wg.Go(func() {
				b := openBreaker("tenant-a", "acct-1", time.Duration(round*n+g+1)*time.Second)
				b.Reason = fmt.Sprintf("saver %d", g)
				b.Version = version
				got[g], errs[g] = s.SaveBreaker(ctxOf(t), b)
			})
		}
		wg.Wait()
		winner := -1
		for g, err := range errs {
			switch {
			case err == nil:
				if winner >= 0 {
					t.Fatalf("round %d: savers %d and %d both saved from version %d", round, winner, g, version)
				}
				winner = g
			case !errors.Is(err, store.ErrConflict):
				t.Fatalf("round %d: saver %d error = %v, want ErrConflict", round, g, err)
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: no saver won", round)
		}
		stored := getBreaker(t, s, "tenant-a", "acct-1")
		if !sameBreaker(stored, got[winner]) || stored.Version != version+1 || stored.Reason != fmt.Sprintf("saver %d", winner) {
			t.Fatalf("round %d: stored %+v, winner %d saved %+v", round, stored, winner, got[winner])
		}
	}
}

func testListBreakers(t *testing.T, s store.Store, _ Capabilities) {
	ctx := ctxOf(t)
	list := func(all bool) []string {
		t.Helper()
		bs, err := s.ListBreakers(ctx, store.ListBreakersParams{AllStates: all})
		if err != nil {
			t.Fatalf("ListBreakers(AllStates %v): %v", all, err)
		}
		var out []string
		for _, b := range bs {
			stored := getBreaker(t, s, b.Tenant, b.Account)
			if !sameBreaker(b, stored) {
				t.Fatalf("ListBreakers returned %+v, stored %+v", b, stored)
			}
			out = append(out, fmt.Sprintf("%s/%s:%s", b.Tenant, b.Account, b.State))
		}
		slices.Sort(out)
		return out
	}
	if got := list(false); len(got) != 0 {
		t.Fatalf("ListBreakers on an empty store = %v", got)
	}
	getBreaker(t, s, "tenant-a", "acct-never") // reading stores nothing

	aOpen := saveBreaker(t, s, openBreaker("tenant-a", "acct-1", time.Second))
	aClosed := saveBreaker(t, s, openBreaker("tenant-a", "acct-2", time.Second))
	aClosed.State = store.BreakerClosed
	saveBreaker(t, s, aClosed)
	half := openBreaker("tenant-b", "acct-1", time.Second)
	half.State = store.BreakerHalfOpen
	bHalf := saveBreaker(t, s, half)
	bClosed := openBreaker("tenant-b", "acct-9", time.Second)
	bClosed.State = store.BreakerClosed
	saveBreaker(t, s, bClosed)

	if got, want := list(false), []string{"tenant-a/acct-1:open", "tenant-b/acct-1:half_open"}; !slices.Equal(got, want) {
		t.Fatalf("ListBreakers() = %v, want %v", got, want)
	}
	if got, want := list(true), []string{"tenant-a/acct-1:open", "tenant-a/acct-2:closed", "tenant-b/acct-1:half_open", "tenant-b/acct-9:closed"}; !slices.Equal(got, want) {
		t.Fatalf("ListBreakers(AllStates) = %v, want %v", got, want)
	}

	// Closing one and reopening another moves them in and out.
	aOpen.State = store.BreakerClosed
	saveBreaker(t, s, aOpen)
	bHalf.State = store.BreakerOpen
	saveBreaker(t, s, bHalf)
	reopened := getBreaker(t, s, "tenant-a", "acct-2")
	reopened.State = store.BreakerOpen
	saveBreaker(t, s, reopened)
	if got, want := list(false), []string{"tenant-a/acct-2:open", "tenant-b/acct-1:open"}; !slices.Equal(got, want) {
		t.Fatalf("ListBreakers() after changes = %v, want %v", got, want)
	}
	if got := list(true); len(got) != 4 {
		t.Fatalf("ListBreakers(AllStates) after changes = %v, want 4 breakers", got)
	}
}

// normTransitions returns h with times in UTC without monotonic readings.
func normTransitions(h []store.BreakerTransition) []store.BreakerTransition {
	out := make([]store.BreakerTransition, len(h))
	for i, tr := range h {
		tr.At, tr.Until = tr.At.UTC().Round(0), tr.Until.UTC().Round(0)
		out[i] = tr
	}
	return out
}

func breakerHistory(t tb, s store.Store, tenant, account string) []store.BreakerTransition {
	t.Helper()
	h, err := s.ListBreakerHistory(ctxOf(t), tenant, account)
	if err != nil {
		t.Fatalf("ListBreakerHistory(%s/%s): %v", tenant, account, err)
	}
	return normTransitions(h)
}

// testBreakerHistory: a save with a Transition records it with the
// breaker (numbered by Transitions), a save without one records nothing,
// the history reads newest first, keeps the last MaxBreakerHistory, and
// is per tenant and account (an account whose name extends another's
// included).
func testBreakerHistory(t *testing.T, s store.Store, _ Capabilities) {
	ctx := ctxOf(t)
	if h := breakerHistory(t, s, "tenant-a", "acct-1"); len(h) != 0 {
		t.Fatalf("history of a breaker never saved = %+v, want none", h)
	}
	opened := store.BreakerTransition{From: store.BreakerClosed, To: store.BreakerOpen, At: at(time.Second),
		Reason: "failure rate 60% over 120 attempts in 1m0s", FailureRate: 0.6, Attempts: 120, Opens: 1, Until: at(time.Minute)}
	b := openBreaker("tenant-a", "acct-1", time.Second)
	b.Transition = &opened
	got, err := s.SaveBreaker(ctx, b)
	if err != nil {
		t.Fatalf("SaveBreaker with a transition: %v", err)
	}
	if got.Transitions != 1 || got.Transition != nil {
		t.Fatalf("SaveBreaker with a transition returned Transitions %d, Transition %v; want 1, nil", got.Transitions, got.Transition)
	}
	if stored := getBreaker(t, s, "tenant-a", "acct-1"); stored.Transitions != 1 || stored.Transition != nil || !sameBreaker(stored, got) {
		t.Fatalf("GetBreaker after a transition = %+v, want %+v", stored, got)
	}
	want := opened
	want.Seq = 1
	if h := breakerHistory(t, s, "tenant-a", "acct-1"); !reflect.DeepEqual(h, normTransitions([]store.BreakerTransition{want})) {
		t.Fatalf("history after one transition = %+v, want [%+v]", h, want)
	}

	// A save without a transition (the scheduled check's window) changes
	// neither the count nor the history.
	got.WindowAt, got.WindowAttempts = at(2*time.Second), 130
	got = saveBreaker(t, s, got)
	if got.Transitions != 1 {
		t.Fatalf("a save without a transition moved Transitions to %d", got.Transitions)
	}
	if h := breakerHistory(t, s, "tenant-a", "acct-1"); len(h) != 1 {
		t.Fatalf("a save without a transition changed the history: %+v", h)
	}
	// A refused save records nothing.
	stale := got
	stale.Version = 0
	stale.Transition = &store.BreakerTransition{From: store.BreakerOpen, To: store.BreakerHalfOpen, At: at(3 * time.Second)}
	if _, err := s.SaveBreaker(ctx, stale); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("stale SaveBreaker with a transition error = %v, want ErrConflict", err)
	}
	if h := breakerHistory(t, s, "tenant-a", "acct-1"); len(h) != 1 {
		t.Fatalf("a refused save changed the history: %+v", h)
	}

	// More than MaxBreakerHistory transitions: the last ones are kept,
	// newest first.
	total := store.MaxBreakerHistory + 5
	states := []store.BreakerState{store.BreakerHalfOpen, store.BreakerClosed, store.BreakerOpen}
	for n := 2; n <= total; n++ {
		from := got.State
		got.State = states[n%3]
		got.UpdatedAt = at(time.Duration(n) * time.Second)
		got.Transition = &store.BreakerTransition{From: from, To: got.State, At: got.UpdatedAt,
			Reason: fmt.Sprintf("transition %d", n), ConsecutiveFailures: n}
		if got, err = s.SaveBreaker(ctx, got); err != nil {
			t.Fatalf("SaveBreaker, transition %d: %v", n, err)
		}
	}
	if got.Transitions != int64(total) {
		t.Fatalf("Transitions after %d = %d", total, got.Transitions)
	}
	h := breakerHistory(t, s, "tenant-a", "acct-1")
	if len(h) != store.MaxBreakerHistory {
		t.Fatalf("history holds %d transitions, want the last %d", len(h), store.MaxBreakerHistory)
	}
	for i, tr := range h {
		n := total - i
		if tr.Seq != int64(n) || tr.Reason != fmt.Sprintf("transition %d", n) || tr.ConsecutiveFailures != n ||
			tr.To != states[n%3] || !tr.At.Equal(at(time.Duration(n)*time.Second)) {
			t.Fatalf("history[%d] = %+v, want transition %d", i, tr, n)
		}
	}

	// Per tenant and account.
	other := openBreaker("tenant-a", "acct-1#x", time.Second)
	other.Transition = &store.BreakerTransition{From: store.BreakerClosed, To: store.BreakerOpen, At: at(time.Second), Reason: "other"}
	if _, err := s.SaveBreaker(ctx, other); err != nil {
		t.Fatal(err)
	}
	if h := breakerHistory(t, s, "tenant-a", "acct-1"); len(h) != store.MaxBreakerHistory || h[0].Seq != int64(total) {
		t.Fatalf("another account's transition shows in acct-1's history: %d entries, newest %+v", len(h), h[0])
	}
	if h := breakerHistory(t, s, "tenant-a", "acct-1#x"); len(h) != 1 || h[0].Reason != "other" || h[0].Seq != 1 {
		t.Fatalf("history of acct-1#x = %+v, want its one transition", h)
	}
	if h := breakerHistory(t, s, "tenant-b", "acct-1"); len(h) != 0 {
		t.Fatalf("another tenant's history of the same account = %+v, want none", h)
	}
	if _, err := s.ListBreakerHistory(ctx, "", "acct-1"); !errors.Is(err, store.ErrInvalidArgument) {
		t.Fatalf("ListBreakerHistory(empty tenant) error = %v, want ErrInvalidArgument", err)
	}
}

// testBreakerHistoryConcurrent: transitions racing from the same read
// (two breaker checks of one account deciding at once) each land in the
// history exactly once with the save that won: the history always numbers
// 1..Transitions without a gap or a repeat, and holds the reason of every
// save that succeeded and of no save that was refused.
func testBreakerHistoryConcurrent(t *testing.T, s store.Store, _ Capabilities) {
	ctx := ctxOf(t)
	const rounds, racers = 6, 2
	won := map[string]bool{}
	for r := range rounds {
		b := getBreaker(t, s, "tenant-a", "acct-race")
		var wg sync.WaitGroup
		results := make([]error, racers)
		for i := range racers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c := b
				from := c.State
				c.State = []store.BreakerState{store.BreakerOpen, store.BreakerClosed}[(r+i)%2]
				c.UpdatedAt = at(time.Duration(r) * time.Second)
				c.Transition = &store.BreakerTransition{From: from, To: c.State, At: c.UpdatedAt, Reason: fmt.Sprintf("round %d racer %d", r, i)}
				_, results[i] = s.SaveBreaker(ctx, c)
			}()
		}
		wg.Wait()
		wins := 0
		for i, err := range results {
			switch {
			case err == nil:
				wins++
				won[fmt.Sprintf("round %d racer %d", r, i)] = true
			case !errors.Is(err, store.ErrConflict):
				t.Fatalf("racing SaveBreaker: %v", err)
			}
		}
		if wins != 1 {
			t.Fatalf("round %d: %d of %d saves from one read won, want 1", r, wins, racers)
		}
	}
	b := getBreaker(t, s, "tenant-a", "acct-race")
	h := breakerHistory(t, s, "tenant-a", "acct-race")
	if b.Transitions != rounds || len(h) != rounds {
		t.Fatalf("after %d rounds: Transitions %d, %d history entries; want %d each: %+v", rounds, b.Transitions, len(h), rounds, h)
	}
	for i, tr := range h {
		if tr.Seq != int64(rounds-i) || !won[tr.Reason] {
			t.Errorf("history[%d] = seq %d %q; want seq %d of a save that won", i, tr.Seq, tr.Reason, rounds-i)
		}
		delete(won, tr.Reason)
	}
	if len(won) != 0 {
		t.Errorf("saves that won are missing from the history: %v", won)
	}
}
