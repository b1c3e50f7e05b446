package devstack_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/devstack"
	"github.com/qunfa/qunfa/internal/mockprovider"
	"github.com/qunfa/qunfa/internal/provider"
)

// TestProviderTokensFromTheDataDirectory: `qunfa dev` sends a tenant's
// accounts with the token in <data-dir>/provider-credentials/tenants/<tenant>,
// an account nobody owns with QUNFA_PROVIDER_TOKEN, reads a rotated file
// when the provider refuses the old token, and logs neither.
func TestProviderTokensFromTheDataDirectory(t *testing.T) {
	dir := t.TempDir()
	mock, err := mockprovider.New(mockprovider.Config{LogPath: filepath.Join(t.TempDir(), "d.jsonl")})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mock.Handler())
	defer srv.Close()
	defer mock.Close()
	tenantFile := filepath.Join(dir, devstack.ProviderCredentialsDir, "tenants", devstack.DefaultTenant)
	write := func(v string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(tenantFile), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(tenantFile, []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(`{"token": "dev-tenant-token-1"}`)
	for acct, tok := range map[string]string{"acct-own": "dev-tenant-token-1", "acct-free": "env-default-token"} {
		if err := mock.SetBehaviour(acct, mockprovider.Behaviour{Token: tok}); err != nil {
			t.Fatal(err)
		}
	}

	var logs bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	s, err := devstack.Open(context.Background(), devstack.Config{DataDir: dir, ProviderURL: srv.URL, Token: "t",
		ProviderToken: "env-default-token"}, log)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	if err := s.Store.GrantAccount(ctx, devstack.DefaultTenant, "acct-own", time.Now()); err != nil {
		t.Fatal(err)
	}
	send := func(acct, key string) provider.RecipientResult {
		t.Helper()
		res, err := s.Sender.Provider.Send(ctx, provider.SendRequest{Account: acct, Keys: []string{key}, To: []string{"u"}, Content: "hi"})
		if err != nil {
			t.Fatal(err)
		}
		return res.Recipients[0]
	}
	for acct, key := range map[string]string{"acct-own": "k1", "acct-free": "k2"} {
		if r := send(acct, key); !r.Accepted {
			t.Errorf("%s: %+v", acct, r)
		}
	}
	// Rotation: new file, the provider takes only the new token.
	write("dev-tenant-token-2\n")
	if err := mock.SetBehaviour("acct-own", mockprovider.Behaviour{Token: "dev-tenant-token-2"}); err != nil {
		t.Fatal(err)
	}
	if r := send("acct-own", "k3"); !r.Accepted {
		t.Errorf("after rotation: %+v", r)
	}
	for _, tok := range []string{"dev-tenant-token", "env-default-token"} {
		if strings.Contains(logs.String(), tok) {
			t.Errorf("a provider token was logged")
		}
	}
}
