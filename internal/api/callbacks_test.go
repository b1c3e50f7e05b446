package api_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/api"
	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/provider"
	"github.com/qunfa/qunfa/internal/provider/accesstoken"
	"github.com/qunfa/qunfa/internal/provider/wechatmp"
	"github.com/qunfa/qunfa/internal/reconcile"
	"github.com/qunfa/qunfa/internal/store"
)

// tenantTokens is a callback token per tenant.
type tenantTokens map[string]string

// failToken makes a tenant's token unreadable.
const failToken = "!fail"

func (t tenantTokens) Token(_ context.Context, tenant string) (string, error) {
	if t[tenant] == failToken {
		return "", errors.New("secrets store unreachable")
	}
	if tok, ok := t[tenant]; ok {
		return tok, nil
	}
	return "", provider.ErrNoCredentials
}

func (tenantTokens) Invalidate(context.Context, string, string) {}

type settleCall struct {
	account, msgID string
	s              reconcile.Settlement
}

type eventsRecorder struct {
	mu    sync.Mutex
	calls []settleCall
}

func (e *eventsRecorder) SettleMsgCall(_ context.Context, account, msgID string, s reconcile.Settlement) (int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.calls = append(e.calls, settleCall{account, msgID, s})
	if msgID == "unknown" {
		return 0, fmt.Errorf("msg call: %w", store.ErrNotFound)
	}
	return 3, nil
}

func signedQuery(token, echo string) string {
	q := url.Values{"timestamp": {"1700000000"}, "nonce": {"n0nce"}, "signature": {wechatmp.Signature(token, "1700000000", "n0nce")}}
	if echo != "" {
		q.Set("echostr", echo)
	}
	return "?" + q.Encode()
}

