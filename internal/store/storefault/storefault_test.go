package storefault_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/store/sqlitestore"
	"github.com/qunfa/qunfa/internal/store/storefault"
	"github.com/qunfa/qunfa/internal/store/storetest"
)

// TestLostAnswerIsApplied: a write whose answer is lost has happened; an
// injected error has not; Heal stops both.
func TestLostAnswerIsApplied(t *testing.T) {
	ctx := context.Background()
	inner, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "s.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer inner.Close()
	p, items := storetest.NewJob("t", 1, 3)
	p.Job.Budget = 100
	if _, err := inner.CreateJob(ctx, p); err != nil {
		t.Fatal(err)
	}
	if err := inner.PutItems(ctx, store.PutItemsParams{JobID: p.Job.ID, Items: items}); err != nil {
		t.Fatal(err)
	}
	s := storefault.New(inner, storefault.Config{Seed: 1, ErrorRatio: 0.3, LostAnswerRatio: 0.3})
	var want int64
	for range 40 {
		_, err := s.ReserveBudget(ctx, p.Job.ID, 1)
		switch {
		case err == nil, errors.Is(err, storefault.ErrAnswerLost):
			want++
		case !errors.Is(err, storefault.ErrInjected):
			t.Fatal(err)
		}
	}
	if inj := s.Injected(); inj["error"] == 0 || inj["lost_answer"] == 0 {
		t.Fatalf("injected %v, want both kinds", inj)
	}
	v, err := inner.GetJob(ctx, p.Job.ID)
	if err != nil || v.Job.BudgetUsed != want {
		t.Fatalf("budget used %d, want %d (applied calls, lost answers included): %v", v.Job.BudgetUsed, want, err)
	}
	s.Heal()
	for range 20 {
		if _, err := s.ReserveBudget(ctx, p.Job.ID, 1); err != nil {
			t.Fatalf("after Heal: %v", err)
		}
	}
}

// TestOpsLimitsTheFaults: with Ops set, only the named operations fail.
func TestOpsLimitsTheFaults(t *testing.T) {
	ctx := context.Background()
	inner, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "s.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer inner.Close()
	p, items := storetest.NewJob("t", 1, 3)
	p.Job.Budget = 100
	if _, err := inner.CreateJob(ctx, p); err != nil {
		t.Fatal(err)
	}
	if err := inner.PutItems(ctx, store.PutItemsParams{JobID: p.Job.ID, Items: items}); err != nil {
		t.Fatal(err)
	}
	s := storefault.New(inner, storefault.Config{Seed: 1, ErrorRatio: 1, Ops: []string{"ClaimItems"}})
	if _, err := s.ReserveBudget(ctx, p.Job.ID, 1); err != nil {
		t.Fatalf("ReserveBudget is not in Ops: %v", err)
	}
	if _, err := s.ClaimItems(ctx, store.ClaimItemsParams{JobID: p.Job.ID, Max: 1, ClaimID: "c"}); !errors.Is(err, storefault.ErrInjected) {
		t.Fatalf("ClaimItems: %v, want the injected fault", err)
	}
}
