package api_test

import (
	"net/url"
	"testing"

	"github.com/qunfa/qunfa/internal/api"
	"github.com/qunfa/qunfa/internal/provider/accesstoken"
	"github.com/qunfa/qunfa/internal/provider/wechatmp"
	"github.com/qunfa/qunfa/internal/provider/wxcrypt"
	"github.com/qunfa/qunfa/internal/store"
)

const (
	aesKeyA   = "jWmYm7qr5nMoAUwZRjGtBxmz3KA1tkAj3ykkR6q2B2C"
	aesKeyOwn = "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFG"
)

// encrypted is an encrypted callback as WeChat and WeCom send it: the
// query with msg_signature and the envelope body.
func encrypted(t *testing.T, token, aesKey, receiveID string, msg []byte, extra url.Values) (query string, body []byte) {
	t.Helper()
	c, err := wxcrypt.New(token, aesKey, receiveID)
	if err != nil {
		t.Fatal(err)
	}
	enc, err := c.Encrypt(msg, [16]byte([]byte("0123456789abcdef")))
	if err != nil {
		t.Fatal(err)
	}
	q := url.Values{"timestamp": {"1700000000"}, "nonce": {"n0nce"}, "msg_signature": {c.Sign("1700000000", "n0nce", enc)}}
	for k, v := range extra {
		q[k] = v
	}
	return "?" + q.Encode(), []byte("<xml><ToUserName><![CDATA[gh_1]]></ToUserName><Encrypt><![CDATA[" + enc + "]]></Encrypt></xml>")
}

