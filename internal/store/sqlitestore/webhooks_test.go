package sqlitestore

import (
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/store/storetest"
)

// TestWebhookTablesMigrated opens files written before webhooks were part of
// the numbered schema: version 3 (before metadata) and 4 (metadata), each
// without webhook tables, and version 3 with the tables a build of the
// webhooks branch created at Open before migration 5 existed. Each reaches
// the current version, takes a webhook, and a second Open of the same file
// finds it in place.
func TestWebhookTablesMigrated(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		version       int
		webhookTables bool
	}{
		"version 3":                     {version: 3},
		"version 4":                     {version: 4},
		"version 3 with webhook tables": {version: 3, webhookTables: true},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			path := filepath.Join(t.TempDir(), "store.db")
			old, err := sql.Open("sqlite", path)
			if err != nil {
				t.Fatal(err)
			}
			qs := []string{schema}
			for v := 2; v <= tc.version; v++ {
				qs = append(qs, migrations[v])
			}
			if tc.webhookTables {
				qs = append(qs, webhookSchema)
			}
			qs = append(qs, fmt.Sprintf("PRAGMA user_version = %d", tc.version))
			for _, q := range qs {
				if _, err := old.ExecContext(ctx, q); err != nil {
					t.Fatalf("write a version %d file: %v", tc.version, err)
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
		})
	}
}
