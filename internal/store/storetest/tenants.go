package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/store"
)

// testTenants: API tokens with roles and expiry, listed per tenant and
// revoked at once; provider accounts owned by one tenant at most.
func testTenants(t *testing.T, s store.Store, _ Capabilities) {
	ts, ok := s.(store.TenantStore)
	if !ok {
		t.Fatalf("%T does not implement store.TenantStore", s)
	}
	ctx := ctxOf(t)
	a1 := store.APIToken{ID: "tok_a1", Tenant: "tenant-a", Name: "ci", Role: store.RoleRead, Hash: "hash-a1",
		CreatedAt: at(time.Second), ExpiresAt: at(time.Hour)}
	a2 := store.APIToken{ID: "tok_a2", Tenant: "tenant-a", Name: "ops", Role: store.RoleOperate, Hash: "hash-a2", CreatedAt: at(2 * time.Second)}
	b1 := store.APIToken{ID: "tok_a1", Tenant: "tenant-b", Name: "admin", Role: store.RoleAdmin, Hash: "hash-b1", CreatedAt: at(3 * time.Second)}
	for _, tok := range []store.APIToken{a2, a1, b1} {
		if err := ts.CreateToken(ctx, tok); err != nil {
			t.Fatalf("CreateToken(%s/%s): %v", tok.Tenant, tok.ID, err)
		}
	}
	for _, tok := range []store.APIToken{a1, a2, b1} {
		got, err := ts.TokenByHash(ctx, tok.Hash)
		if err != nil || got.ID != tok.ID || got.Tenant != tok.Tenant || got.Name != tok.Name || got.Role != tok.Role ||
			!got.CreatedAt.Equal(tok.CreatedAt) || !got.ExpiresAt.Equal(tok.ExpiresAt) {
			t.Fatalf("TokenByHash(%s) = %+v, %v; want %+v", tok.Hash, got, err, tok)
		}
	}
	// The same hash, or the same id within a tenant, cannot be created twice.
	dupHash := a1
	dupHash.ID, dupHash.Tenant = "tok_other", "tenant-b"
	dupID := a1
	dupID.Hash = "hash-other"
	for name, tok := range map[string]store.APIToken{"hash": dupHash, "id": dupID} {
		if err := ts.CreateToken(ctx, tok); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("CreateToken(duplicate %s) error = %v, want ErrConflict", name, err)
		}
	}
	if got, _ := ts.TokenByHash(ctx, "hash-a1"); got.Tenant != "tenant-a" {
		t.Fatalf("a refused duplicate rebound the token: %+v", got)
	}
	if _, err := ts.TokenByHash(ctx, "hash-other"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a refused duplicate left a working token: %v", err)
	}
	if err := ts.CreateToken(ctx, store.APIToken{ID: "tok_x", Tenant: "tenant-a", Hash: "hash-x", Role: "root"}); !errors.Is(err, store.ErrInvalidArgument) {
		t.Fatalf("CreateToken(unknown role) error = %v, want ErrInvalidArgument", err)
	}
	list, err := ts.ListTokens(ctx, "tenant-a")
	if err != nil || len(list) != 2 || list[0].ID != "tok_a1" || list[1].ID != "tok_a2" {
		t.Fatalf("ListTokens(tenant-a) = %+v, %v; want tok_a1, tok_a2", list, err)
	}
	if list, err := ts.ListTokens(ctx, "tenant-c"); err != nil || len(list) != 0 {
		t.Fatalf("ListTokens(tenant-c) = %+v, %v; want none", list, err)
	}
	// Revocation: another tenant cannot revoke it; its tenant can, at once.
	if err := ts.DeleteToken(ctx, "tenant-b", "tok_a2"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("DeleteToken(another tenant's) error = %v, want ErrNotFound", err)
	}
	if err := ts.DeleteToken(ctx, "tenant-a", "tok_a2"); err != nil {
		t.Fatalf("DeleteToken: %v", err)
	}
	if _, err := ts.TokenByHash(ctx, "hash-a2"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("TokenByHash(revoked) error = %v, want ErrNotFound", err)
	}
	if err := ts.DeleteToken(ctx, "tenant-a", "tok_a2"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("DeleteToken(again) error = %v, want ErrNotFound", err)
	}
	if list, _ := ts.ListTokens(ctx, "tenant-a"); len(list) != 1 {
		t.Fatalf("after revoking: %+v", list)
	}
	// Provisioned tokens are admin tokens; provisioning again is
	// idempotent, binding the hash to another tenant refused.
	if err := s.PutToken(ctx, "hash-p", "tenant-a"); err != nil {
		t.Fatalf("PutToken: %v", err)
	}
	if err := s.PutToken(ctx, "hash-p", "tenant-a"); err != nil {
		t.Fatalf("PutToken(again): %v", err)
	}
	if err := s.PutToken(ctx, "hash-p", "tenant-b"); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("PutToken(to another tenant) error = %v, want ErrConflict", err)
	}
	if got, err := ts.TokenByHash(ctx, "hash-p"); err != nil || got.Tenant != "tenant-a" || got.Role != store.RoleAdmin {
		t.Fatalf("provisioned token = %+v, %v", got, err)
	}

	// Provider accounts.
	if _, err := ts.AccountOwner(ctx, "guid-1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("AccountOwner(unowned) error = %v, want ErrNotFound", err)
	}
	if err := ts.GrantAccount(ctx, "tenant-a", "guid-1", at(time.Second)); err != nil {
		t.Fatalf("GrantAccount: %v", err)
	}
	if err := ts.GrantAccount(ctx, "tenant-a", "guid-1", at(2*time.Second)); err != nil {
		t.Fatalf("GrantAccount(again, same tenant): %v", err)
	}
	if err := ts.GrantAccount(ctx, "tenant-b", "guid-1", at(3*time.Second)); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("GrantAccount(owned by another) error = %v, want ErrConflict", err)
	}
	if owner, err := ts.AccountOwner(ctx, "guid-1"); err != nil || owner != "tenant-a" {
		t.Fatalf("AccountOwner = %q, %v; want tenant-a", owner, err)
	}
}
