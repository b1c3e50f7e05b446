package emulators

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestWaitLevelDBFree: while a dynalite holds its store the wait times out
// (a restart would otherwise start a second dynalite on it, whose first
// requests fail); once it is gone the store is free.
func TestWaitLevelDBFree(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	p, err := StartDynalite(ctx, DynaliteOptions{DataDir: dir})
	if err != nil {
		if os.Getenv("QUNFA_REQUIRE_EMULATORS") == "1" { // awsemu.Unavailable (which imports this package)
			t.Fatalf("dynalite: %v", err)
		}
		t.Skipf("EMULATOR UNAVAILABLE: dynalite: %v (run `make emulators`)", err)
	}
	defer p.Stop()
	// A request makes dynalite open its store.
	req, _ := http.NewRequestWithContext(ctx, "POST", p.Endpoint, strings.NewReader("{}"))
	req.Header.Set("X-Amz-Target", "DynamoDB_20120810.ListTables")
	req.Header.Set("Content-Type", "application/x-amz-json-1.0")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("ListTables: %v", err)
	}
	resp.Body.Close()
	// dynalite may answer before LevelDB has written its LOCK file: until
	// then the store looks new (free) whoever holds it.
	for _, err := os.Stat(filepath.Join(dir, "LOCK")); err != nil; _, err = os.Stat(filepath.Join(dir, "LOCK")) {
		if ctx.Err() != nil {
			t.Fatalf("dynalite never created its LevelDB LOCK: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := waitLevelDBFree(ctx, dir, 200*time.Millisecond); err == nil {
		t.Fatalf("the store of a running dynalite is reported free")
	}
	p.Stop()
	if err := waitLevelDBFree(ctx, dir, 5*time.Second); err != nil {
		t.Fatalf("after dynalite stopped: %v", err)
	}
}
