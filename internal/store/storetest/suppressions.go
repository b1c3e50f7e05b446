package storetest

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/store"
)

func putSuppressions(t tb, s store.Store, tenant string, entries ...store.Suppression) {
	t.Helper()
	if err := s.PutSuppressions(ctxOf(t), tenant, entries); err != nil {
		t.Fatalf("PutSuppressions(%s, %d entries): %v", tenant, len(entries), err)
	}
}

// suppressedAmong asks about keys and returns the suppressed ones, failing
// on a suppressed recipient that was not asked about.
func suppressedAmong(t tb, s store.Store, tenant string, keys ...store.RecipientKey) map[store.RecipientKey]bool {
	t.Helper()
	got, err := s.SuppressedAmong(ctxOf(t), tenant, keys)
	if err != nil {
		t.Fatalf("SuppressedAmong(%s, %d keys): %v", tenant, len(keys), err)
	}
	out := map[store.RecipientKey]bool{}
	for k, v := range got {
		if !v {
			continue
		}
		if !slices.Contains(keys, k) {
			t.Fatalf("SuppressedAmong(%s) returned %+v, which was not asked about", tenant, k)
		}
		out[k] = true
	}
	return out
}

func rk(account, to string) store.RecipientKey { return store.RecipientKey{Account: account, To: to} }

func testSuppressions(t *testing.T, s store.Store, _ Capabilities) {
	ctx := ctxOf(t)
	sup := func(account, to string) store.Suppression {
		return store.Suppression{Account: account, To: to, Reason: "unsubscribed", CreatedAt: at(time.Second)}
	}
	putSuppressions(t, s, "tenant-a", sup("acct-1", "u1"), sup("acct-1", "u2"), sup("acct-2", "u1"), sup("acct-1", "u1"))
	putSuppressions(t, s, "tenant-a", sup("acct-1", "u2")) // again: harmless
	putSuppressions(t, s, "tenant-b", sup("acct-1", "u3"))
	putSuppressions(t, s, "tenant-a") // nothing

	asked := []store.RecipientKey{rk("acct-1", "u1"), rk("acct-1", "u2"), rk("acct-1", "u3"), rk("acct-2", "u1"),
		rk("acct-2", "u2"), rk("acct-3", "u1"), rk("acct-1", "u1")}
	want := map[store.RecipientKey]bool{rk("acct-1", "u1"): true, rk("acct-1", "u2"): true, rk("acct-2", "u1"): true}
	if got := suppressedAmong(t, s, "tenant-a", asked...); !maps.Equal(got, want) {
		t.Fatalf("SuppressedAmong(tenant-a) = %v, want %v", got, want)
	}
	// Tenants are separate, and a list is per account.
	if got, want := suppressedAmong(t, s, "tenant-b", asked...), map[store.RecipientKey]bool{rk("acct-1", "u3"): true}; !maps.Equal(got, want) {
		t.Fatalf("SuppressedAmong(tenant-b) = %v, want %v", got, want)
	}
	if got := suppressedAmong(t, s, "tenant-c", asked...); len(got) != 0 {
		t.Fatalf("SuppressedAmong(tenant without a list) = %v", got)
	}
	if got := suppressedAmong(t, s, "tenant-a"); len(got) != 0 {
		t.Fatalf("SuppressedAmong(no keys) = %v", got)
	}
	if list := listSuppressions(t, s, "tenant-a", 0); len(list) != 3 {
		t.Fatalf("ListSuppressions after duplicate puts = %v, want 3 entries", list)
	}

	// Delete, and delete what is not there.
	for _, d := range []store.RecipientKey{rk("acct-1", "u1"), rk("acct-1", "u1"), rk("acct-9", "nobody")} {
		if err := s.DeleteSuppression(ctx, "tenant-a", d.Account, d.To); err != nil {
			t.Fatalf("DeleteSuppression(%+v): %v", d, err)
		}
	}
	if err := s.DeleteSuppression(ctx, "tenant-b", "acct-1", "u2"); err != nil {
		t.Fatalf("DeleteSuppression(absent in tenant-b): %v", err)
	}
	want = map[store.RecipientKey]bool{rk("acct-1", "u2"): true, rk("acct-2", "u1"): true}
	if got := suppressedAmong(t, s, "tenant-a", asked...); !maps.Equal(got, want) {
		t.Fatalf("SuppressedAmong(tenant-a) after delete = %v, want %v", got, want)
	}
	if got := suppressedAmong(t, s, "tenant-b", rk("acct-1", "u3")); len(got) != 1 {
		t.Fatalf("deleting in tenant-a changed tenant-b: %v", got)
	}

	// A full batch: MaxPutItems entries in one put, MaxPutItems keys in one
	// look-up, every third one suppressed.
	var (
		batch []store.Suppression
		keys  []store.RecipientKey
	)
	want = map[store.RecipientKey]bool{}
	for i := range store.MaxPutItems {
		k := rk(fmt.Sprintf("acct-%d", i%4), fmt.Sprintf("bulk-%04d", i))
		keys = append(keys, k)
		if i%3 == 0 {
			want[k] = true
		}
		batch = append(batch, sup(k.Account, k.To))
		if i%3 != 0 {
			batch[len(batch)-1].To = "other-" + k.To
		}
	}
	putSuppressions(t, s, "tenant-c", batch...)
	if got := suppressedAmong(t, s, "tenant-c", keys...); !maps.Equal(got, want) {
		t.Fatalf("SuppressedAmong(%d keys): %d suppressed, want %d", len(keys), len(got), len(want))
	}

	tooMany := append(slices.Clone(batch), sup("acct-0", "one-more"))
	if err := s.PutSuppressions(ctx, "tenant-c", tooMany); !errors.Is(err, store.ErrInvalidArgument) {
		t.Fatalf("PutSuppressions(%d entries) error = %v, want ErrInvalidArgument", len(tooMany), err)
	}
	if _, err := s.SuppressedAmong(ctx, "tenant-c", append(slices.Clone(keys), rk("acct-0", "x"))); !errors.Is(err, store.ErrInvalidArgument) {
		t.Fatalf("SuppressedAmong(%d keys) error = %v, want ErrInvalidArgument", len(keys)+1, err)
	}
	if err := s.PutSuppressions(ctx, "tenant-c", []store.Suppression{{Account: "acct-0"}}); !errors.Is(err, store.ErrInvalidArgument) {
		t.Fatalf("PutSuppressions(empty recipient) error = %v, want ErrInvalidArgument", err)
	}
	if err := s.PutSuppressions(ctx, "", []store.Suppression{sup("acct-0", "u")}); !errors.Is(err, store.ErrInvalidArgument) {
		t.Fatalf("PutSuppressions(empty tenant) error = %v, want ErrInvalidArgument", err)
	}
}

