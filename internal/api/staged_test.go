package api_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/qunfa/qunfa/internal/api"
)

// Staged submission (DESIGN.md, "Staged submission"), through the API.

// stagedBody is a staged job's creation body: no recipients.
const stagedBody = `{"name": "big", "template": "Hi {{name}}", "staged": true}`

// ndjsonPart is a valid NDJSON part of two recipients of tenant A.
const ndjsonPart = `{"account": "acct-a", "to": "u1", "vars": {"name": "A"}}` + "\n" +
	`{"account": "acct-b", "to": "u2", "vars": {"name": "B"}}` + "\n"

// putPart uploads part n (a path segment, so that bad numbers can be
// sent) of job id with the given media type.
func (s *stack) putPart(id, n, mediaType, body string) response {
	s.t.Helper()
	return s.do("PUT", "/v1/jobs/"+id+"/recipients/"+n, tokenA, body, "Content-Type", mediaType)
}

// storedParts lists the part numbers the store keeps for job id.
func (s *stack) storedParts(id string) []int {
	s.t.Helper()
	parts, err := s.store.ListParts(context.Background(), id)
	if err != nil {
		s.t.Fatal(err)
	}
	var ns []int
	for _, p := range parts {
		ns = append(ns, p.Number)
	}
	slices.Sort(ns)
	return ns
}

// TestStagedCreationIsIdempotent: a staged job's creation takes an
// Idempotency-Key as any job does. The same key and body again answer the
// same job with the first answer's status (201) and Idempotent-Replayed:
// true; the same key with another body is a 409 problem and creates
// nothing.
func TestStagedCreationIsIdempotent(t *testing.T) {
	s := newStack(t)
	first := s.do("POST", "/v1/jobs", tokenA, stagedBody, "Idempotency-Key", "big-1")
	if first.status != http.StatusCreated {
		t.Fatalf("create: %d %s", first.status, first.body)
	}
	if got := first.header.Get("Idempotent-Replayed"); got != "" {
		t.Errorf("the first creation says Idempotent-Replayed: %q", got)
	}
	var j api.Job
	first.json(t, &j)
	if j.ID == "" || j.Status != "staging" || first.header.Get("Location") != "/v1/jobs/"+j.ID {
		t.Fatalf("created %+v, Location %q", j, first.header.Get("Location"))
	}
	before := s.totals()

	// A replay, also once parts are there: the same job, still staging.
	for _, when := range []string{"at once", "after a part"} {
		if when == "after a part" {
			if r := s.putPart(j.ID, "1", "application/x-ndjson", ndjsonPart); r.status != http.StatusOK {
				t.Fatalf("put part: %d %s", r.status, r.body)
			}
		}
		again := s.do("POST", "/v1/jobs", tokenA, stagedBody, "Idempotency-Key", "big-1")
		if again.status != http.StatusCreated || again.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("replay %s: %d, Idempotent-Replayed %q; want 201 and true; %s",
				when, again.status, again.header.Get("Idempotent-Replayed"), again.body)
		}
		var j2 api.Job
		again.json(t, &j2)
		if j2.ID != j.ID || j2.Status != "staging" || again.header.Get("Location") != "/v1/jobs/"+j.ID {
			t.Errorf("replay %s answered job %s (%s), Location %q; want %s, staging", when, j2.ID, j2.Status, again.header.Get("Location"), j.ID)
		}
	}

	// The same key with another body: refused, nothing created.
	for name, body := range map[string]any{
		"another name":        `{"name": "other", "template": "Hi {{name}}", "staged": true}`,
		"another template":    `{"name": "big", "template": "Hello {{name}}", "staged": true}`,
		"not staged":          jobBody(2),
		"staged with options": `{"name": "big", "template": "Hi {{name}}", "staged": true, "budget": 5}`,
	} {
		t.Run(name, func(t *testing.T) {
			p := wantProblem(t, s.do("POST", "/v1/jobs", tokenA, body, "Idempotency-Key", "big-1"), http.StatusConflict)
			if !strings.Contains(p.Detail, "big-1") {
				t.Errorf("409 detail %q does not name the key", p.Detail)
			}
			if after := s.totals(); after != before {
				t.Errorf("a conflicting repeat changed totals: %+v → %+v", before, after)
			}
		})
	}
	var list api.JobList
	s.do("GET", "/v1/jobs", tokenA, nil).json(t, &list)
	if len(list.Jobs) != 1 || list.Jobs[0].ID != j.ID || list.Jobs[0].Status != "staging" || list.Jobs[0].Budget != 0 {
		t.Errorf("tenant A's jobs after replays and conflicts: %+v", list.Jobs)
	}
	if got := s.storedParts(j.ID); !slices.Equal(got, []int{1}) {
		t.Errorf("parts of the job after replays and conflicts: %v, want [1]", got)
	}
}
