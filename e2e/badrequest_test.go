package e2e

import (
	"bytes"
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/api"
)

// checkProblem asserts an RFC 9457 problem answer with the given status and
// returns it.
func checkProblem(t testing.TB, what string, r reply, status int) api.Problem {
	t.Helper()
	var p api.Problem
	if r.Status != status {
		t.Errorf("%s: HTTP %d, want %d: %s", what, r.Status, status, r.Body)
		return p
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/problem+json") {
		t.Errorf("%s: Content-Type %q, want application/problem+json", what, ct)
	}
	if err := json.Unmarshal(r.Body, &p); err != nil {
		t.Errorf("%s: the problem is not JSON: %v: %s", what, err, r.Body)
		return p
	}
	if p.Type == "" || p.Title == "" || p.Status != status || p.Detail == "" {
		t.Errorf("%s: problem lacks type, title, status or detail: %s", what, r.Body)
	}
	return p
}

// hasFieldError reports whether the problem names field with a message
// containing every one of words.
func hasFieldError(p api.Problem, field string, words ...string) bool {
	for _, e := range p.Errors {
		if e.Field != field {
			continue
		}
		ok := true
		for _, w := range words {
			ok = ok && strings.Contains(e.Message, w)
		}
		if ok {
			return true
		}
	}
	return false
}

