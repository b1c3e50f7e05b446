package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/api"
)

// TestWechatTemplateEncryptedCallbacks: WeChat template messages over
// qunfa dev, their delivery told by TEMPLATESENDJOBFINISH events that the
// mock POSTs encrypted (WeChat's safe mode: AES with the app's
// EncodingAESKey, msg_signature). One app's events arrive and confirm its
// items, each under the msgid its send answered, but for two users who
// block its templates: their events fail them (permanent,
// template_user_block) and nothing reaches them; the other app's events
// are lost, and its items — templates have no look-up — go to review
// after the settle delay, are never sent again, and finish the job
// (partial: two failed) once an operator resolves them. Every other
// recipient is delivered exactly once by the mock's log, and a webhook
// receives the items.outcomes of the items the events settled.
func TestWechatTemplateEncryptedCallbacks(t *testing.T) {
	t.Parallel()
	const (
		aesKey = "jWmYm7qr5nMoAUwZRjGtBxmz3KA1tkAj3ykkR6q2B2C"
		called = "wxtplcalled"
		lost   = "wxtpllost"
		n      = 20
		letter = "您的订单已发货。"
	)
	addr := freeAddr(t)
	m := startMock(t, "--protocol", "wechat-mp", "--wechat-callback-url", "http://"+addr+"/v1/callbacks/wechat-mp/{appid}",
		"--wechat-callback-token", "cb-token", "--wechat-callback-aes-key", aesKey, "--wechat-callback-delay", "300ms")
	d := startDev(t, m, devOptions{Addr: addr, ProviderTimeout: 500 * time.Millisecond, ReconcileEvery: time.Second,
		Extra: []string{"--allow-private-urls", "--webhook-retry-base", "200ms"}})
	const hookSecret = "e2e-template-hook-secret-0123456789"
	recv := startReceiver(t, hookSecret, 0)
	d.decode(d.call("POST", "/v1/webhooks", nil, mustJSON(t, map[string]any{
		"url": recv.URL, "secret": hookSecret, "events": []string{"items.outcomes"}})), http.StatusCreated, &api.Webhook{})
	// The AppSecret and the callback token are the tenant's (default);
	// the EncodingAESKey is each app's own.
	creds := filepath.Join(d.dataDir, "provider-credentials")
	for path, secret := range map[string]string{
		"wechat-mp/default":                         "app-secret",
		"wechat-mp-callback/default":                "cb-token",
		"wechat-mp-callback/aes/accounts/" + called: aesKey,
		"wechat-mp-callback/aes/accounts/" + lost:   aesKey,
	} {
		p := filepath.Join(creds, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(secret+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	m.setAccount(lost, map[string]any{"lose_template_callbacks": true})
	blocked := []string{"o-" + called + "-003", "o-" + called + "-011"}
	m.setAccount(called, map[string]any{"template_blocked_openids": blocked})
	var rcs []recipient
	for _, app := range []string{called, lost} {
		acct := app + ":tmpl-shipped"
		if a := d.putAccount(acct, map[string]any{"rate_per_sec": 100, "provider": "wechat-mp-template"}); a.Provider != "wechat-mp-template" {
			t.Fatalf("template account: %+v", a)
		}
		for i := range n {
			rcs = append(rcs, recipient{Account: acct, To: fmt.Sprintf("o-%s-%03d", app, i)})
		}
	}
	job := d.submit("template-callbacks", jobRequest{Name: "template callbacks", Template: letter, Recipients: rcs})

	// The called app's items are confirmed by their events; the lost
	// app's wait under review.
	var review []api.Item
	j, ok := d.waitJob(job.ID, 60*time.Second, func(j api.Job) bool {
		if j.Counts.Confirmed != n-2 || j.Counts.Failed != 2 || j.Counts.Submitted != n {
			return false
		}
		review = review[:0]
		for _, it := range d.items(job.ID, url.Values{"status": {"submitted"}}) {
			if it.UnderReview {
				review = append(review, it)
			}
		}
		return len(review) == n
	})
	if !ok || j.Status != "running" {
		t.Fatalf("job %s counts %+v, %d under review: want %d confirmed and 2 failed by events, %d under review", j.Status, j.Counts, len(review), n-2, n)
	}
	for _, it := range d.items(job.ID, url.Values{"status": {"failed"}}) {
		if !slices.Contains(blocked, it.To) || it.Error == nil || it.Error.Category != "permanent" || it.Error.Code != "template_user_block" {
			t.Errorf("failed item %+v: want a blocking user's, permanent template_user_block", it)
		}
	}
	for _, it := range d.items(job.ID, url.Values{"status": {"confirmed"}}) {
		if it.Account != called+":tmpl-shipped" || it.MsgID == "" {
			t.Errorf("confirmed item %+v: want the called app's, with its msgid", it)
		}
	}
	for _, it := range review {
		if it.Account != lost+":tmpl-shipped" || it.Error == nil || it.Error.Category != "uncertain" {
			t.Errorf("item under review %+v: want the lost app's, uncertain", it)
		}
	}
	settled := 0
	for _, ev := range d.logEvents("wechat event settled") {
		if ev["account"] != called || ev["event"] != "TEMPLATESENDJOBFINISH" {
			t.Errorf("settled event %v: want the called app's TEMPLATESENDJOBFINISH", ev)
		}
		settled++
	}
	if settled != n {
		t.Errorf("%d events settled items, want %d (one per template message)", settled, n)
	}

	// The events' outcomes reach the webhook: each item once, confirmed
	// with its msgid or failed with its code; none of the items under
	// review.
	byTo := map[string]int{}
	okHooks := poll(20*time.Second, 100*time.Millisecond, func() bool {
		clear(byTo)
		for _, req := range recv.received() {
			var ev struct {
				Type string `json:"type"`
				Data struct {
					JobID string `json:"job_id"`
					Items []struct {
						To, Status, MsgID, Code string
					} `json:"items"`
				} `json:"data"`
			}
			if json.Unmarshal(req.body, &ev) != nil || ev.Type != "items.outcomes" || ev.Data.JobID != job.ID {
				continue
			}
			for _, o := range ev.Data.Items {
				want := "confirmed"
				if slices.Contains(blocked, o.To) {
					want = "failed"
				}
				if o.Status != want || (want == "confirmed" && o.MsgID == "") || (want == "failed" && o.Code != "template_user_block") || !strings.HasPrefix(o.To, "o-"+called+"-") {
					t.Errorf("outcome %+v: want the called app's item %s", o, want)
				}
				byTo[o.To]++
			}
		}
		return len(byTo) == n
	})
	if !okHooks {
		t.Fatalf("items.outcomes named %d of the %d items the events settled", len(byTo), n)
	}
	for to, c := range byTo {
		if c != 1 {
			t.Errorf("%s in %d outcomes, want 1", to, c)
		}
	}

	// Nothing under review is sent again; the operator resolves them.
	time.Sleep(2 * time.Second)
	if st := m.stats()[lost+":tmpl-shipped"]; st.Calls != n || st.Accepted != n {
		t.Fatalf("lost app: %d calls, %d accepted for %d recipients: an item under review was sent again", st.Calls, st.Accepted, n)
	}
	for _, it := range review {
		r := d.call("POST", fmt.Sprintf("/v1/jobs/%s/items/%d/resolve", job.ID, it.Seq), nil, mustJSON(t, map[string]string{"outcome": "delivered"}))
		if r.Status != http.StatusOK {
			t.Fatalf("resolve item %d: %d %s", it.Seq, r.Status, r.Body)
		}
	}
	final := d.waitFinal(job.ID, 30*time.Second)
	if final.Status != "partial" || final.Counts.Confirmed != int64(len(rcs)-2) || final.Counts.Failed != 2 {
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
		want := 1
		if slices.Contains(blocked, r.To) {
			want = 0
		}
		if c := got[deliveryKey{r.Account, r.To}]; c != want {
			t.Errorf("%s/%s delivered %d times, want %d", r.Account, r.To, c, want)
		}
	}
	if len(got) != len(rcs)-2 {
		t.Errorf("the log names %d recipients, want %d", len(got), len(rcs)-2)
	}
}
