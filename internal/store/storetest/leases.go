package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/store"
)

// testLeases: a lease is held by one holder at a time until it expires or
// is released; renewing is the holder's; the cursor a holder leaves on
// release is handed to the next.
func testLeases(t *testing.T, s store.Store, _ Capabilities) {
	ctx := ctxOf(t)
	name := uniqueID("lease")
	l, err := s.AcquireLease(ctx, store.AcquireLeaseParams{Name: name, Holder: "a", Now: at(0), Until: at(time.Minute)})
	if err != nil || l.Holder != "a" || l.Cursor != "" || !sameTime(l.Until, at(time.Minute)) {
		t.Fatalf("first AcquireLease = %+v, %v", l, err)
	}
	if _, err := s.AcquireLease(ctx, store.AcquireLeaseParams{Name: name, Holder: "b", Now: at(30 * time.Second), Until: at(2 * time.Minute)}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("AcquireLease of a held lease: %v, want ErrConflict", err)
	}
	if _, err := s.AcquireLease(ctx, store.AcquireLeaseParams{Name: name, Holder: "a", Now: at(30 * time.Second), Until: at(2 * time.Minute)}); err != nil {
		t.Fatalf("renew by the holder: %v", err)
	}
	if err := s.ReleaseLease(ctx, store.ReleaseLeaseParams{Name: name, Holder: "b", Cursor: "x"}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("release by another: %v, want ErrConflict", err)
	}
	if err := s.ReleaseLease(ctx, store.ReleaseLeaseParams{Name: name, Holder: "a", Cursor: "page-7"}); err != nil {
		t.Fatalf("release: %v", err)
	}
	l, err = s.AcquireLease(ctx, store.AcquireLeaseParams{Name: name, Holder: "b", Now: at(31 * time.Second), Until: at(3 * time.Minute)})
	if err != nil || l.Cursor != "page-7" {
		t.Fatalf("AcquireLease after release = %+v, %v; want the cursor page-7", l, err)
	}
	// Expired: anyone may take it, and the cursor stays.
	l, err = s.AcquireLease(ctx, store.AcquireLeaseParams{Name: name, Holder: "c", Now: at(3 * time.Minute), Until: at(4 * time.Minute)})
	if err != nil || l.Holder != "c" || l.Cursor != "page-7" {
		t.Fatalf("AcquireLease of an expired lease = %+v, %v", l, err)
	}
	if err := s.ReleaseLease(ctx, store.ReleaseLeaseParams{Name: name, Holder: "b"}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("release by the expired holder: %v, want ErrConflict", err)
	}
	if _, err := s.AcquireLease(ctx, store.AcquireLeaseParams{Name: "", Holder: "a", Now: at(0), Until: at(time.Minute)}); !errors.Is(err, store.ErrInvalidArgument) {
		t.Fatalf("AcquireLease without a name: %v, want ErrInvalidArgument", err)
	}
}
