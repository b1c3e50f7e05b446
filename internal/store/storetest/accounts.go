package storetest

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/store"
)

// sameAccount compares accounts ignoring UpdatedAt's representation.
func sameAccount(a, b store.Account) bool {
	if !a.UpdatedAt.Equal(b.UpdatedAt) {
		return false
	}
	a.UpdatedAt, b.UpdatedAt = time.Time{}, time.Time{}
	return a == b
}

func testAccounts(t *testing.T, s store.Store, _ Capabilities) {
	ctx := ctxOf(t)
	acct := func(tenant, id string, rate float64) store.Account {
		var pacing store.Pacing // the token bucket, and random gaps on one account
		if rate == 20 {
			pacing = store.Pacing{Mode: store.PacingRandom, MinGapMs: 30}
		}
		return store.Account{
			Pacing: pacing,
			Tenant: tenant, ID: id, RatePerSec: rate, Burst: rate * 2, OnlineReservePerSec: 1.5,
			MaxRecipientsPerCall: 3, MaxContentBytes: 2048, WarmupSec: 600, FrequencyCap: store.FrequencyCap{Max: 2, WindowSec: 86400},
			Breaker:   store.BreakerConfig{ConsecutiveFailures: 20, FailureRate: 0.5, MinSamples: 50, CooldownSec: 60},
			UpdatedAt: at(time.Second),
		}
	}
	puts := []store.Account{acct("tenant-a", "acct-b", 10), acct("tenant-a", "acct-a", 20), acct("tenant-b", "acct-a", 30)}
	for _, a := range puts {
		got, err := s.PutAccount(ctx, a)
		if err != nil {
			t.Fatalf("PutAccount(%s/%s): %v", a.Tenant, a.ID, err)
		}
		if !sameAccount(got, a) {
			t.Fatalf("PutAccount returned %+v, want %+v", got, a)
		}
	}
	for _, a := range puts {
		got, err := s.GetAccount(ctx, a.Tenant, a.ID)
		if err != nil || !sameAccount(got, a) {
			t.Fatalf("GetAccount(%s/%s) = %+v, %v; want %+v", a.Tenant, a.ID, got, err, a)
		}
	}

	// Replace.
	changed := acct("tenant-a", "acct-a", 25)
	changed.Breaker = store.BreakerConfig{}
	changed.UpdatedAt = at(time.Minute)
	if _, err := s.PutAccount(ctx, changed); err != nil {
		t.Fatalf("PutAccount(replace): %v", err)
	}
	if got, err := s.GetAccount(ctx, "tenant-a", "acct-a"); err != nil || !sameAccount(got, changed) {
		t.Fatalf("GetAccount after replace = %+v, %v; want %+v", got, err, changed)
	}
	if got, err := s.GetAccount(ctx, "tenant-b", "acct-a"); err != nil || got.RatePerSec != 30 {
		t.Fatalf("another tenant's account changed: %+v, %v", got, err)
	}

	ids := func(tenant string) []string {
		t.Helper()
		list, err := s.ListAccounts(ctx, tenant)
		if err != nil {
			t.Fatalf("ListAccounts(%s): %v", tenant, err)
		}
		var out []string
		for _, a := range list {
			if a.Tenant != tenant {
				t.Fatalf("ListAccounts(%s) returned %s's account %s", tenant, a.Tenant, a.ID)
			}
			out = append(out, a.ID)
		}
		return out
	}
	if got := ids("tenant-a"); !slices.Equal(got, []string{"acct-a", "acct-b"}) {
		t.Fatalf("ListAccounts(tenant-a) = %v, want [acct-a acct-b]", got)
	}
	if got := ids("tenant-b"); !slices.Equal(got, []string{"acct-a"}) {
		t.Fatalf("ListAccounts(tenant-b) = %v, want [acct-a]", got)
	}
	if got := ids("tenant-nobody"); len(got) != 0 {
		t.Fatalf("ListAccounts(unknown tenant) = %v", got)
	}
	if _, err := s.GetAccount(ctx, "tenant-b", "acct-b"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetAccount(another tenant's account) error = %v, want ErrNotFound", err)
	}
	if _, err := s.GetAccount(ctx, "tenant-a", "acct-z"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetAccount(unknown) error = %v, want ErrNotFound", err)
	}
}

func testAPITokens(t *testing.T, s store.Store, _ Capabilities) {
	ctx := ctxOf(t)
	for hash, tenant := range map[string]string{"hash-1": "tenant-a", "hash-2": "tenant-b", "hash-3": "tenant-a"} {
		if err := s.PutToken(ctx, hash, tenant); err != nil {
			t.Fatalf("PutToken(%s): %v", hash, err)
		}
	}
	for hash, want := range map[string]string{"hash-1": "tenant-a", "hash-2": "tenant-b", "hash-3": "tenant-a"} {
		if got, err := s.TenantForToken(ctx, hash); err != nil || got != want {
			t.Fatalf("TenantForToken(%s) = %q, %v; want %q", hash, got, err, want)
		}
	}
	if _, err := s.TenantForToken(ctx, "hash-unknown"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("TenantForToken(unknown) error = %v, want ErrNotFound", err)
	}
}
