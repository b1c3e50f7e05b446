package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"

	"github.com/qunfa/qunfa/internal/store"
)

var _ store.AuditStore = (*Store)(nil)

// auditSchema is migration 10: the audit log, newest first per tenant and
// per job.
const auditSchema = `
CREATE TABLE audit (
	tenant      TEXT NOT NULL,
	at          INTEGER NOT NULL,
	id          TEXT NOT NULL,
	token_id    TEXT NOT NULL,
	token_name  TEXT NOT NULL,
	role        TEXT NOT NULL,
	method      TEXT NOT NULL,
	route       TEXT NOT NULL,
	path        TEXT NOT NULL,
	status      INTEGER NOT NULL,
	job_id      TEXT NOT NULL,
	account     TEXT NOT NULL,
	PRIMARY KEY (tenant, at, id)
) WITHOUT ROWID;
CREATE INDEX audit_job ON audit (tenant, job_id, at, id) WHERE job_id <> '';
`

const auditCols = `tenant, at, id, token_id, token_name, role, method, route, path, status, job_id, account`

// AppendAudit records one entry.
func (s *Store) AppendAudit(ctx context.Context, e store.AuditEntry) error {
	if e.Tenant == "" || e.ID == "" {
		return fmt.Errorf("append audit: %w: tenant and id are required", store.ErrInvalidArgument)
	}
	return s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO audit (`+auditCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT DO NOTHING`, e.Tenant, toNanos(e.At), e.ID, e.TokenID, e.TokenName, string(e.Role), e.Method, e.Route, e.Path, e.Status, e.JobID, e.Account)
		if err != nil {
			return fmt.Errorf("append audit of %s: %w", e.Tenant, err)
		}
		return nil
	})
}

// ListAudit lists a tenant's entries newest first, paged by (at, id).
func (s *Store) ListAudit(ctx context.Context, p store.ListAuditParams) (store.ListAuditResult, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = 50
	}
	q := `SELECT ` + auditCols + ` FROM audit WHERE tenant = ?`
	args := []any{p.Tenant}
	if p.JobID != "" {
		q += ` AND job_id = ?`
		args = append(args, p.JobID)
	}
	if p.Cursor != "" {
		at, id, err := decodeAuditCursor(p.Cursor)
		if err != nil {
			return store.ListAuditResult{}, err
		}
		q += ` AND (at < ? OR (at = ? AND id < ?))`
		args = append(args, at, at, id)
	}
	q += ` ORDER BY at DESC, id DESC LIMIT ?`
	args = append(args, limit+1)
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return store.ListAuditResult{}, mapErr(fmt.Errorf("list audit of %s: %w", p.Tenant, err))
	}
	defer rows.Close()
	var res store.ListAuditResult
	for rows.Next() {
		var e store.AuditEntry
		var at int64
		var role string
		if err := rows.Scan(&e.Tenant, &at, &e.ID, &e.TokenID, &e.TokenName, &role, &e.Method, &e.Route, &e.Path, &e.Status, &e.JobID, &e.Account); err != nil {
			return store.ListAuditResult{}, mapErr(fmt.Errorf("list audit of %s: %w", p.Tenant, err))
		}
		e.At, e.Role = fromNanos(at), store.Role(role)
		res.Entries = append(res.Entries, e)
	}
	if err := rows.Err(); err != nil {
		return store.ListAuditResult{}, mapErr(err)
	}
	if len(res.Entries) > limit {
		res.Entries = res.Entries[:limit]
		last := res.Entries[limit-1]
		res.NextCursor = base64.RawURLEncoding.EncodeToString([]byte("a:" + strconv.FormatInt(toNanos(last.At), 10) + ":" + last.ID))
	}
	return res, nil
}

func decodeAuditCursor(c string) (int64, string, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	parts := strings.SplitN(string(b), ":", 3)
	if err != nil || len(parts) != 3 || parts[0] != "a" {
		return 0, "", fmt.Errorf("%w: bad cursor", store.ErrInvalidArgument)
	}
	at, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil {
		return 0, "", fmt.Errorf("%w: bad cursor", store.ErrInvalidArgument)
	}
	return at, parts[2], nil
}
