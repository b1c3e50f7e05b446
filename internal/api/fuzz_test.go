package api_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/qunfa/qunfa/internal/api"
)

// FuzzSubmitBody posts arbitrary bodies to POST /v1/jobs: the answer is
// never a server error and always a JSON document of the right media type.
func FuzzSubmitBody(f *testing.F) {
	for _, seed := range []string{
		`{"name": "n", "template": "Hi {{name}}", "recipients": [{"account": "acct-a", "to": "u1", "vars": {"name": "Li"}}]}`,
		`{"template": "Hi", "recipients": [{"account": "acct-a", "to": "u1"}, {"account": "acct-a", "to": "u1"}], "budget": 1, "rate_per_sec": 0.5}`,
		`{"template": "{{", "recipients": []}`,
		`{"template": "Hi {{x}}", "recipients": [{"account": "acct-b", "to": "u", "vars": {"x": 1}}]}`,
		`{"template": "Hi", "recipients": [{"account": "acct-nope", "to": "u"}], "extra": true}`,
		`{"template": "Hi", "budget": 1e400, "recipients": null}`,
		`[]`, `null`, `"x"`, `{`, "{\"template\": \"\xff\"}", ``,
	} {
		f.Add([]byte(seed))
	}
	s := newStack(f)
	h := api.New(s.deps)
	f.Fuzz(func(t *testing.T, body []byte) {
		req := httptest.NewRequest("POST", "/v1/jobs", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tokenA)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("status %d for %q: %s", rec.Code, body, rec.Body)
		}
		ct := rec.Header().Get("Content-Type")
		if ct != "application/json" && ct != "application/problem+json" {
			t.Fatalf("Content-Type %q for %q", ct, body)
		}
		if !json.Valid(rec.Body.Bytes()) {
			t.Fatalf("answer is not JSON: %s", rec.Body)
		}
		switch {
		case rec.Code == http.StatusAccepted || rec.Code == http.StatusOK:
			var j api.Job
			if err := json.Unmarshal(rec.Body.Bytes(), &j); err != nil || j.ID == "" || j.Total < 1 {
				t.Fatalf("job answer %s: %v", rec.Body, err)
			}
		case strings.HasPrefix(ct, "application/problem"):
			var p api.Problem
			if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil || p.Status != rec.Code || p.Title == "" {
				t.Fatalf("problem answer %s: %v", rec.Body, err)
			}
		default:
			t.Fatalf("status %d with %s", rec.Code, ct)
		}
	})
}
