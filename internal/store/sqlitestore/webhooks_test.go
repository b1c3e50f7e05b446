package sqlitestore

import (
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/store/storetest"
)

// TestWebhookTablesAddedToAnExistingFile opens a file written before
// webhooks existed (the current numbered schema, no webhook tables): Open
// adds them without touching the schema version, and a second Open of the
// same file finds them in place.
func TestWebhookTablesAddedToAnExistingFile(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "store.db")
	old, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	qs := []string{schema}
	for v := 2; v <= schemaVersion; v++ {
		qs = append(qs, migrations[v])
	}
	qs = append(qs, fmt.Sprintf("PRAGMA user_version = %d", schemaVersion))
	for _, q := range qs {
		if _, err := old.ExecContext(ctx, q); err != nil {
			t.Fatalf("write a file without webhook tables: %v", err)
		}
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}

	s := openTemp(t, path)
	w := store.Webhook{Tenant: "t", ID: "wh", URL: "https://x.example/", Events: []string{"job.finished"}, Secret: "s", CreatedAt: storetest.Epoch}
	if err := s.CreateWebhook(ctx, w); err != nil {
		t.Fatalf("CreateWebhook on an upgraded file: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	again := openTemp(t, path)
	if got, err := again.GetWebhook(ctx, "t", "wh"); err != nil || got.URL != w.URL {
		t.Fatalf("GetWebhook after reopening = %+v, %v", got, err)
	}
	var v int
	if err := again.w.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil || v != schemaVersion {
		t.Fatalf("schema version = %d, %v; want %d", v, err, schemaVersion)
	}
}
