package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestWechatMassSend: an Official Account mass send over qunfa dev. The
// mock accepts each call under a msg_id and later POSTs its signed
// MASSSENDJOBFINISH event to qunfa dev's callback route: one app's events
// arrive and confirm its items; the other app's events are lost, and its
// items are settled by message/mass/get after the settle delay. The job
// completes with every recipient delivered exactly once by the mock's log.
func TestWechatMassSend(t *testing.T) {
	t.Parallel()
	addr := freeAddr(t)
	m := startMock(t, "--protocol", "wechat-mp", "--wechat-callback-url", "http://"+addr+"/v1/callbacks/wechat-mp/{appid}",
		"--wechat-callback-token", "cb-token", "--wechat-callback-delay", "300ms")
	d := startDev(t, m, devOptions{Addr: addr})
	const (
		called = "wxmasscalled"
		lost   = "wxmasslost"
		n      = 25
		letter = "本周会员日，全场八折。"
	)
	for dir, secret := range map[string]string{"wechat-mp": "app-secret", "wechat-mp-callback": "cb-token"} {
		p := filepath.Join(d.dataDir, "provider-credentials", dir)
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(p, "default"), []byte(secret+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	m.setAccount(lost, map[string]any{"lose_mass_callbacks": true})
	for _, app := range []string{called, lost} {
		if a := d.putAccount(app, map[string]any{"rate_per_sec": 200, "provider": "wechat-mp-mass", "max_recipients_per_call": 10}); a.Provider != "wechat-mp-mass" {
			t.Fatalf("mass account: %+v", a)
		}
	}
	var rcs []recipient
	for _, app := range []string{called, lost} {
		for i := range n {
			rcs = append(rcs, recipient{Account: app, To: fmt.Sprintf("o-%s-%03d", app, i)})
		}
	}
	job := d.submit("mass-send", jobRequest{Name: "mass send", Template: letter, Recipients: rcs})
	final := d.waitFinal(job.ID, 90*time.Second)
	if final.Status != "completed" || final.Counts.Confirmed != int64(len(rcs)) {
		t.Fatalf("job %s: %s, counts %+v, failures %v", job.ID, final.Status, final.Counts, final.Failures)
	}
	got := map[deliveryKey]int{}
	for _, dl := range m.deliveries() {
		got[deliveryKey{dl.GUID, dl.ToID}]++
		if dl.Content != letter {
			t.Errorf("delivery to %s/%s has content %q", dl.GUID, dl.ToID, dl.Content)
		}
	}
	for _, r := range rcs {
		if c := got[deliveryKey{r.Account, r.To}]; c != 1 {
			t.Errorf("%s/%s delivered %d times, want exactly once", r.Account, r.To, c)
		}
	}
	if len(got) != len(rcs) {
		t.Errorf("the log names %d recipients, the job %d", len(got), len(rcs))
	}
	// How each app's items were settled, by qunfa dev's log: the called
	// app's by its events, the other's by the reconciler's look-ups.
	raw, err := os.ReadFile(d.stderr)
	if err != nil {
		t.Fatal(err)
	}
	settledByEvent := map[string]int{}
	for line := range strings.SplitSeq(string(raw), "\n") {
		if strings.Contains(line, `"msg":"provider event settled items"`) {
			for _, app := range []string{called, lost} {
				if strings.Contains(line, `"account":"`+app+`"`) {
					settledByEvent[app]++
				}
			}
		}
	}
	if settledByEvent[called] == 0 || settledByEvent[lost] != 0 {
		t.Fatalf("calls settled by events: %v; want %s's and none of %s's (its events are lost)", settledByEvent, called, lost)
	}
}
