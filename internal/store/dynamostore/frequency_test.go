package dynamostore_test

import (
	"context"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/store/dynamostore"
)

// TestFrequencyRecordsExpire: a recipient's charge record carries the TTL
// attribute expires_at (the newest charge plus the window, in Unix
// seconds), and once past it the record counts as deleted even though it
// is still there (DynamoDB deletes expired items only eventually; the
// emulator never does) — also when the account's window has grown since.
func TestFrequencyRecordsExpire(t *testing.T) {
	t.Parallel()
	s := newStore(t, dynamostore.Options{})
	ctx := context.Background()
	t0 := time.Unix(1_800_000_000, 500_000_000)
	charge := func(at time.Time, windowSec int, seq int64) bool {
		t.Helper()
		res, err := s.ChargeFrequency(ctx, store.ChargeFrequencyParams{Tenant: "t", Account: "acct", JobID: "j",
			Cap: store.FrequencyCap{Max: 1, WindowSec: windowSec}, Now: at,
			Charges: []store.FrequencyCharge{{Seq: seq, To: "u1"}}})
		if err != nil {
			t.Fatal(err)
		}
		return res.Capped[seq]
	}
	if charge(t0, 60, 1) {
		t.Fatal("first charge capped")
	}
	exp, err := s.FrequencyExpiresAtForTest(ctx, "t", "acct", "u1")
	if err != nil {
		t.Fatal(err)
	}
	if want := t0.Unix() + 1 + 60; exp != want {
		t.Fatalf("expires_at %d, want %d (after the 60 s window of the charge at %d)", exp, want, t0.Unix())
	}
	if !charge(t0.Add(30*time.Second), 60, 2) {
		t.Fatal("second charge within the window passed a cap of 1")
	}
	// The window grew to an hour: the charge at t0 is inside it, but its
	// record expired at t0+61 s and counts as deleted from then on.
	late := t0.Add(90 * time.Second)
	n, err := s.FrequencyCounts(ctx, store.FrequencyCountsParams{Tenant: "t", Account: "acct", To: []string{"u1"}, WindowSec: 3600, Now: late})
	if err != nil {
		t.Fatal(err)
	}
	if n["u1"] != 0 {
		t.Fatalf("preview counts %d charges of an expired record", n["u1"])
	}
	if charge(late, 3600, 3) {
		t.Fatal("a charge was capped by an expired record")
	}
	if exp, _ := s.FrequencyExpiresAtForTest(ctx, "t", "acct", "u1"); exp != late.Unix()+1+3600 {
		t.Fatalf("expires_at %d after the new charge, want %d", exp, late.Unix()+1+3600)
	}
	if !charge(late.Add(time.Minute), 3600, 4) {
		t.Fatal("the new record's charge did not count")
	}
}
