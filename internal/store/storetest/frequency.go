package storetest

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/qunfa/qunfa/internal/store"
)

// chargeFrequency charges job's items (seq i+1 to to[i]) and returns the
// capped seqs.
func chargeFrequency(t tb, s store.Store, tenant, account, job string, cap store.FrequencyCap, now time.Time, to ...string) map[int64]bool {
	t.Helper()
	p := store.ChargeFrequencyParams{Tenant: tenant, Account: account, JobID: job, Cap: cap, Now: now}
	for i, r := range to {
		p.Charges = append(p.Charges, store.FrequencyCharge{Seq: int64(i + 1), To: r})
	}
	res, err := s.ChargeFrequency(ctxOf(t), p)
	if err != nil {
		t.Fatalf("ChargeFrequency(%s, %s, %v): %v", job, account, to, err)
	}
	out := map[int64]bool{}
	for seq, v := range res.Capped {
		if v {
			out[seq] = true
		}
	}
	return out
}

func testFrequencyCap(t *testing.T, s store.Store, _ Capabilities) {
	ctx := ctxOf(t)
	day := store.FrequencyCap{Max: 2, WindowSec: 86400}
	none := map[int64]bool{}

	// Two items per recipient and day pass, a third does not, whichever job.
	if got := chargeFrequency(t, s, "tenant-a", "acct-1", "job-1", day, at(0), "u1", "u2"); !maps.Equal(got, none) {
		t.Fatalf("first charge capped %v", got)
	}
	if got := chargeFrequency(t, s, "tenant-a", "acct-1", "job-2", day, at(time.Hour), "u1", "u3"); !maps.Equal(got, none) {
		t.Fatalf("second charge capped %v", got)
	}
	if got := chargeFrequency(t, s, "tenant-a", "acct-1", "job-3", day, at(2*time.Hour), "u1", "u2", "u3"); !maps.Equal(got, map[int64]bool{1: true}) {
		t.Fatalf("third charge capped %v, want u1 (seq 1) only", got)
	}
	// A retry of an item already charged passes without a second charge.
	if got := chargeFrequency(t, s, "tenant-a", "acct-1", "job-1", day, at(3*time.Hour), "u1"); !maps.Equal(got, none) {
		t.Fatalf("retry of a charged item capped %v", got)
	}
	// Other tenants and accounts keep their own counts.
	if got := chargeFrequency(t, s, "tenant-b", "acct-1", "job-4", day, at(3*time.Hour), "u1"); !maps.Equal(got, none) {
		t.Fatalf("other tenant capped %v", got)
	}
	if got := chargeFrequency(t, s, "tenant-a", "acct-2", "job-5", day, at(3*time.Hour), "u1"); !maps.Equal(got, none) {
		t.Fatalf("other account capped %v", got)
	}
	// A sliding window of W seconds, (now-W, now]: u1 was charged at 0 and
	// 1h, so one more passes at 24h (the charge at 0 leaves the window),
	// none a second later, and the next at 25h.
	if got := chargeFrequency(t, s, "tenant-a", "acct-1", "job-6", day, at(24*time.Hour), "u1"); !maps.Equal(got, none) {
		t.Fatalf("at 24h: capped %v", got)
	}
	if got := chargeFrequency(t, s, "tenant-a", "acct-1", "job-7", day, at(24*time.Hour+time.Second), "u1"); !maps.Equal(got, map[int64]bool{1: true}) {
		t.Fatalf("at 24h+1s: capped %v, want seq 1", got)
	}
	if got := chargeFrequency(t, s, "tenant-a", "acct-1", "job-8", day, at(25*time.Hour), "u1"); !maps.Equal(got, none) {
		t.Fatalf("at 25h: capped %v", got)
	}

	counts, err := s.FrequencyCounts(ctx, store.FrequencyCountsParams{Tenant: "tenant-a", Account: "acct-1", WindowSec: 86400,
		To: []string{"u1", "u2", "u3", "u9"}, Now: at(25 * time.Hour)})
	if err != nil {
		t.Fatalf("FrequencyCounts: %v", err)
	}
	// u1: 24h and 25h; u2: 2h (0 is out); u3: 2h (1h is out).
	if want := map[string]int{"u1": 2, "u2": 1, "u3": 1}; !maps.Equal(counts, want) {
		t.Fatalf("FrequencyCounts = %v, want %v", counts, want)
	}

	if _, err := s.ChargeFrequency(ctx, store.ChargeFrequencyParams{Tenant: "tenant-a", Account: "acct-1", JobID: "j", Now: at(0),
		Charges: []store.FrequencyCharge{{Seq: 1, To: "u1"}}}); !errors.Is(err, store.ErrInvalidArgument) {
		t.Fatalf("ChargeFrequency without a cap: %v, want ErrInvalidArgument", err)
	}
}

