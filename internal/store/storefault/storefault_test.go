package storefault_test

import (
	"context"
	"errors"
	"path/filepath"
	"reflect"
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

// reads are the methods of store.Store that change nothing: they pass
// through. Every other method is a write and must be faulted.
var reads = map[string]bool{
	"GetJob": true, "GetJobRecord": true, "ListJobs": true, "GetShard": true, "ListStaleShards": true, "ListDirtyShards": true,
	"ListItems": true, "ListSubmittedItems": true, "GetAccount": true, "ListAccounts": true,
	"TenantForToken": true, "GetBreaker": true, "ListBreakers": true, "SuppressedAmong": true,
	"ListSuppressions": true, "FrequencyCounts": true, "GetCampaign": true, "ListCampaigns": true,
	"ListBreakerHistory": true, "SuppressionsChangedAt": true,
}

// TestEveryWriteIsFaulted lists the methods of store.Store and calls each
// on a wrapper that faults every call of a store that is not there: a
// write must answer the injected fault without reaching it, a read must
// pass through. A write added to the port without its wrapper here (it
// would pass through, unfaulted, by embedding) fails this test.
func TestEveryWriteIsFaulted(t *testing.T) {
	ctx := context.Background()
	s := storefault.New(nil, storefault.Config{Seed: 1, ErrorRatio: 1})
	port := reflect.TypeOf((*store.Store)(nil)).Elem()
	for i := range port.NumMethod() {
		m := port.Method(i)
		t.Run(m.Name, func(t *testing.T) {
			fn := reflect.ValueOf(s).MethodByName(m.Name)
			args := make([]reflect.Value, m.Type.NumIn())
			args[0] = reflect.ValueOf(ctx)
			for j := 1; j < len(args); j++ {
				args[j] = reflect.Zero(m.Type.In(j))
			}
			var out []reflect.Value
			reached := func() (reached bool) {
				defer func() {
					if recover() != nil {
						reached = true // the nil inner store was called
					}
				}()
				out = fn.Call(args)
				return false
			}()
			switch {
			case reads[m.Name] && !reached:
				t.Fatalf("read %s did not reach the inner store", m.Name)
			case reads[m.Name]:
			case reached:
				t.Fatalf("write %s reached the inner store: storefault has no wrapper for it (or list it in reads if it changes nothing)", m.Name)
			default:
				err, _ := out[len(out)-1].Interface().(error)
				if !errors.Is(err, storefault.ErrInjected) {
					t.Fatalf("write %s: %v, want the injected fault", m.Name, err)
				}
			}
		})
	}
	if s.Injected()["error"] != port.NumMethod()-len(reads) {
		t.Fatalf("injected %v over %d writes", s.Injected(), port.NumMethod()-len(reads))
	}
}
