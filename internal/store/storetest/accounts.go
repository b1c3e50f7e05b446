package storetest

import (
	"errors"
	"reflect"
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
	return reflect.DeepEqual(a, b)
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
	onApp := acct("tenant-b", "acct-c", 5)
	onApp.Provider = "wecom-app"
	noLookup := acct("tenant-b", "acct-d", 5)
	noLookup.Provider, noLookup.NoStatusLookup = "wecomapi", true
	sms := acct("tenant-b", "acct-e", 5)
	sms.Provider = "http"
	sms.HTTP = &store.HTTPProvider{URL: "https://sms.example.com/send", Method: "POST",
		Headers: map[string]string{"Authorization": "Bearer {{secret}}"}, Body: `{"to":"{{to}}","text":"{{content}}"}`,
		Accepted: []int{200, 202}, RateLimited: []int{429}, Permanent: []int{400}, MsgIDField: "id"}
	puts := []store.Account{acct("tenant-a", "acct-b", 10), acct("tenant-a", "acct-a", 20), acct("tenant-b", "acct-a", 30), onApp, noLookup, sms}
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
	if got := ids("tenant-b"); !slices.Equal(got, []string{"acct-a", "acct-c", "acct-d", "acct-e"}) {
		t.Fatalf("ListAccounts(tenant-b) = %v, want [acct-a acct-c acct-d acct-e]", got)
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

// testAccountSizing: the sender's sizing of an account is saved beside its
// limits without touching them, read back by GetAccount and ListAccounts,
// refused for an unknown account, and started afresh by a PutAccount (new
// limits, new measurement).
func testAccountSizing(t *testing.T, s store.Store, _ Capabilities) {
	ctx := ctxOf(t)
	a := store.Account{Tenant: "tenant-a", ID: "acct-z", RatePerSec: 50, Burst: 50, MaxRecipientsPerCall: 100, UpdatedAt: at(time.Second)}
	if _, err := s.PutAccount(ctx, a); err != nil {
		t.Fatal(err)
	}
	if got, err := s.GetAccount(ctx, a.Tenant, a.ID); err != nil || got.Sizing.Measured() {
		t.Fatalf("a new account has sizing %+v (%v)", got.Sizing, err)
	}
	z := store.AccountSizing{BatchSize: 60, Concurrency: 7, P99: 2345 * time.Millisecond, At: at(time.Minute)}
	if err := s.SaveAccountSizing(ctx, store.SaveAccountSizingParams{Tenant: a.Tenant, Account: a.ID, Sizing: z}); err != nil {
		t.Fatalf("SaveAccountSizing: %v", err)
	}
	same := func(got store.AccountSizing, want store.AccountSizing) bool {
		return got.BatchSize == want.BatchSize && got.Concurrency == want.Concurrency && got.P99 == want.P99 && got.At.Equal(want.At)
	}
	got, err := s.GetAccount(ctx, a.Tenant, a.ID)
	if err != nil || !same(got.Sizing, z) {
		t.Fatalf("GetAccount sizing %+v (%v), want %+v", got.Sizing, err, z)
	}
	if got.RatePerSec != 50 || got.MaxRecipientsPerCall != 100 || !got.UpdatedAt.Equal(a.UpdatedAt) {
		t.Fatalf("saving the sizing changed the limits: %+v", got)
	}
	list, err := s.ListAccounts(ctx, a.Tenant)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, l := range list {
		if l.ID == a.ID {
			found = same(l.Sizing, z)
		}
	}
	if !found {
		t.Fatalf("ListAccounts lacks the sizing: %+v", list)
	}
	z2 := store.AccountSizing{BatchSize: 45, Concurrency: 9, P99: 1800 * time.Millisecond, At: at(2 * time.Minute)}
	if err := s.SaveAccountSizing(ctx, store.SaveAccountSizingParams{Tenant: a.Tenant, Account: a.ID, Sizing: z2}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.GetAccount(ctx, a.Tenant, a.ID); err != nil || !same(got.Sizing, z2) {
		t.Fatalf("sizing after a second save %+v (%v), want %+v", got.Sizing, err, z2)
	}
	err = s.SaveAccountSizing(ctx, store.SaveAccountSizingParams{Tenant: a.Tenant, Account: "nobody", Sizing: z})
	if !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("SaveAccountSizing of an unknown account: %v, want ErrNotFound", err)
	}
	if _, err := s.GetAccount(ctx, a.Tenant, "nobody"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("SaveAccountSizing created an account: %v", err)
	}
	err = s.SaveAccountSizing(ctx, store.SaveAccountSizingParams{Tenant: a.Tenant, Account: a.ID})
	if !errors.Is(err, store.ErrInvalidArgument) {
		t.Fatalf("SaveAccountSizing without a time: %v, want ErrInvalidArgument", err)
	}
	a.MaxRecipientsPerCall = 200
	put, err := s.PutAccount(ctx, a)
	if err != nil || put.Sizing.Measured() {
		t.Fatalf("PutAccount returned sizing %+v (%v)", put.Sizing, err)
	}
	if got, err := s.GetAccount(ctx, a.Tenant, a.ID); err != nil || got.Sizing.Measured() || got.MaxRecipientsPerCall != 200 {
		t.Fatalf("after PutAccount: %+v (%v), want new limits and no sizing", got, err)
	}
}
