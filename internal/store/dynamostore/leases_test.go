package dynamostore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/store/dynamostore"
)

// TestReleaseLeaseOfHolders: a restarted local stack frees the lease its
// killed previous life held (holders named with its prefix) so the next
// pass need not wait for the lease to expire, keeps the cursor, and never
// frees another holder's lease.
func TestReleaseLeaseOfHolders(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, dynamostore.Options{})
	t0 := time.Unix(1_800_000_000, 0)
	acquire := func(holder string) error {
		_, err := s.AcquireLease(ctx, store.AcquireLeaseParams{Name: "reconciler", Holder: holder, Now: t0, Until: t0.Add(5 * time.Minute)})
		return err
	}
	if err := acquire("dev:/data-1"); err != nil {
		t.Fatal(err)
	}
	if err := s.ReleaseLease(ctx, store.ReleaseLeaseParams{Name: "reconciler", Holder: "dev:/data-1", Cursor: "c1"}); err != nil {
		t.Fatal(err)
	}
	if err := acquire("dev:/data-2"); err != nil { // then killed mid-pass
		t.Fatal(err)
	}
	if ok, err := s.ReleaseLeaseOfHolders(ctx, "reconciler", "other:"); err != nil || ok {
		t.Fatalf("another holder's prefix freed the lease: %v %v", ok, err)
	}
	if err := acquire("dev:/data-1"); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("the lease is still held: acquire = %v, want ErrConflict", err)
	}
	if ok, err := s.ReleaseLeaseOfHolders(ctx, "reconciler", "dev:/data-"); err != nil || !ok {
		t.Fatalf("release the previous life's lease: %v %v", ok, err)
	}
	l, err := s.AcquireLease(ctx, store.AcquireLeaseParams{Name: "reconciler", Holder: "dev:/data-1", Now: t0.Add(time.Second), Until: t0.Add(5 * time.Minute)})
	if err != nil {
		t.Fatalf("the freed lease is not free: %v", err)
	}
	if l.Cursor != "c1" {
		t.Errorf("cursor %q after the release, want c1", l.Cursor)
	}
	if ok, err := s.ReleaseLeaseOfHolders(ctx, "never-held", "dev:"); err != nil || ok {
		t.Errorf("a lease never held: %v %v", ok, err)
	}
}
