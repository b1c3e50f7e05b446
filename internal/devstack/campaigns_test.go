package devstack

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/alert"
	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/queue/sqlitequeue"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/store/sqlitestore"
	"github.com/qunfa/qunfa/internal/submit"
)

// The local scheduler fires a due campaign once per firing, driven by
// ticks and a fake clock (no waiting).
func TestFireCampaignsOnTicks(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := t.TempDir()
	st, err := sqlitestore.Open(ctx, filepath.Join(dir, "store.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	clk := clock.NewFake(time.Date(2025, 3, 1, 8, 59, 0, 0, time.UTC))
	q, err := sqlitequeue.Open(ctx, filepath.Join(dir, "queue.db"), sqlitequeue.Options{Name: "work", Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if err := st.GrantAccount(ctx, DefaultTenant, "acct-a", time.Time{}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.PutAccount(ctx, store.Account{Tenant: DefaultTenant, ID: "acct-a", RatePerSec: 1, Burst: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.PutCampaign(ctx, store.Campaign{Tenant: DefaultTenant, ID: "minutely", Name: "m", Schedule: "rate(1 minute)",
		Mode: "snapshot", Enabled: true, CreatedAt: clk.Now(),
		Request: []byte(`{"template": "Hi", "recipients": [{"account": "acct-a", "to": "u1"}]}`)}); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	s := &Stack{Store: st, Log: log, Submitter: &submit.Submitter{Store: st, Queue: q, Clock: clk, Alerts: alert.Discard}}
	s.Campaigns = s.newCampaigns()

	tick := make(chan time.Time)
	done := make(chan struct{})
	go func() { s.fireCampaigns(ctx, tick); close(done) }()
	jobs := func() int {
		res, err := st.ListJobs(ctx, store.ListJobsParams{Tenant: DefaultTenant, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		return len(res.Jobs)
	}
	step := func(d time.Duration) {
		clk.Advance(d)
		tick <- clk.Now()
		tick <- clk.Now() // the second send returns once the first tick's pass is done
	}
	step(30 * time.Second) // 08:59:30: nothing due
	if n := jobs(); n != 0 {
		t.Fatalf("%d jobs before the first firing", n)
	}
	step(31 * time.Second) // 09:00:01
	step(time.Second)      // same firing: no second job
	if n := jobs(); n != 1 {
		t.Fatalf("%d jobs after the 09:00 firing, want 1", n)
	}
	step(time.Minute) // 09:01:02
	if n := jobs(); n != 2 {
		t.Fatalf("%d jobs after the 09:01 firing, want 2", n)
	}
	cancel()
	<-done
}
