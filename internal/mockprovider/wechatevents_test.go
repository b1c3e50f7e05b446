package mockprovider

import (
	"encoding/xml"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/provider/wxcrypt"
)

// A delivered template message's TEMPLATESENDJOBFINISH goes to the app's
// callback URL in WeChat's safe mode: encrypted for the AppID, signed by
// msg_signature, about the msgid the send answered; an app that loses its
// events sends none.
func TestTemplateEventsGoOutEncrypted(t *testing.T) {
	const aesKey = "jWmYm7qr5nMoAUwZRjGtBxmz3KA1tkAj3ykkR6q2B2C"
	type post struct {
		path  string
		query url.Values
		body  []byte
	}
	posts := make(chan post, 4)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		posts <- post{r.URL.Path, r.URL.Query(), b}
	}))
	t.Cleanup(recv.Close)
	f := newFixture(t, Config{Protocol: ProtocolWechatMP, Clock: clock.NewFake(t0), WechatCallbackURL: recv.URL + "/cb/{appid}",
		WechatCallbackToken: "cb-token", WechatCallbackAESKey: aesKey, WechatCallbackDelay: time.Second})
	if err := f.mock.SetBehaviour("wxlost", Behaviour{LoseTemplateCallbacks: true}); err != nil {
		t.Fatal(err)
	}
	send := func(app, openID string) int64 {
		t.Helper()
		_, tok := f.do(t, "GET", "/cgi-bin/token?grant_type=client_credential&appid="+app+"&secret=s", "", nil)
		status, ans := f.do(t, "POST", "/cgi-bin/message/template/send?access_token="+url.QueryEscape(tok["access_token"].(string)), "",
			WechatTemplateMessage{ToUser: openID, TemplateID: "tmpl-1", Data: map[string]map[string]string{"content": {"value": "hi"}}})
		if status != 200 || ans["errcode"] != float64(0) {
			t.Fatalf("template send: %d %v", status, ans)
		}
		return int64(ans["msgid"].(float64))
	}
	send("wxlost", "o-lost")
	id := send("wxcalled", "o-1")
	var p post
	select {
	case p = <-posts:
	case <-time.After(10 * time.Second):
		t.Fatal("no event posted")
	}
	if p.path != "/cb/wxcalled" || p.query.Get("encrypt_type") != "aes" {
		t.Fatalf("posted to %s with %v, want the called app's URL in safe mode", p.path, p.query)
	}
	var env wxcrypt.Envelope
	if err := xml.Unmarshal(p.body, &env); err != nil {
		t.Fatal(err)
	}
	c, err := wxcrypt.New("cb-token", aesKey, "wxcalled")
	if err != nil {
		t.Fatal(err)
	}
	msg, err := c.Open(p.query.Get("msg_signature"), p.query.Get("timestamp"), p.query.Get("nonce"), env.Encrypt)
	if err != nil {
		t.Fatalf("the event does not open with the app's secrets: %v", err)
	}
	var ev templateEventXML
	if err := xml.Unmarshal(msg, &ev); err != nil {
		t.Fatal(err)
	}
	if ev.Event != "TEMPLATESENDJOBFINISH" || ev.Status != "success" || ev.FromUserName != "o-1" || ev.MsgID != id {
		t.Fatalf("event %+v, want TEMPLATESENDJOBFINISH success of o-1 with msgid %d", ev, id)
	}
	// Once the called app's event is answered (the lost app's send came
	// first), close, which ends every post in flight: none was the lost
	// app's.
	deadline := time.Now().Add(10 * time.Second)
	for f.mock.TemplateEventsDelivered() != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the answered event was never counted")
		}
		time.Sleep(time.Millisecond)
	}
	if err := f.mock.Close(); err != nil {
		t.Fatal(err)
	}
	if len(posts) != 0 {
		t.Fatalf("%d more events posted: the lost app's must not be", len(posts))
	}
}
