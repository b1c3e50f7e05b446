package httpprovider

import (
	"encoding/json"
	"net/url"
	"testing"
)

// FuzzRender fills templates with arbitrary values: a JSON body stays
// JSON holding the values byte for byte, a form body decodes back to
// them.
func FuzzRender(f *testing.F) {
	for _, s := range []string{"hi", "line\n\"q\"", "{{to}}", "\x00\xff", "a&b=c", "}}{{", "中文"} {
		f.Add(s, "+86 138")
	}
	f.Fuzz(func(t *testing.T, content, to string) {
		vars := map[string]string{"to": to, "content": content}
		js := render(`{"to": "{{to}}", "text": "{{content}}"}`, vars, escaperFor("application/json; charset=utf-8"))
		var got map[string]string
		if err := json.Unmarshal([]byte(js), &got); err != nil {
			t.Fatalf("JSON body %q: %v", js, err)
		}
		if want := jsonRoundTrip(content); got["text"] != want {
			t.Fatalf("text = %q, want %q", got["text"], want)
		}
		form := render("to={{to}}&text={{content}}", vars, escaperFor("application/x-www-form-urlencoded"))
		q, err := url.ParseQuery(form)
		if err != nil || q.Get("text") != content || q.Get("to") != to {
			t.Fatalf("form body %q decodes to %v, %v", form, q, err)
		}
	})
}

// jsonRoundTrip is s as encoding/json gives it back (invalid UTF-8
// becomes U+FFFD).
func jsonRoundTrip(s string) string {
	b, _ := json.Marshal(s)
	var out string
	_ = json.Unmarshal(b, &out)
	return out
}
