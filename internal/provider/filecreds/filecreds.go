// Package filecreds is the local adapter of the provider.Credentials port
// (`qunfa dev`): a tenant's provider token is the file
// <Dir>/tenants/<tenant> and the default one is <Dir>/default, or, when
// that file is absent, the token given by the environment
// (QUNFA_PROVIDER_TOKEN). A file holds JSON {"token": "..."} or the bare
// token. Files are read at each Token: wrap the adapter in credcache.
// With Config.Accounts the names are accounts (accesstoken.AccountKey):
// the file <Dir>/accounts/<name>, and no default.
package filecreds

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/qunfa/qunfa/internal/provider"
)

var _ provider.Credentials = (*Files)(nil)

// Config says where the tokens are.
type Config struct {
	// Dir holds default and tenants/<tenant> (e.g. <data-dir>/provider-credentials).
	Dir string
	// Default is the default token when Dir has no default file (from the
	// environment; empty: none).
	Default string
	// Accounts: the names are accounts, each file <Dir>/accounts/<name>;
	// an account without one has no credential of its own (the default
	// file and Default are not read).
	Accounts bool
}

// Files reads provider tokens from files.
type Files struct{ cfg Config }

// New returns the adapter.
func New(cfg Config) *Files { return &Files{cfg: cfg} }

// maxFile bounds a credentials file.
const maxFile = 64 << 10

// Token reads the tenant's file, else the default file, else the default
// token; ErrNoCredentials when there is none.
func (f *Files) Token(_ context.Context, tenant string) (string, error) {
	scope := "tenants"
	if f.cfg.Accounts {
		scope = "accounts"
	}
	if f.cfg.Dir != "" && safeName(tenant) {
		tok, err := readToken(filepath.Join(f.cfg.Dir, scope, tenant))
		if err == nil {
			return tok, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("provider credentials of %s %q: %w", strings.TrimSuffix(scope, "s"), tenant, err)
		}
	}
	if f.cfg.Accounts {
		return "", provider.ErrNoCredentials
	}
	if f.cfg.Dir != "" {
		tok, err := readToken(filepath.Join(f.cfg.Dir, "default"))
		if err == nil {
			return tok, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("default provider credentials: %w", err)
		}
	}
	if f.cfg.Default != "" {
		return f.cfg.Default, nil
	}
	return "", provider.ErrNoCredentials
}

// Invalidate does nothing: every Token reads the files.
func (f *Files) Invalidate(context.Context, string, string) {}

// safeName: a tenant id usable as a file name in tenants/ (no path
// separators, no dot files).
func safeName(tenant string) bool {
	if tenant == "" || len(tenant) > 255 || strings.HasPrefix(tenant, ".") {
		return false
	}
	return !strings.ContainsAny(tenant, `/\`+"\x00")
}

var errMalformed = errors.New(`file is neither {"token": "..."} nor a bare token`)

func readToken(path string) (string, error) {
	fh, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer fh.Close()
	b := make([]byte, maxFile+1)
	n, _ := fh.Read(b)
	if n > maxFile {
		return "", fmt.Errorf("%s: %w", path, errMalformed)
	}
	v := strings.TrimSpace(string(b[:n]))
	if strings.HasPrefix(v, "{") {
		var doc struct {
			Token string `json:"token"`
		}
		if json.Unmarshal([]byte(v), &doc) != nil || doc.Token == "" {
			return "", fmt.Errorf("%s: %w", path, errMalformed)
		}
		return doc.Token, nil
	}
	if v == "" || strings.ContainsAny(v, " \t\r\n") {
		return "", fmt.Errorf("%s: %w", path, errMalformed)
	}
	return v, nil
}
