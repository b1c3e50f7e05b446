package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/api"
	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/control"
	"github.com/qunfa/qunfa/internal/queue/sqlitequeue"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/store/sqlitestore"
	"github.com/qunfa/qunfa/internal/submit"
)

// Tokens of the two tenants every test stack knows.
const (
	tokenA = "token-tenant-a"
	tokenB = "token-tenant-b"
	// tokenARead is a read-only token of tenant A.
	tokenARead = "token-tenant-a-read"
	// platformToken is the platform operator's token.
	platformToken = "token-platform"
)

// stack is the API over the real embedded store and queue.
type stack struct {
	t     testing.TB
	store *sqlitestore.Store
	queue *sqlitequeue.Queue
	clock *clock.Fake
	srv   *httptest.Server
	deps  api.Deps
}

type stackOption func(*api.Deps)

func newStack(t testing.TB, opts ...stackOption) *stack {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	st, err := sqlitestore.Open(ctx, filepath.Join(dir, "store.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	clk := clock.NewFake(time.Date(2025, 3, 1, 9, 0, 0, 0, time.UTC))
	q, err := sqlitequeue.Open(ctx, filepath.Join(dir, "queue.db"), sqlitequeue.Options{Name: "work", Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = q.Close() })
	for tok, tenant := range map[string]string{tokenA: "tenant-a", tokenB: "tenant-b"} {
		if err := st.PutToken(ctx, api.HashToken(tok), tenant); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.CreateToken(ctx, store.APIToken{ID: "tok_read", Tenant: "tenant-a", Name: "reader", Role: store.RoleRead,
		Hash: api.HashToken(tokenARead), CreatedAt: clk.Now()}); err != nil {
		t.Fatal(err)
	}
	// A provider account has one owner: tenant A sends through acct-a and
	// acct-b, tenant B through its own.
	for tenant, accts := range map[string][]string{"tenant-a": {"acct-a", "acct-b"}, "tenant-b": tenantBAccounts} {
		for _, acct := range accts {
			if err := st.GrantAccount(ctx, tenant, acct, clk.Now()); err != nil {
				t.Fatal(err)
			}
			if _, err := st.PutAccount(ctx, store.Account{Tenant: tenant, ID: acct, RatePerSec: 10, Burst: 10, MaxRecipientsPerCall: 1}); err != nil {
				t.Fatal(err)
			}
		}
	}
	deps := api.Deps{
		Store:     st,
		Submitter: &submit.Submitter{Store: st, Queue: q, Clock: clk},
		Control:   &control.Controller{Store: st, Queue: q, Clock: clk},
		Clock:     clk,
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
		// As in qunfa dev: an account nobody owns goes to the tenant that
		// first PUTs it (withoutGrantOnPut turns it off).
		GrantOnPut:        true,
		PlatformTokenHash: api.HashToken(platformToken),
	}
	for _, o := range opts {
		o(&deps)
	}
	srv := httptest.NewServer(api.New(deps))
	t.Cleanup(srv.Close)
	return &stack{t: t, store: st, queue: q, clock: clk, srv: srv, deps: deps}
}

// response is an answer read whole.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) json(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("answer %d is not JSON: %v\n%s", r.status, err, r.body)
	}
}

// do sends a request with the given token ("" = none) and headers.
func (s *stack) do(method, path, token string, body any, headers ...string) response {
	s.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			s.t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, s.srv.URL+path, rd)
	if err != nil {
		s.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := s.srv.Client().Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatal(err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: raw}
}

// wantProblem checks a problem+json answer and returns it.
func wantProblem(t *testing.T, r response, status int) api.Problem {
	t.Helper()
	if r.status != status {
		t.Fatalf("status = %d, want %d; body %s", r.status, status, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type = %q, want application/problem+json; body %s", ct, r.body)
	}
	var p api.Problem
	r.json(t, &p)
	if p.Status != status || p.Type == "" || p.Title == "" {
		t.Fatalf("incomplete problem %+v", p)
	}
	return p
}

// totals counts what the store and queue hold, to prove a refused request
// changed nothing.
type totals struct{ jobs, items, messages int }

func (s *stack) totals() totals {
	s.t.Helper()
	ctx := context.Background()
	var tt totals
	for _, tenant := range []string{"tenant-a", "tenant-b"} {
		cursor := ""
		for {
			page, err := s.store.ListJobs(ctx, store.ListJobsParams{Tenant: tenant, Cursor: cursor})
			if err != nil {
				s.t.Fatal(err)
			}
			for _, j := range page.Jobs {
				tt.jobs++
				icur := ""
				for {
					items, err := s.store.ListItems(ctx, store.ListItemsParams{JobID: j.ID, Cursor: icur})
					if err != nil {
						s.t.Fatal(err)
					}
					tt.items += len(items.Items)
					if icur = items.NextCursor; icur == "" {
						break
					}
				}
			}
			if cursor = page.NextCursor; cursor == "" {
				break
			}
		}
	}
	st, err := s.queue.Stats(ctx)
	if err != nil {
		s.t.Fatal(err)
	}
	tt.messages = st.Visible + st.InFlight
	return tt
}

// jobBody is a valid submission to accounts acct-a and acct-b.
// tenantBAccounts are tenant B's provider accounts.
var tenantBAccounts = []string{"acct-b1", "acct-b2"}

// withoutGrantOnPut: an account nobody owns stays unowned on PUT
// (production).
func withoutGrantOnPut(d *api.Deps) { d.GrantOnPut = false }

func jobBody(n int) submit.Request { return jobBodyOn(n, "acct-a", "acct-b") }

// jobBodyOn is a valid job of n recipients spread over two accounts.
func jobBodyOn(n int, a1, a2 string) submit.Request {
	r := submit.Request{Name: "spring sale", Template: "Hi {{name}}, 20% off today"}
	for i := range n {
		acct := a1
		if i%2 == 1 {
			acct = a2
		}
		r.Recipients = append(r.Recipients, submit.Recipient{
			Account: acct, To: "user-" + string(rune('a'+i%26)) + strings.Repeat("x", i/26), Vars: map[string]string{"name": "Li"},
		})
	}
	return r
}

// submitJob posts a valid job for tenant A and returns it.
func (s *stack) submitJob(token, key string, n int) api.Job {
	s.t.Helper()
	body := jobBody(n)
	if token == tokenB {
		body = jobBodyOn(n, tenantBAccounts[0], tenantBAccounts[1])
	}
	r := s.do("POST", "/v1/jobs", token, body, "Idempotency-Key", key)
	if r.status != http.StatusAccepted {
		s.t.Fatalf("submit: %d %s", r.status, r.body)
	}
	var j api.Job
	r.json(s.t, &j)
	return j
}
