package api

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/qunfa/qunfa/internal/store"
)

// statusRecorder remembers the status a handler answered.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (w *statusRecorder) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusRecorder) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// auditSeq orders the audit entries a process makes at one instant.
var auditSeq atomic.Int64

// audit records a state-changing call that succeeded: who (the token),
// what (method, route, path, status), when, and the job or account it
// touched. A failure to record is logged, never turned into an error: the
// change has happened.
func (s *server) audit(r *http.Request, route string, who store.APIToken, tenant string, status int, header http.Header) {
	if s.Audit == nil || r.Method == http.MethodGet || status >= 400 || readOnlyPost(route) {
		return
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	e := store.AuditEntry{
		// Entries of one instant keep this process's order (then random,
		// unique across processes).
		Tenant: tenant, ID: fmt.Sprintf("%012x", auditSeq.Add(1)) + hex.EncodeToString(b), At: s.Clock.Now(),
		TokenID: who.ID, TokenName: who.Name, Role: who.Role,
		Method: r.Method, Route: route, Path: r.URL.Path, Status: status,
		Account: r.PathValue("account"),
	}
	if strings.HasPrefix(route, r.Method+" /v1/jobs/{id}") {
		e.JobID = r.PathValue("id")
	} else if loc := header.Get("Location"); strings.HasPrefix(loc, "/v1/jobs/") {
		e.JobID = strings.TrimPrefix(loc, "/v1/jobs/")
	}
	if err := s.Audit.AppendAudit(r.Context(), e); err != nil {
		s.Logger.Error("record audit entry", slog.String("route", route), slog.String("tenant", tenant), slog.Any("err", err))
	}
}

// readOnlyPost reports whether route is a POST that changes nothing (a
// preview): it is not recorded, since it stores nothing.
func readOnlyPost(route string) bool {
	return strings.HasSuffix(route, "/preview")
}

// AuditEntry is one entry of GET /v1/audit.
type AuditEntry struct {
	At        time.Time `json:"at"`
	TokenID   string    `json:"token_id"`
	TokenName string    `json:"token_name"`
	Role      string    `json:"role"`
	Method    string    `json:"method"`
	Route     string    `json:"route"`
	Path      string    `json:"path"`
	Status    int       `json:"status"`
	JobID     *string   `json:"job_id"`
	Account   *string   `json:"account"`
}

// AuditList is a page of GET /v1/audit, newest first.
type AuditList struct {
	Entries    []AuditEntry `json:"entries"`
	NextCursor *string      `json:"next_cursor"`
}

func strPtr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func (s *server) listAudit(w http.ResponseWriter, r *http.Request, tenant string) *Problem {
	if s.Audit == nil {
		return newProblem(http.StatusNotFound, kindNotFound, "this deployment keeps no audit log")
	}
	q := r.URL.Query()
	limit := 50
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 200 {
			return newProblem(http.StatusBadRequest, kindBadRequest, "limit must be 1 to 200")
		}
		limit = n
	}
	res, err := s.Audit.ListAudit(r.Context(), store.ListAuditParams{Tenant: tenant, JobID: q.Get("job"), Cursor: q.Get("cursor"), Limit: limit})
	if err != nil {
		return s.listProblem(r, "audit log", err)
	}
	out := AuditList{Entries: make([]AuditEntry, 0, len(res.Entries)), NextCursor: strPtr(res.NextCursor)}
	for _, e := range res.Entries {
		out.Entries = append(out.Entries, AuditEntry{At: e.At, TokenID: e.TokenID, TokenName: e.TokenName, Role: string(e.Role),
			Method: e.Method, Route: e.Route, Path: e.Path, Status: e.Status, JobID: strPtr(e.JobID), Account: strPtr(e.Account)})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