func templateEvent(t *testing.T, msgID, status string) []byte {
	t.Helper()
	b, err := wechatmp.TemplateEventXML(wechatmp.Event{ToUserName: "gh_1", FromUserName: "o-user", CreateTime: 1700000000, MsgID: msgID, Status: status})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// WeChat's safe mode: encrypted events verified by msg_signature and
// opened with the account's EncodingAESKey (its own before its tenant's)
// settle their items; a tampered signature, another app's ciphertext,
// another key or an account without a key are refused with 403 and settle
// nothing. A template account's events settle under its AppID.
func TestWechatEncryptedCallbacks(t *testing.T) {
	ev := &eventsRecorder{}
	s := newStack(t, func(d *api.Deps) {
		d.Events = ev
		d.WechatCallbacks = api.CallbackSecrets{
			Token:  accesstoken.Lookup{Tenants: tenantTokens{"tenant-a": "tok-a"}, Accounts: tenantTokens{"wx-own": "tok-own"}},
			AESKey: accesstoken.Lookup{Tenants: tenantTokens{"tenant-a": aesKeyA}, Accounts: tenantTokens{"wx-own": aesKeyOwn}},
		}
	})
	aes := url.Values{"encrypt_type": {"aes"}, "signature": {"ignored-in-safe-mode"}}
	path := "/v1/callbacks/wechat-mp/acct-a"
	for _, c := range []struct {
		msgID, status string
		want          store.ItemStatus
		category      string
	}{
		{"2001", "success", store.ItemConfirmed, ""},
		{"2002", "failed:user block", store.ItemFailed, "permanent"},
		{"2003", "failed: system failed", store.ItemFailed, store.CategoryExhausted},
		{"2004", "failed: something new", store.ItemSubmitted, ""},
		{"unknown", "success", store.ItemConfirmed, ""},
	} {
		q, body := encrypted(t, "tok-a", aesKeyA, "acct-a", templateEvent(t, c.msgID, c.status), aes)
		r := s.do("POST", path+q, "", body, "Content-Type", "text/xml")
		if r.status != 200 || string(r.body) != "success" {
			t.Fatalf("event %s: %d %s, want 200 success", c.msgID, r.status, r.body)
		}
		got := ev.calls[len(ev.calls)-1]
		if got.account != "acct-a" || got.msgID != c.msgID || got.s.To != c.want || (c.category != "" && got.s.Error.Category != c.category) {
			t.Fatalf("event %s (%s) settled %+v, want %s %s", c.msgID, c.status, got, c.want, c.category)
		}
	}
	// The account's own secrets, not its tenant's; the mass event works
	// the same way encrypted.
	n := len(ev.calls)
	q, body := encrypted(t, "tok-own", aesKeyOwn, "wx-own", massEvent(t, "3001", "send success", 2, 0), aes)
	if r := s.do("POST", "/v1/callbacks/wechat-mp/wx-own"+q, "", body); r.status != 200 || len(ev.calls) != n+1 || ev.calls[n].s.To != store.ItemConfirmed {
		t.Fatalf("own secrets: %d %s, calls %v", r.status, r.body, ev.calls[n:])
	}
	// A template account's URL: the events settle under the AppID.
	q, body = encrypted(t, "tok-own", aesKeyOwn, "wx-own", templateEvent(t, "3002", "success"), aes)
	if r := s.do("POST", "/v1/callbacks/wechat-mp/wx-own:tmpl-1"+q, "", body); r.status != 200 || ev.calls[len(ev.calls)-1].account != "wx-own" {
		t.Fatalf("template account URL: %d %s, last call %+v", r.status, r.body, ev.calls[len(ev.calls)-1])
	}

	n = len(ev.calls)
	msg := templateEvent(t, "2001", "success")
	q, body = encrypted(t, "tok-a", aesKeyA, "acct-a", msg, aes)
	tampered, _ := url.ParseQuery(q[1:])
	sig := []byte(tampered.Get("msg_signature"))
	sig[3] ^= 1
	tampered.Set("msg_signature", string(sig))
	wantProblem(t, s.do("POST", path+"?"+tampered.Encode(), "", body), 403)
	tampered.Del("msg_signature")
	wantProblem(t, s.do("POST", path+"?"+tampered.Encode(), "", body), 403)
	q2, body2 := encrypted(t, "tok-a", aesKeyA, "wx-other-app", msg, aes) // right secrets, another app's message
	wantProblem(t, s.do("POST", path+q2, "", body2), 403)
	q3, body3 := encrypted(t, "tok-a", aesKeyOwn, "acct-a", msg, aes) // signed, but another key
	wantProblem(t, s.do("POST", path+q3, "", body3), 403)
	q4, body4 := encrypted(t, "tok-b", aesKeyA, tenantBAccounts[0], msg, aes) // tenant-b has no EncodingAESKey
	wantProblem(t, s.do("POST", "/v1/callbacks/wechat-mp/"+tenantBAccounts[0]+q4, "", body4), 403)
	wantProblem(t, s.do("POST", path+q, "", "<xml><ToUserName>gh_1</ToUserName></xml>"), 400)
	if len(ev.calls) != n {
		t.Fatalf("refused callbacks settled %v", ev.calls[n:])
	}
	// A replayed event is settled again by the reconciler's rules (it
	// moves nothing twice); here it is simply taken again.
	if r := s.do("POST", path+q, "", body); r.status != 200 || len(ev.calls) != n+1 {
		t.Fatalf("replayed event: %d, %d settles", r.status, len(ev.calls)-n)
	}
}

// WeCom's callback URL check answers echostr's plaintext when signed and
// encrypted with the application's secrets; events are verified and
// opened, and settle nothing (no WeCom event confirms a message).
func TestWecomCallbacks(t *testing.T) {
	ev := &eventsRecorder{}
	const acct = "wwcorp1:1000002"
	s := newStack(t, func(d *api.Deps) {
		d.Events = ev
		d.WecomCallbacks = api.CallbackSecrets{
			Token:  accesstoken.Lookup{Accounts: tenantTokens{accesstoken.AccountKey(acct): "wecom-tok"}},
			AESKey: accesstoken.Lookup{Accounts: tenantTokens{accesstoken.AccountKey(acct): aesKeyA}},
		}
	})
	path := "/v1/callbacks/wecom-app/" + acct
	echo := func(token, key, corp string) string {
		c, err := wxcrypt.New(token, key, corp)
		if err != nil {
			t.Fatal(err)
		}
		enc, err := c.Encrypt([]byte("1616140317555161061"), [16]byte{})
		if err != nil {
			t.Fatal(err)
		}
		return "?" + url.Values{"msg_signature": {c.Sign("1700000000", "n0nce", enc)}, "timestamp": {"1700000000"}, "nonce": {"n0nce"}, "echostr": {enc}}.Encode()
	}
	if r := s.do("GET", path+echo("wecom-tok", aesKeyA, "wwcorp1"), "", nil); r.status != 200 || string(r.body) != "1616140317555161061" {
		t.Fatalf("URL check: %d %q, want echostr's plaintext", r.status, r.body)
	}
	wantProblem(t, s.do("GET", path+echo("other-tok", aesKeyA, "wwcorp1"), "", nil), 403)
	wantProblem(t, s.do("GET", path+echo("wecom-tok", aesKeyA, "wwcorp2"), "", nil), 403)
	wantProblem(t, s.do("GET", "/v1/callbacks/wecom-app/wwcorp2:1000002"+echo("wecom-tok", aesKeyA, "wwcorp2"), "", nil), 403) // no secrets

	event := []byte(`<xml><ToUserName>wwcorp1</ToUserName><FromUserName>zhangsan</FromUserName><CreateTime>1700000000</CreateTime><MsgType>event</MsgType><Event>enter_agent</Event><AgentID>1000002</AgentID></xml>`)
	q, body := encrypted(t, "wecom-tok", aesKeyA, "wwcorp1", event, nil)
	if r := s.do("POST", path+q, "", body); r.status != 200 || len(r.body) != 0 {
		t.Fatalf("event: %d %q, want an empty 200", r.status, r.body)
	}
	q, body = encrypted(t, "other-tok", aesKeyA, "wwcorp1", event, nil)
	wantProblem(t, s.do("POST", path+q, "", body), 403)
	if len(ev.calls) != 0 {
		t.Fatalf("WeCom events settled %v", ev.calls)
	}
}