// TestBadRequests sends the running API malformed, mistyped, invalid,
// oversized and unauthenticated requests: each gets the right 4xx as
// application/problem+json, and none of them stores a job, changes an
// account or sends a message (DESIGN rule 8). A valid job submitted
// afterwards is the barrier: when it has completed, the log must hold its
// lines and nothing else.
func TestBadRequests(t *testing.T) {
	t.Parallel()
	m := startMock(t)
	d := startDev(t, m, devOptions{})
	acct := d.putAccount("bad-a", map[string]any{"rate_per_sec": 500, "online_reserve_per_sec": 50})
	jobsBefore := d.jobs()
	if len(jobsBefore) != 0 {
		t.Fatalf("a fresh stack lists %d jobs", len(jobsBefore))
	}

	valid := func() jobRequest {
		return jobRequest{Name: "bad", Template: testTemplate, Recipients: recipientsFor("bad-a", 3)}
	}
	withRecipients := func(rcs ...recipient) []byte {
		req := valid()
		req.Recipients = rcs
		return mustJSON(t, req)
	}
	good := recipientsFor("bad-a", 3)
	noCode := good[2]
	noCode.Vars = map[string]string{"name": "Li"}
	unknown := recipient{Account: "no-such-account", To: "u1", Vars: good[0].Vars}
	huge := bytes.Repeat([]byte("x"), api.DefaultMaxBodyBytes+1024)
	oversized := append(append([]byte(`{"name":"`), huge...), `","template":"x","recipients":[]}`...)

	cases := []struct {
		name   string
		method string
		path   string
		hdr    http.Header // replaces the default auth header when set
		body   []byte
		status int
		// field/words: a field error the problem must carry
		field string
		words []string
	}{
		{name: "malformed JSON", body: []byte(`{"name": "x", "template": `), status: 400},
		{name: "JSON syntax error", body: []byte(`{"name": "x",, }`), status: 400},
		{name: "not an object", body: []byte(`[{"name":"x"}]`), status: 400},
		{name: "empty body", body: []byte(``), status: 400},
		{name: "trailing data", body: append(mustJSON(t, valid()), `{}`...), status: 400},
		{name: "template of the wrong type", body: []byte(`{"name":"x","template":5,"recipients":[]}`), status: 400, field: "template"},
		{name: "recipients of the wrong type", body: []byte(`{"name":"x","template":"hi","recipients":"u1"}`), status: 400, field: "recipients"},
		{name: "budget of the wrong type", body: []byte(`{"name":"x","template":"hi","recipients":[],"budget":"10"}`), status: 400, field: "budget"},
		{name: "unknown field", body: []byte(`{"name":"x","template":"hi","recipient":[]}`), status: 400, field: "recipient"},
		{name: "invalid UTF-8", body: []byte("{\"name\":\"\xff\xfe\",\"template\":\"hi\",\"recipients\":[]}"), status: 400},
		{name: "unknown account", body: withRecipients(good[0], unknown), status: 422,
			field: "recipients[1].account", words: []string{"no-such-account"}},
		{name: "missing template variable", body: withRecipients(good[0], good[1], noCode), status: 422,
			field: "recipients[2].vars.code", words: []string{"recipient 2", `"code"`}},
		{name: "empty recipient list", body: withRecipients(), status: 422, field: "recipients"},
		{name: "missing template", body: []byte(`{"name":"x","recipients":[{"account":"bad-a","to":"u1"}]}`), status: 422, field: "template"},
		{name: "recipient without to", body: withRecipients(recipient{Account: "bad-a", Vars: good[0].Vars}), status: 422, field: "recipients[0].to"},
		{name: "negative budget", body: []byte(`{"name":"x","template":"hi","recipients":[{"account":"bad-a","to":"u1"}],"budget":-1}`), status: 422, field: "budget"},
		{name: "oversized body", body: oversized, status: 413},
		{name: "non-ASCII idempotency key", hdr: http.Header{"Idempotency-Key": {"键"}}, body: mustJSON(t, valid()), status: 400, field: "Idempotency-Key"},
		{name: "no token", hdr: http.Header{"Authorization": nil}, body: mustJSON(t, valid()), status: 401},
		{name: "wrong token", hdr: http.Header{"Authorization": {"Bearer not-the-token"}}, body: mustJSON(t, valid()), status: 401},
		{name: "not a bearer token", hdr: http.Header{"Authorization": {"Basic " + testToken}}, body: mustJSON(t, valid()), status: 401},
		{name: "job list without a token", method: "GET", path: "/v1/jobs", hdr: http.Header{"Authorization": nil}, status: 401},
		{name: "account with rate 0", method: "PUT", path: "/v1/accounts/bad-a", body: []byte(`{"rate_per_sec":0}`), status: 422, field: "rate_per_sec"},
		{name: "account with reserve above rate", method: "PUT", path: "/v1/accounts/bad-a",
			body: []byte(`{"rate_per_sec":10,"online_reserve_per_sec":10}`), status: 422, field: "online_reserve_per_sec"},
		{name: "account of the wrong type", method: "PUT", path: "/v1/accounts/bad-a", body: []byte(`{"rate_per_sec":"fast"}`), status: 400, field: "rate_per_sec"},
		{name: "account without a token", method: "PUT", path: "/v1/accounts/bad-a", hdr: http.Header{"Authorization": nil},
			body: []byte(`{"rate_per_sec":1}`), status: 401},
	}
	for i, c := range cases {
		method, path := c.method, c.path
		if method == "" {
			method, path = "POST", "/v1/jobs"
		}
		h := authHeader()
		h.Set("Idempotency-Key", "bad-request-"+string(rune('a'+i)))
		for k, v := range c.hdr {
			if v == nil {
				h.Del(k)
			} else {
				h[k] = v
			}
		}
		r, err := send(t.Context(), method, d.URL+path, h, c.body)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		p := checkProblem(t, c.name, r, c.status)
		if c.field != "" && !hasFieldError(p, c.field, c.words...) {
			t.Errorf("%s: the problem does not name field %q with %q: %s", c.name, c.field, c.words, r.Body)
		}
		if c.status == 401 && r.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s: 401 without WWW-Authenticate", c.name)
		}
	}

	// Nothing changed: no job, the account as it was, nothing sent.
	if after := d.jobs(); len(after) != 0 {
		t.Errorf("after the bad requests GET /v1/jobs lists %d jobs: %+v", len(after), after)
	}
	var acctAfter api.Account
	d.decode(d.call("GET", "/v1/accounts/bad-a", nil, nil), http.StatusOK, &acctAfter)
	acct.UpdatedAt, acctAfter.UpdatedAt = nil, nil
	if !reflect.DeepEqual(acct, acctAfter) {
		t.Errorf("a refused PUT changed the account: %+v, was %+v", acctAfter, acct)
	}
	if ds := m.deliveries(); len(ds) != 0 {
		t.Errorf("the delivery log has %d lines after bad requests only", len(ds))
	}

	// The barrier: a valid job with duplicate recipients (cleaned away)
	// completes, and then the log holds exactly its recipients.
	rcs := recipientsFor("bad-a", 5)
	withDups := append(append([]recipient{}, rcs...), rcs[1], rcs[3], rcs[1])
	job := d.submit("canary", jobRequest{Name: "canary", Template: testTemplate, Recipients: withDups})
	if job.Total != int64(len(rcs)) {
		t.Errorf("a job of %d recipients with %d duplicates has total %d, want %d", len(withDups), len(withDups)-len(rcs), job.Total, len(rcs))
	}
	final := d.waitFinal(job.ID, 30*time.Second)
	ds := m.deliveries()
	lines := checkExactlyOnce(t, ds, job.ID, rcs)
	checkCompleted(t, final, len(rcs), len(lines))
	if len(ds) != len(lines) {
		t.Errorf("the delivery log has %d lines, %d of them the canary's: the others came from refused requests", len(ds), len(lines))
	}
	if after := d.jobs(); len(after) != 1 {
		t.Errorf("GET /v1/jobs lists %d jobs, want only the canary", len(after))
	}
	var calls int64
	for _, s := range m.stats() {
		calls += s.Calls
	}
	if calls != int64(len(rcs)) {
		t.Errorf("the mock saw %d send calls, want %d (the canary's)", calls, len(rcs))
	}
}
