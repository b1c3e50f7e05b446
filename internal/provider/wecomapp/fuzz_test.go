package wecomapp

import (
	"encoding/json"
	"testing"

	"github.com/qunfa/qunfa/internal/provider"
	"github.com/qunfa/qunfa/internal/provider/httpcall"
)

// FuzzAnswers reads arbitrary answers of cgi-bin/message/send for calls of
// one to three users: one result per user, every refusal classified, an
// acceptance only on HTTP 200 with errcode 0 and never for a user the
// answer lists as invalid.
func FuzzAnswers(f *testing.F) {
	for _, s := range []struct {
		status int
		body   string
	}{
		{200, `{"errcode":0,"errmsg":"ok","invaliduser":"u1","msgid":"m"}`},
		{200, `{"errcode":0,"unlicenseduser":"u0|u2","msgid":"m"}`},
		{200, `{"errcode":81013,"errmsg":"all invalid"}`},
		{200, `{"errcode":45009}`},
		{200, `{"errcode":null}`},
		{502, `<html>bad gateway</html>`},
		{503, `{"errcode":-1}`},
		{200, "\xff"},
	} {
		f.Add(s.status, []byte(s.body), uint8(1))
		f.Add(s.status, []byte(s.body), uint8(3))
	}
	valid := map[provider.Category]bool{provider.Retryable: true, provider.RateLimited: true, provider.Permanent: true,
		provider.AccountDown: true, provider.Uncertain: true}
	f.Fuzz(func(t *testing.T, status int, body []byte, n uint8) {
		k := int(n%3) + 1
		req := provider.SendRequest{Account: "ww:1", Content: "hi"}
		for i := range k {
			req.To = append(req.To, "u"+string(rune('0'+i)))
			req.Keys = append(req.Keys, "k")
		}
		var ans answer
		parseErr := json.Unmarshal(body, &ans)
		res := interpret(req, httpcall.Exchange{Status: status, Body: body, Wrote: true}, ans, parseErr)
		if len(res.Recipients) != k {
			t.Fatalf("%d results for %d users", len(res.Recipients), k)
		}
		listed := map[string]bool{}
		for _, u := range append(splitUsers(ans.InvalidUser), splitUsers(ans.UnlicensedUser)...) {
			listed[u] = true
		}
		for i, r := range res.Recipients {
			if r.Accepted != (r.Category == "") || !r.Accepted && !valid[r.Category] {
				t.Fatalf("user %d: %+v (status %d, body %q)", i, r, status, body)
			}
			if r.Accepted && (status != 200 || ans.Errcode == nil || *ans.Errcode != 0 || listed[req.To[i]]) {
				t.Fatalf("user %d accepted on HTTP %d, body %q", i, status, body)
			}
		}
	})
}