// listSuppressions pages through a tenant's list with the given page size,
// failing on an entry seen twice or out of (account, recipient) order.
func listSuppressions(t tb, s store.Store, tenant string, limit int) []store.Suppression {
	t.Helper()
	var (
		all    []store.Suppression
		cursor string
	)
	for page := 0; ; page++ {
		if page > 10000 {
			t.Fatalf("ListSuppressions(%s): cursor never ends", tenant)
		}
		res, err := s.ListSuppressions(ctxOf(t), store.ListSuppressionsParams{Tenant: tenant, Cursor: cursor, Limit: limit})
		if err != nil {
			t.Fatalf("ListSuppressions(%s, page %d): %v", tenant, page, err)
		}
		if limit > 0 && len(res.Entries) > limit {
			t.Fatalf("ListSuppressions(%s): %d entries in a page of limit %d", tenant, len(res.Entries), limit)
		}
		for _, e := range res.Entries {
			if n := len(all); n > 0 && compareSuppressions(all[n-1], e) >= 0 {
				t.Fatalf("ListSuppressions(%s): %s/%s after %s/%s (out of order, or repeated across pages)",
					tenant, e.Account, e.To, all[n-1].Account, all[n-1].To)
			}
			all = append(all, e)
		}
		if res.NextCursor == "" {
			return all
		}
		if res.NextCursor == cursor {
			t.Fatalf("ListSuppressions(%s): NextCursor %q repeats the request cursor", tenant, cursor)
		}
		cursor = res.NextCursor
	}
}

func compareSuppressions(a, b store.Suppression) int {
	if c := strings.Compare(a.Account, b.Account); c != 0 {
		return c
	}
	return strings.Compare(a.To, b.To)
}

