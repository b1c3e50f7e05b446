package api_test

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/qunfa/qunfa/internal/api"
	"github.com/qunfa/qunfa/internal/dispatch"
	"github.com/qunfa/qunfa/internal/queue"
	"github.com/qunfa/qunfa/internal/store"
)

// Staged submission (DESIGN.md, "Staged submission"), through the API.

// stagedBody is a staged job's creation body: no recipients.
const stagedBody = `{"name": "big", "template": "Hi {{name}}", "staged": true}`

// ndjsonPart is a valid NDJSON part of two recipients of tenant A.
const ndjsonPart = `{"account": "acct-a", "to": "u1", "vars": {"name": "A"}}` + "\n" +
	`{"account": "acct-b", "to": "u2", "vars": {"name": "B"}}` + "\n"

// createStaged creates a staged job of tenant A and returns it.
func (s *stack) createStaged(key string) api.Job {
	s.t.Helper()
	r := s.do("POST", "/v1/jobs", tokenA, stagedBody, "Idempotency-Key", key)
	if r.status != http.StatusCreated {
		s.t.Fatalf("create staged job: %d %s", r.status, r.body)
	}
	var j api.Job
	r.json(s.t, &j)
	if j.Status != "staging" {
		s.t.Fatalf("staged job is %q, want staging", j.Status)
	}
	return j
}

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