// testFrequencyCapConcurrent charges the same recipients from several jobs
// at once: together they never pass more than the cap.
func testFrequencyCapConcurrent(t *testing.T, s store.Store, caps Capabilities) {
	const jobs, recipients = 4, 20
	for _, max := range []int{1, 2} {
		t.Run(fmt.Sprintf("max%d", max), func(t *testing.T) {
			account := fmt.Sprintf("acct-%d", max)
			cap := store.FrequencyCap{Max: max, WindowSec: 86400}
			to := make([]string, recipients)
			for i := range to {
				to[i] = fmt.Sprintf("u%02d", i)
			}
			passed := make([]map[int64]bool, jobs) // by job: seqs passed
			var wg sync.WaitGroup
			for j := range jobs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					passed[j] = map[int64]bool{}
					// One item at a time, as concurrent small batches.
					for i, r := range to {
						p := store.ChargeFrequencyParams{Tenant: "tenant-a", Account: account, JobID: fmt.Sprintf("job-%d", j),
							Cap: cap, Now: at(time.Duration(i) * time.Millisecond), Charges: []store.FrequencyCharge{{Seq: int64(i + 1), To: r}}}
						res, err := s.ChargeFrequency(ctxOf(t), p)
						if err != nil {
							t.Errorf("ChargeFrequency: %v", err)
							return
						}
						if !res.Capped[int64(i+1)] {
							passed[j][int64(i+1)] = true
						}
					}
				}()
			}
			wg.Wait()
			for i := range to {
				n := 0
				for j := range jobs {
					if passed[j][int64(i+1)] {
						n++
					}
				}
				if n != max {
					t.Errorf("recipient %s passed %d times across %d jobs, want exactly %d", to[i], n, jobs, max)
				}
			}
		})
	}
}

// testFrequencyCapProperty runs random charges (jobs, items, recipients,
// times) against a model of the sliding window: a charge passes when the
// item is charged in the window already, or its recipient has fewer than
// Max charges in (now-W, now]; it is then charged at now. The store must
// agree with the model on every item, and no recipient ever holds more
// than Max charges in a window.
func testFrequencyCapProperty(t *testing.T, s store.Store, caps Capabilities) {
	checkProperty(t, caps.sizes().propertyChecks, func(rt *rapid.T) {
		account := uniqueID("acct")
		fc := store.FrequencyCap{Max: rapid.IntRange(1, 3).Draw(rt, "max"), WindowSec: rapid.IntRange(1, 100).Draw(rt, "window_sec")}
		window := time.Duration(fc.WindowSec) * time.Second
		recipients := []string{"u0", "u1", "u2"}
		type charge struct {
			key string
			at  time.Time
		}
		model := map[string][]charge{} // recipient → charges
		now := Epoch
		steps := rapid.IntRange(1, caps.sizes().propertySteps).Draw(rt, "steps")
		for range steps {
			now = now.Add(time.Duration(rapid.IntRange(0, fc.WindowSec*600).Draw(rt, "advance_ms")) * time.Millisecond)
			job := fmt.Sprintf("job-%d", rapid.IntRange(0, 2).Draw(rt, "job"))
			seqs := rapid.SliceOfNDistinct(rapid.Int64Range(0, 5), 1, 4, rapid.ID[int64]).Draw(rt, "seqs")
			p := store.ChargeFrequencyParams{Tenant: "tenant-p", Account: account, JobID: job, Cap: fc, Now: now}
			want := map[int64]bool{}
			for _, seq := range seqs {
				to := recipients[(len(job)+int(job[len(job)-1])*7+int(seq))%len(recipients)]
				p.Charges = append(p.Charges, store.FrequencyCharge{Seq: seq, To: to})
				key := fmt.Sprintf("%s#%d", job, seq)
				live := slices.DeleteFunc(model[to], func(c charge) bool { return !c.at.After(now.Add(-window)) })
				model[to] = live
				switch {
				case slices.ContainsFunc(live, func(c charge) bool { return c.key == key }):
				case len(live) >= fc.Max:
					want[seq] = true
				default:
					model[to] = append(live, charge{key, now})
				}
			}
			res, err := s.ChargeFrequency(ctxOf(rt), p)
			if err != nil {
				rt.Fatalf("ChargeFrequency: %v", err)
			}
			got := map[int64]bool{}
			for seq, v := range res.Capped {
				if v {
					got[seq] = true
				}
			}
			if !maps.Equal(got, want) {
				rt.Fatalf("at +%v, %s charging %v: capped %v, the model says %v", now.Sub(Epoch), job, p.Charges, got, want)
			}
			counts, err := s.FrequencyCounts(ctxOf(rt), store.FrequencyCountsParams{Tenant: "tenant-p", Account: account,
				WindowSec: fc.WindowSec, To: recipients, Now: now})
			if err != nil {
				rt.Fatalf("FrequencyCounts: %v", err)
			}
			for _, to := range recipients {
				model[to] = slices.DeleteFunc(model[to], func(c charge) bool { return !c.at.After(now.Add(-window)) })
				if n := len(model[to]); counts[to] != n || n > fc.Max {
					rt.Fatalf("at +%v: %s has %d charges in the window, the model %d (max %d)", now.Sub(Epoch), to, counts[to], n, fc.Max)
				}
			}
		}
	})
}
