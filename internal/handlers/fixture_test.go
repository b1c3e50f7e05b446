package handlers_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/api"
	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/queue/sqlitequeue"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/store/sqlitestore"
)

// embedded opens the embedded store and queue in a temporary directory,
// on a fake clock at now, with tenant-a reachable by token and its account
// acct-a.
func embedded(t *testing.T, token string, now time.Time) (*sqlitestore.Store, *sqlitequeue.Queue, *clock.Fake) {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	st, err := sqlitestore.Open(ctx, filepath.Join(dir, "store.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	clk := clock.NewFake(now)
	q, err := sqlitequeue.Open(ctx, filepath.Join(dir, "queue.db"), sqlitequeue.Options{Name: "work", Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	if err := st.PutToken(ctx, api.HashToken(token), "tenant-a"); err != nil {
		t.Fatal(err)
	}
	if err := st.GrantAccount(ctx, "tenant-a", "acct-a", now); err != nil {
		t.Fatal(err)
	}
	if _, err := st.PutAccount(ctx, store.Account{Tenant: "tenant-a", ID: "acct-a", RatePerSec: 5, Burst: 5, MaxRecipientsPerCall: 1}); err != nil {
		t.Fatal(err)
	}
	return st, q, clk
}