func massEvent(t *testing.T, msgID, status string, sent, errs int) []byte {
	t.Helper()
	b, err := wechatmp.MassEventXML(wechatmp.Event{ToUserName: "gh_1", FromUserName: "wx-system", CreateTime: 1700000000, MsgID: msgID,
		Status: status, TotalCount: sent + errs, SentCount: sent, ErrorCount: errs})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// WeChat's callbacks are signed with the callback token of the tenant
// owning the account: a signed server check is echoed, a signed
// MASSSENDJOBFINISH settles its msg_id's items by what it says, and a
// request signed with another token (or none) is refused with 403 and
// settles nothing. Unknown ids and other events answer "success".
func TestWechatCallbacks(t *testing.T) {
	ev := &eventsRecorder{}
	s := newStack(t, func(d *api.Deps) {
		d.Events = ev
		d.WechatCallbacks = api.CallbackSecrets{Token: accesstoken.Lookup{Tenants: tenantTokens{"tenant-a": "tok-a", "tenant-b": "tok-b"}}}
	})
	path := "/v1/callbacks/wechat-mp/acct-a"
	if r := s.do("GET", path+signedQuery("tok-a", "echo-123"), "", nil); r.status != 200 || string(r.body) != "echo-123" {
		t.Fatalf("signed server check: %d %q, want 200 echo-123", r.status, r.body)
	}
	wantProblem(t, s.do("GET", path+signedQuery("tok-b", "echo-123"), "", nil), 403)
	wantProblem(t, s.do("POST", path+signedQuery("tok-b", ""), "", massEvent(t, "1001", "send success", 3, 0)), 403)
	wantProblem(t, s.do("POST", path, "", massEvent(t, "1001", "send success", 3, 0)), 403)
	// An account nobody owns has no token: nothing verifies.
	wantProblem(t, s.do("POST", "/v1/callbacks/wechat-mp/wx-nobody"+signedQuery("", ""), "", massEvent(t, "1001", "send success", 3, 0)), 403)
	if len(ev.calls) != 0 {
		t.Fatalf("refused callbacks settled %v", ev.calls)
	}
	for _, c := range []struct {
		msgID, status string
		sent, errs    int
		want          store.ItemStatus
	}{
		{"1001", "send success", 3, 0, store.ItemConfirmed},
		{"1002", "send fail", 0, 3, store.ItemFailed},
		{"1003", "send success", 2, 1, store.ItemSubmitted}, // which one failed is not told: review
		{"unknown", "send success", 3, 0, store.ItemConfirmed},
	} {
		r := s.do("POST", path+signedQuery("tok-a", ""), "", massEvent(t, c.msgID, c.status, c.sent, c.errs))
		if r.status != 200 || string(r.body) != "success" {
			t.Fatalf("event %s: %d %s, want 200 success", c.msgID, r.status, r.body)
		}
		got := ev.calls[len(ev.calls)-1]
		if got.account != "acct-a" || got.msgID != c.msgID || got.s.To != c.want {
			t.Fatalf("event %s settled %+v, want %s of acct-a", c.msgID, got, c.want)
		}
	}
	n := len(ev.calls)
	other := []byte(`<xml><ToUserName>gh_1</ToUserName><MsgType>event</MsgType><Event>subscribe</Event></xml>`)
	if r := s.do("POST", path+signedQuery("tok-a", ""), "", other); r.status != 200 || len(ev.calls) != n {
		t.Fatalf("another event: %d, %d settles; want 200 and none", r.status, len(ev.calls)-n)
	}
	wantProblem(t, s.do("POST", path+signedQuery("tok-a", ""), "", "not xml"), 400)
}

// lateRecord knows the message id "late" only from at on, as the sender
// records a call's message ids with the call's batch, which can come
// after the provider's event about one of its calls.
type lateRecord struct {
	clk     *clock.Fake
	at      time.Time
	mu      sync.Mutex
	calls   int
	settled bool
}

func (e *lateRecord) SettleMsgCall(_ context.Context, _, msgID string, _ reconcile.Settlement) (int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.calls++
	if msgID != "late" || e.clk.Now().Before(e.at) {
		return 0, fmt.Errorf("msg call: %w", store.ErrNotFound)
	}
	e.settled = true
	return 3, nil
}

// TestWechatEventWaitsForItsMessageIDToBeRecorded: an event that comes
// before its message id is recorded (a second later) still settles its
// items, answered within WeChat's 5 seconds; an id never recorded (not
// ours) is given up after at most two seconds and answered "success".
func TestWechatEventWaitsForItsMessageIDToBeRecorded(t *testing.T) {
	ev := &lateRecord{}
	s := newStack(t, func(d *api.Deps) {
		d.Events = ev
		d.WechatCallbacks = api.CallbackSecrets{Token: accesstoken.Lookup{Tenants: tenantTokens{"tenant-a": "tok-a"}}}
	})
	ev.clk, ev.at = s.clock, s.clock.Now().Add(time.Second)
	path := "/v1/callbacks/wechat-mp/acct-a" + signedQuery("tok-a", "")
	start := s.clock.Now()
	if r := s.do("POST", path, "", massEvent(t, "late", "send success", 3, 0)); r.status != 200 || string(r.body) != "success" {
		t.Fatalf("event before its record: %d %s, want 200 success", r.status, r.body)
	}
	if !ev.settled {
		t.Fatalf("the event was given up %v after it came, before its message id was recorded at %v", s.clock.Now().Sub(start), ev.at.Sub(start))
	}
	start, calls := s.clock.Now(), ev.calls
	if r := s.do("POST", path, "", massEvent(t, "not-ours", "send success", 3, 0)); r.status != 200 || string(r.body) != "success" {
		t.Fatalf("event of an unknown id: %d %s, want 200 success", r.status, r.body)
	}
	if waited := s.clock.Now().Sub(start); waited > 2*time.Second || ev.calls-calls > 11 {
		t.Fatalf("an unknown id held the answer %v and %d look-ups, want at most 2 s (WeChat waits 5 s)", waited, ev.calls-calls)
	}
}

// A wechat-mp-mass account without max_recipients_per_call packs up to
// WeChat's 10,000 OpenIDs a call (one per call would not be a mass send).
func TestMassAccountPacksUpToTheProviderLimit(t *testing.T) {
	s := newStack(t)
	r := s.do("PUT", "/v1/accounts/wx-mass", tokenA, map[string]any{"rate_per_sec": 5, "provider": "wechat-mp-mass"})
	var a api.Account
	r.json(t, &a)
	if r.status != 200 || a.Provider != "wechat-mp-mass" || a.MaxRecipientsPerCall != 10000 {
		t.Fatalf("PUT = %d %+v, want a wechat-mp-mass account of 10000 recipients per call", r.status, a)
	}
	r = s.do("PUT", "/v1/accounts/wx-mass", tokenA, map[string]any{"rate_per_sec": 5, "provider": "wechat-mp-mass", "max_recipients_per_call": 200})
	r.json(t, &a)
	if r.status != 200 || a.MaxRecipientsPerCall != 200 {
		t.Fatalf("PUT with 200 = %d %+v, want 200 kept", r.status, a)
	}
}
