package filecreds_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/qunfa/qunfa/internal/provider"
	"github.com/qunfa/qunfa/internal/provider/filecreds"
)

func write(t *testing.T, path, v string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(v), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestFiles(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	f := filecreds.New(filecreds.Config{Dir: dir, Default: "env-token"})
	check := func(tenant, want string) {
		t.Helper()
		if got, err := f.Token(ctx, tenant); err != nil || got != want {
			t.Errorf("Token(%q) = %q, %v; want %q", tenant, got, err, want)
		}
	}
	check("tenant-a", "env-token") // nothing in the directory: the environment's
	write(t, filepath.Join(dir, "default"), `{"token": "file-default"}`)
	write(t, filepath.Join(dir, "tenants", "tenant-a"), "tok-a\n")
	write(t, filepath.Join(dir, "tenants", "租户"), `{"token":"tok-zh"}`)
	check("tenant-a", "tok-a")
	check("租户", "tok-zh")
	check("tenant-b", "file-default")
	check("..", "file-default") // never a path outside tenants/
	check("", "file-default")
	write(t, filepath.Join(dir, "tenants", "tenant-a"), `{"token":"tok-a2"}`) // rotated
	check("tenant-a", "tok-a2")

	write(t, filepath.Join(dir, "tenants", "tenant-x"), `{"tok": "secret-value"}`)
	if _, err := f.Token(ctx, "tenant-x"); err == nil || strings.Contains(err.Error(), "secret-value") {
		t.Errorf("malformed file: err = %v", err)
	}
	if _, err := filecreds.New(filecreds.Config{Dir: t.TempDir()}).Token(ctx, "tenant-a"); !errors.Is(err, provider.ErrNoCredentials) {
		t.Errorf("nothing anywhere: err = %v, want ErrNoCredentials", err)
	}
}

// Accounts' own files never fall back to the default: an account without
// one has no credential of its own (its tenant's is asked next).
func TestAccountFiles(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	write(t, filepath.Join(dir, "default"), "file-default")
	write(t, filepath.Join(dir, "tenants", "ww1.1000002"), "a-tenant-file")
	write(t, filepath.Join(dir, "accounts", "ww1.1000002"), `{"token": "own"}`)
	f := filecreds.New(filecreds.Config{Dir: dir, Default: "env-token", Accounts: true})
	if got, err := f.Token(ctx, "ww1.1000002"); err != nil || got != "own" {
		t.Fatalf("own file: %q, %v", got, err)
	}
	for _, name := range []string{"ww2.1000002", "", "../default"} {
		if got, err := f.Token(ctx, name); !errors.Is(err, provider.ErrNoCredentials) {
			t.Errorf("Token(%q) = %q, %v; want ErrNoCredentials", name, got, err)
		}
	}
}
