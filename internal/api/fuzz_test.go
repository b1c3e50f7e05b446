package api_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"sort"
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

// routeTemplates are the paths of the OpenAPI description, with their
// methods: FuzzRoutes covers every route the description lists, including
// routes added later.
func routeTemplates(tb testing.TB) []string {
	tb.Helper()
	raw, err := os.ReadFile("openapi.json")
	if err != nil {
		tb.Fatal(err)
	}
	var spec struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(raw, &spec); err != nil {
		tb.Fatal(err)
	}
	var out []string
	for p := range spec.Paths {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

var pathParam = regexp.MustCompile(`\{[a-z]+\}`)

// FuzzRoutes sends arbitrary requests — method, a route of the OpenAPI
// description with arbitrary path parameters (or an existing job's id),
// query, content type, token and body — through api.New on the embedded
// store: the handler never panics and never answers 5xx for bad input.
func FuzzRoutes(f *testing.F) {
	routes := routeTemplates(f)
	s := newStack(f)
	h := api.New(s.deps)
	// A job, so the job routes reach their handlers' depths.
	job := s.do("POST", "/v1/jobs", tokenA, map[string]any{"template": "Hi {{n}}",
		"recipients": []map[string]any{{"account": "acct-a", "to": "u1", "vars": map[string]string{"n": "x"}}}}, "Idempotency-Key", "fuzz-1")
	var j api.Job
	job.json(f, &j)
	methods := []string{"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS", "TRACE"}
	for i, r := range routes {
		for m := range methods[:5] {
			f.Add(uint8(i), uint8(m), "$job", "", "application/json", uint8(0), []byte(`{}`))
		}
		f.Add(uint8(i), uint8(1), "acct-a", "cursor=abc&status=pending&limit=2", "application/json", uint8(1), []byte(`{"rate_per_sec": 1}`))
		f.Add(uint8(i), uint8(2), "%2F..%2F", "cursor=%ff%fe", "text/csv", uint8(2), []byte("account,to\nacct-a,u\n"))
		f.Add(uint8(i), uint8(0), "0", "cursor=eyJ4IjoxfQ", "", uint8(3), []byte(nil))
		_ = r
	}
	f.Add(uint8(0), uint8(7), "x", "a=b;c", "application/x-ndjson", uint8(4), []byte("{\"account\":\"acct-a\",\"to\":\"u\"}\n{"))
	tokens := []string{tokenA, tokenARead, tokenB, platformToken, "", "garbage"}
	f.Fuzz(func(t *testing.T, route, method uint8, param, query, contentType string, token uint8, body []byte) {
		tmpl := routes[int(route)%len(routes)]
		path := pathParam.ReplaceAllStringFunc(tmpl, func(string) string {
			if param == "$job" {
				return j.ID
			}
			return param
		})
		req := httptest.NewRequest("GET", "/", bytes.NewReader(body))
		req.Method = methods[int(method)%len(methods)]
		req.URL.Path, req.URL.RawPath, req.URL.RawQuery = path, "", query
		req.RequestURI = req.URL.RequestURI()
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		if tok := tokens[int(token)%len(tokens)]; tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		req.Header.Set("Idempotency-Key", param)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("%s %s?%s (%s): status %d: %s", req.Method, path, query, contentType, rec.Code, rec.Body)
		}
	})
}
