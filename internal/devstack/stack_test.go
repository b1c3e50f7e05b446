package devstack_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/qunfa/qunfa/internal/devstack"
)

// TestDataDirectoryIsExclusive: a second stack on the same data directory is
// refused (a restarted stack releases the queue messages its previous life
// held, which is only safe when that life is over); once the first closes,
// it opens.
func TestDataDirectoryIsExclusive(t *testing.T) {
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := devstack.Config{DataDir: dir, ProviderURL: "http://127.0.0.1:1", Token: "t"}
	first, err := devstack.Open(context.Background(), cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := devstack.Open(context.Background(), cfg, log); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("second stack on the same directory: %v", err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	again, err := devstack.Open(context.Background(), cfg, log)
	if err != nil {
		t.Fatalf("after close: %v", err)
	}
	again.Close()
}