func testListSuppressions(t *testing.T, s store.Store, _ Capabilities) {
	ctx := ctxOf(t)
	// Accounts that share a prefix, and separators in the keys, so that
	// ordering by account then recipient differs from ordering by the
	// concatenation.
	accounts := []string{"a", "a!", "a#b", "acct-2", "acct-10", "acct-é", "b"}
	var want []store.Suppression
	for i := range 23 {
		e := store.Suppression{
			Account:   accounts[(i*5)%len(accounts)],
			To:        fmt.Sprintf("%c#user-%02d", 'z'-rune(i%3), i),
			Reason:    fmt.Sprintf("reason %d", i),
			CreatedAt: at(time.Duration(i) * time.Millisecond),
		}
		want = append(want, e)
	}
	// Put in two calls, in an order that is not the listing's.
	putSuppressions(t, s, "tenant-a", want[10:]...)
	putSuppressions(t, s, "tenant-a", want[:10]...)
	putSuppressions(t, s, "tenant-b", store.Suppression{Account: "a", To: "other-tenant"})
	slices.SortFunc(want, compareSuppressions)

	for _, limit := range []int{0, 1, 5, 23, 100} {
		got := listSuppressions(t, s, "tenant-a", limit)
		if len(got) != len(want) {
			t.Fatalf("ListSuppressions(limit %d): %d entries, want %d", limit, len(got), len(want))
		}
		for i := range got {
			if got[i].Account != want[i].Account || got[i].To != want[i].To || got[i].Reason != want[i].Reason || !got[i].CreatedAt.Equal(want[i].CreatedAt) {
				t.Fatalf("ListSuppressions(limit %d)[%d] = %+v, want %+v", limit, i, got[i], want[i])
			}
		}
	}
	first, err := s.ListSuppressions(ctx, store.ListSuppressionsParams{Tenant: "tenant-a", Limit: 5})
	if err != nil || len(first.Entries) != 5 || first.NextCursor == "" {
		t.Fatalf("ListSuppressions(limit 5) = %d entries, cursor %q, %v; want 5 and a cursor", len(first.Entries), first.NextCursor, err)
	}
	if got := listSuppressions(t, s, "tenant-b", 0); len(got) != 1 || got[0].To != "other-tenant" {
		t.Fatalf("ListSuppressions(tenant-b) = %+v", got)
	}
	if got := listSuppressions(t, s, "tenant-c", 0); len(got) != 0 {
		t.Fatalf("ListSuppressions(tenant without a list) = %+v", got)
	}
}

func changedAt(t tb, s store.Store, tenant string) time.Time {
	t.Helper()
	at, err := s.SuppressionsChangedAt(ctxOf(t), tenant)
	if err != nil {
		t.Fatalf("SuppressionsChangedAt(%s): %v", tenant, err)
	}
	return at
}

// SuppressionsChangedAt is zero for an empty list and never before the
// CreatedAt of an entry on it: whoever skips look-ups on its word (a
// sender whose job was planned after it) never misses an entry.
func testSuppressionsChangedAt(t *testing.T, s store.Store, _ Capabilities) {
	tenant := uniqueID("tenant-mark")
	if at := changedAt(t, s, tenant); !at.IsZero() {
		t.Fatalf("a tenant without a list: %s, want the zero time", at)
	}
	t1, t2 := at(time.Minute), at(2*time.Minute)
	putSuppressions(t, s, tenant, store.Suppression{Account: "a", To: "u1", CreatedAt: t2})
	putSuppressions(t, s, tenant, store.Suppression{Account: "a", To: "u2", CreatedAt: t1}, store.Suppression{Account: "b", To: "u3", CreatedAt: t1})
	if got := changedAt(t, s, tenant); got.Before(t2) {
		t.Fatalf("after entries of %s and %s: %s, before the newest", t1, t2, got)
	}
	// Re-adding an entry renews it.
	t3 := at(3 * time.Minute)
	putSuppressions(t, s, tenant, store.Suppression{Account: "a", To: "u2", CreatedAt: t3})
	if got := changedAt(t, s, tenant); got.Before(t3) {
		t.Fatalf("after re-adding an entry at %s: %s", t3, got)
	}
	// An entry without a time counts as added at the end of time.
	putSuppressions(t, s, tenant, store.Suppression{Account: "c", To: "u4"})
	if got := changedAt(t, s, tenant); !got.Equal(store.EndOfTime) {
		t.Fatalf("after an entry without a time: %s, want the end of time", got)
	}
	// Other tenants are not affected.
	if at := changedAt(t, s, uniqueID("tenant-other")); !at.IsZero() {
		t.Fatalf("another tenant: %s", at)
	}
}
