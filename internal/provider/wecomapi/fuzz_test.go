package wecomapi

import (
	"encoding/json"
	"testing"

	"github.com/qunfa/qunfa/internal/provider"
)

// FuzzAnswers decodes arbitrary provider answers (HTTP status and body)
// for calls of one to three recipients: one result per recipient, every
// refusal classified, an acceptance never with a category.
func FuzzAnswers(f *testing.F) {
	for _, s := range []struct {
		status int
		body   string
	}{
		{200, `{"errcode":0,"errmsg":"ok","msgid":"m"}`},
		{200, `{"errcode":0,"results":[{"toId":"u0","errcode":0,"msgid":"a"},{"toId":"u1","errcode":81013}],"invalid":["u2"]}`},
		{200, `{"errcode":45009,"errmsg":"freq"}`},
		{200, `{"errcode":42001}`},
		{200, `{"errcode":null}`},
		{200, `{"results":{}}`},
		{502, `<html>bad gateway</html>`},
		{503, `{"errcode":-1}`},
		{401, ``},
		{429, `{"errcode":45033}`},
		{200, "\xff"},
	} {
		f.Add(s.status, []byte(s.body), uint8(1))
		f.Add(s.status, []byte(s.body), uint8(3))
	}
	valid := map[provider.Category]bool{provider.Retryable: true, provider.RateLimited: true, provider.Permanent: true,
		provider.AccountDown: true, provider.Uncertain: true}
	f.Fuzz(func(t *testing.T, status int, body []byte, n uint8) {
		k := int(n%3) + 1
		req := provider.SendRequest{Account: "acct-a", Content: "hi"}
		for i := range k {
			req.To = append(req.To, "u"+string(rune('0'+i)))
			req.Keys = append(req.Keys, "k"+string(rune('0'+i)))
		}
		res := interpret(req, answered(status, body))
		if len(res.Recipients) != k {
			t.Fatalf("%d results for %d recipients", len(res.Recipients), k)
		}
		for i, r := range res.Recipients {
			if r.Accepted != (r.Category == "") || !r.Accepted && !valid[r.Category] {
				t.Fatalf("recipient %d: %+v (status %d, body %q)", i, r, status, body)
			}
			if r.Accepted && status != 200 {
				t.Fatalf("accepted on HTTP %d", status)
			}
		}
		ex := answered(status, body)
		var alone struct {
			Errcode *int `json:"errcode"`
		}
		want := status == 401 || status == 403 || status < 500 && json.Unmarshal(body, &alone) == nil && alone.Errcode != nil && accountDownCodes[*alone.Errcode]
		if got := authRefused(ex); got != want {
			t.Fatalf("authRefused(%d, %q) = %v, reading the errcode alone says %v", status, body, got, want)
		}
	})
}
