package e2e

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// TestBatchSizeFollowsLatency is issue 13's done-when for batch sizing:
// the mock is made slower as batches grow (40 ms per recipient of a call),
// so calls of identical content start at 80 of the 100 recipients the
// account allows (3.2 s each) and qunfa drives the batch size down until
// the P99 call latency is at most 2 s. Judged by the mock's log (each
// call's recipients and latency): the first calls carry 80 or more, the
// calls of the job's second half all take at most 2 s, and every
// recipient gets the message exactly once. The account view, the metrics
// and the log of qunfa dev show the chosen size.
func TestBatchSizeFollowsLatency(t *testing.T) {
	t.Parallel()
	const (
		id   = "slow-batch"
		n    = 8000
		rate = 400.0
	)
	m := startMock(t)
	d := startDev(t, m, devOptions{ProviderTimeout: 15 * time.Second, StaleAfter: time.Minute})
	m.setAccount(id, map[string]any{"latency_per_recipient_ms": 40})
	acct := d.putAccount(id, map[string]any{"rate_per_sec": rate, "burst": 1000, "max_recipients_per_call": 100})
	if acct.Sizing != nil {
		t.Fatalf("a new account shows sizing %+v", acct.Sizing)
	}
	rcs := make([]recipient, n)
	for i := range rcs {
		rcs[i] = recipient{Account: id, To: fmt.Sprintf("%s-u%05d", id, i)}
	}
	j := d.submit("sizing", jobRequest{Name: "sizing", Template: packedTemplate, Recipients: rcs})
	f := d.waitFinal(j.ID, 3*time.Minute)
	if f.Status != "completed" || f.Counts.Confirmed != n {
		t.Fatalf("job %s, counts %+v", f.Status, f.Counts)
	}

	// Every recipient exactly once.
	ds := jobDeliveries(m.deliveries(), j.ID)
	seen := map[string]int{}
	for _, dl := range ds {
		seen[dl.ToID]++
	}
	if len(ds) != n || len(seen) != n {
		t.Fatalf("%d deliveries to %d recipients, want %d each once", len(ds), len(seen), n)
	}

	// The calls, in the order the mock took them.
	type callSeen struct {
		no         int64
		recipients int
		latency    time.Duration
	}
	byNo := map[int64]callSeen{}
	for _, dl := range ds {
		if dl.Call == 0 {
			t.Fatalf("log line without its call: %+v", dl)
		}
		byNo[dl.Call] = callSeen{no: dl.Call, recipients: dl.CallRecipients, latency: time.Duration(dl.LatencyMS) * time.Millisecond}
	}
	calls := make([]callSeen, 0, len(byNo))
	for _, c := range byNo {
		calls = append(calls, c)
	}
	slices.SortFunc(calls, func(a, b callSeen) int { return int(a.no - b.no) })
	sizes := make([]int, len(calls))
	for i, c := range calls {
		sizes[i] = c.recipients
		if c.recipients > 100 {
			t.Errorf("call %d carried %d recipients, over the account's 100", c.no, c.recipients)
		}
	}
	t.Logf("%d calls; recipients per call in order: %v", len(calls), sizes)
	if sizes[0] < 80 {
		t.Errorf("the first call carried %d, want the 80%% of 100 it starts from", sizes[0])
	}
	second := calls[len(calls)/2:]
	var lat []time.Duration
	for _, c := range second {
		lat = append(lat, c.latency)
	}
	slices.Sort(lat)
	p99 := lat[(99*len(lat)+99)/100-1]
	if p99 > 2*time.Second {
		t.Errorf("P99 latency of the second half's %d calls %v, want at most 2 s (latencies %v)", len(lat), p99, lat)
	}
	if biggest := slices.Max(sizes[len(sizes)/2:]); biggest >= sizes[0] {
		t.Errorf("the second half's calls carry up to %d, no fewer than the first's %d", biggest, sizes[0])
	}

	// The API, the metrics and the log show what was chosen.
	a := d.account(id)
	if a.Sizing == nil || a.Sizing.BatchSize > 50 || a.Sizing.BatchSize < 1 || a.Sizing.P99MS < 1 || a.Sizing.Concurrency < 1 {
		t.Errorf("account sizing %+v, want a batch of at most 50 (2 s at 40 ms each)", a.Sizing)
	} else if most := slices.Max(sizes[len(sizes)/2:]); a.Sizing.BatchSize >= 2*most {
		// The size shown is the one the calls were made with. A batch's
		// claim is split evenly into calls of at most the size (a claim
		// of 128 at size 45 makes calls of 42 and 43: the tokens granted,
		// not the size, set the claim on a slower store), so a claim of at
		// least the size makes calls of more than half of it. The size
		// may also grow back a little as the latency falls.
		t.Errorf("account sizing %+v, but the second half's calls carried at most %d", a.Sizing, most)
	}
	// The gauge and the saved sizing agree once the last decision (made
	// on the answer of one of the last calls, maybe after the job ended)
	// is both shown and saved: the gauge is set just before the save.
	var gauge float64
	found := false
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		samples, families := d.scrapeMetrics()
		if families["qunfa_account_batch_size"] != "gauge" || families["qunfa_account_concurrency"] != "gauge" {
			t.Fatalf("metric families %v lack the sizing gauges", families)
		}
		for _, s := range samples {
			if s.name == "qunfa_account_batch_size" && s.labels["account"] == id {
				found, gauge = true, s.value
			}
		}
		a = d.account(id)
		if !found || a.Sizing == nil || int(gauge) == a.Sizing.BatchSize || time.Now().After(deadline) {
			break
		}
	}
	if !found {
		t.Error("no qunfa_account_batch_size sample for the account")
	} else if a.Sizing != nil && int(gauge) != a.Sizing.BatchSize {
		t.Errorf("qunfa_account_batch_size %v, the account view says %d", gauge, a.Sizing.BatchSize)
	}
	if evs := d.logEvents("account sizing"); len(evs) == 0 {
		t.Error("qunfa dev logged no sizing decision")
	}
}