// listedParts lists the part numbers GET /v1/jobs/{id}/recipients shows.
func (s *stack) listedParts(id string) []int {
	s.t.Helper()
	r := s.do("GET", "/v1/jobs/"+id+"/recipients", tokenA, nil)
	if r.status != http.StatusOK {
		s.t.Fatalf("list parts: %d %s", r.status, r.body)
	}
	var list api.PartList
	r.json(s.t, &list)
	var ns []int
	for _, p := range list.Parts {
		ns = append(ns, p.Part)
	}
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

// TestStagingJobNeverSends: a staging job, whatever its parts and
// whatever commands it is sent, enqueues no turn and has no items to
// send; only start hands it on (a planning message), and only planning
// enqueues its shards' turns.
func TestStagingJobNeverSends(t *testing.T) {
	s := newStack(t)
	ctx := context.Background()
	j := s.createStaged("quiet")
	path := "/v1/jobs/" + j.ID
	if r := s.putPart(j.ID, "1", "application/x-ndjson", ndjsonPart); r.status != http.StatusOK {
		t.Fatalf("part 1: %d %s", r.status, r.body)
	}
	if r := s.putPart(j.ID, "2", "application/json",
		`{"recipients": [{"account": "acct-a", "to": "u3", "vars": {"name": "C"}}]}`); r.status != http.StatusOK {
		t.Fatalf("part 2: %d %s", r.status, r.body)
	}
	// Commands that run a job must not run a staging one.
	wantProblem(t, s.do("POST", path+"/resume", tokenA, nil), http.StatusConflict)
	wantProblem(t, s.do("POST", path+"/pause", tokenA, nil), http.StatusConflict)
	for _, r := range []response{
		s.do("PATCH", path, tokenA, `{"rate_per_sec": 5, "budget": 10}`),
		s.do("POST", path+"/redrive", tokenA, `{"category": "exhausted"}`),
	} {
		if r.status >= 500 {
			t.Fatalf("a command on a staging job failed: %d %s", r.status, r.body)
		}
	}
	if r := s.do("POST", path+"/preview", tokenA, nil); r.status != http.StatusOK {
		t.Fatalf("preview: %d %s", r.status, r.body)
	}

	if tt := s.totals(); tt != (totals{jobs: 1}) {
		t.Fatalf("a staging job left %+v, want one job, no items, no queue messages", tt)
	}
	var got api.Job
	s.do("GET", path, tokenA, nil).json(t, &got)
	if got.Status != "staging" || len(got.Shards) != 0 || got.Counts != (store.Counts{}) || got.StartedAt != nil {
		t.Fatalf("staging job after its parts and commands: %+v", got)
	}

	// Start: a planning message, and still no turn.
	r := s.do("POST", path+"/start", tokenA, `{"parts": 2}`)
	if r.status != http.StatusAccepted {
		t.Fatalf("start: %d %s", r.status, r.body)
	}
	msgs, err := s.queue.Receive(ctx, queue.ReceiveParams{Max: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 1 {
		t.Fatalf("start enqueued %d messages, want one (planning)", len(msgs))
	}
	if id, ok := dispatch.DecodePlan(msgs[0].Body); !ok || id != j.ID {
		t.Fatalf("start enqueued %s, want the planning of %s", msgs[0].Body, j.ID)
	}
	// Planning makes the shards and enqueues their turns: what the checks
	// above would have seen had the staging job been sent.
	turns := map[string]bool{} // by message id: a turn not deleted comes again
	for planned := true; planned; {
		planned = false
		for _, m := range msgs {
			id, ok := dispatch.DecodePlan(m.Body)
			if !ok {
				turns[m.ID] = true
				continue
			}
			planned = true
			if err := s.deps.Submitter.Plan(ctx, id); err != nil {
				t.Fatal(err)
			}
			if err := s.queue.Delete(ctx, m.ReceiptHandle); err != nil {
				t.Fatal(err)
			}
		}
		if msgs, err = s.queue.Receive(ctx, queue.ReceiveParams{Max: 10}); err != nil {
			t.Fatal(err)
		}
	}
	s.do("GET", path, tokenA, nil).json(t, &got)
	if tt := s.totals(); got.Status != "running" || tt.items != 3 || len(turns) != len(got.Shards) || len(got.Shards) == 0 {
		t.Errorf("after planning: job %s with %d shards, %d turns, totals %+v; want running, 3 items, a turn per shard",
			got.Status, len(got.Shards), len(turns), tt)
	}
}

// TestStagedPartNumbers: parts are numbered 1 to 10,000. The highest is
// taken; 10,001, 0 and negative numbers are refused with a problem, and
// nothing of them is stored.
func TestStagedPartNumbers(t *testing.T) {
	s := newStack(t)
	j := s.createStaged("numbers")
	r := s.putPart(j.ID, "10000", "application/x-ndjson", ndjsonPart)
	if r.status != http.StatusOK {
		t.Fatalf("part 10000: %d %s", r.status, r.body)
	}
	var pr api.PartResponse
	r.json(t, &pr)
	if pr != (api.PartResponse{Part: 10000, Recipients: 2, Bytes: int64(len(ndjsonPart))}) {
		t.Errorf("part 10000 answered %+v", pr)
	}
	for _, n := range []string{"10001", "0", "-1", "99999999999999999999"} {
		t.Run(n, func(t *testing.T) {
			r := s.putPart(j.ID, n, "application/x-ndjson", ndjsonPart)
			if r.status < 400 || r.status > 499 {
				t.Fatalf("part %s: %d %s, want a 4xx problem", n, r.status, r.body)
			}
			p := wantProblem(t, r, r.status)
			if !strings.Contains(p.Error(), "10000") {
				t.Errorf("part %s: the problem does not give the range: %+v", n, p)
			}
		})
	}
	if got := s.storedParts(j.ID); !slices.Equal(got, []int{10000}) {
		t.Errorf("stored parts %v, want only 10000", got)
	}
	if got := s.listedParts(j.ID); !slices.Equal(got, []int{10000}) {
		t.Errorf("listed parts %v, want only 10000", got)
	}
}

// TestStagedPartSizeLimit: a part may be 5 MiB; one byte more is a 413
// problem naming the limit, and nothing of it is stored.
func TestStagedPartSizeLimit(t *testing.T) {
	s := newStack(t)
	j := s.createStaged("sizes")
	const limit = 5 << 20 // DESIGN.md: at most 5 MiB per part
	// Valid parts padded with white space (blank lines for CSV) to a
	// size: over the limit, they would be stored if the limit were not
	// kept.
	padded := func(line string, size int) string {
		pad := " "
		if strings.HasPrefix(line, "account,") {
			pad = "\n"
		}
		return line + strings.Repeat(pad, size-len(line))
	}
	line := `{"account": "acct-a", "to": "u1", "vars": {"name": "A"}}` + "\n"
	r := s.putPart(j.ID, "1", "application/x-ndjson", padded(line, limit))
	if r.status != http.StatusOK {
		t.Fatalf("a part of exactly 5 MiB: %d %s", r.status, r.body)
	}
	var pr api.PartResponse
	r.json(t, &pr)
	if pr.Bytes != limit || pr.Recipients != 1 {
		t.Errorf("a part of exactly 5 MiB answered %+v", pr)
	}
	for name, tc := range map[string]struct{ part, media, body string }{
		"NDJSON": {"2", "application/x-ndjson", padded(line, limit+1)},
		"JSON":   {"3", "application/json", padded(`{"recipients": [{"account": "acct-a", "to": "u2", "vars": {"name": "B"}}]}`, limit+1)},
		"CSV":    {"4", "text/csv", padded("account,to,var.name\nacct-a,u3,C\n", limit+1)},
	} {
		t.Run(name, func(t *testing.T) {
			p := wantProblem(t, s.putPart(j.ID, tc.part, tc.media, tc.body), http.StatusRequestEntityTooLarge)
			if !strings.Contains(p.Detail, strconv.Itoa(limit)) && !strings.Contains(p.Detail, "5 MiB") {
				t.Errorf("413 detail %q does not name the limit", p.Detail)
			}
		})
	}
	if got := s.storedParts(j.ID); !slices.Equal(got, []int{1}) {
		t.Errorf("stored parts %v, want only part 1", got)
	}
	if got := s.listedParts(j.ID); !slices.Equal(got, []int{1}) {
		t.Errorf("listed parts %v, want only part 1", got)
	}
}

// TestCancelDiscardsStagingJob: cancelling a staging job ends it
// cancelled and discards its parts at once; it takes no more parts and
// cannot be started.
func TestCancelDiscardsStagingJob(t *testing.T) {
	s := newStack(t)
	j := s.createStaged("discard")
	path := "/v1/jobs/" + j.ID
	for _, n := range []string{"1", "2"} {
		if r := s.putPart(j.ID, n, "application/x-ndjson", ndjsonPart); r.status != http.StatusOK {
			t.Fatalf("part %s: %d %s", n, r.status, r.body)
		}
	}
	// Another staging job keeps its parts.
	other := s.createStaged("kept")
	if r := s.putPart(other.ID, "1", "application/x-ndjson", ndjsonPart); r.status != http.StatusOK {
		t.Fatalf("part of the other job: %d %s", r.status, r.body)
	}

	r := s.do("POST", path+"/cancel", tokenA, nil)
	if r.status != http.StatusOK {
		t.Fatalf("cancel: %d %s", r.status, r.body)
	}
	var got api.Job
	r.json(t, &got)
	if got.Status != "cancelled" || got.FinishedAt == nil {
		t.Errorf("cancel answered %+v, want cancelled and finished", got)
	}
	s.do("GET", path, tokenA, nil).json(t, &got)
	if got.Status != "cancelled" {
		t.Errorf("the cancelled staging job reads %s", got.Status)
	}
	if parts := s.storedParts(j.ID); len(parts) != 0 {
		t.Errorf("the store keeps parts %v of the cancelled job", parts)
	}
	if parts := s.listedParts(j.ID); len(parts) != 0 {
		t.Errorf("GET recipients lists parts %v of the cancelled job", parts)
	}
	// Cancelled is final: no parts come back, no start.
	wantProblem(t, s.putPart(j.ID, "3", "application/x-ndjson", ndjsonPart), http.StatusConflict)
	wantProblem(t, s.do("POST", path+"/start", tokenA, `{"parts": 2}`), http.StatusConflict)
	if parts := s.storedParts(j.ID); len(parts) != 0 {
		t.Errorf("after a refused upload the store keeps parts %v", parts)
	}
	if tt := s.totals(); tt.items != 0 || tt.messages != 0 {
		t.Errorf("the cancelled staging job left %+v", tt)
	}
	if parts := s.storedParts(other.ID); !slices.Equal(parts, []int{1}) {
		t.Errorf("the other staging job keeps parts %v, want [1]", parts)
	}
}
