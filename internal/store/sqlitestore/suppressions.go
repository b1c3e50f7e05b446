package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"time"

	"github.com/qunfa/qunfa/internal/store"
)

// defaultSuppressionsLimit is the page size of ListSuppressions when the
// caller gives none.
const defaultSuppressionsLimit = 100

// qSuppressedAmong looks a batch of recipients up in one statement: the
// batch is a JSON array of [account, to] pairs, each probed on the primary
// key (CROSS JOIN keeps json_each the outer loop).
const qSuppressedAmong = `SELECT s.account, s.to_id FROM json_each(?2) AS k
CROSS JOIN suppressions AS s
WHERE s.tenant = ?1 AND s.account = json_extract(k.value, '$[0]') AND s.to_id = json_extract(k.value, '$[1]')`

// PutSuppressions adds (or replaces) entries of a tenant's suppression
// list in one transaction.
func (s *Store) PutSuppressions(ctx context.Context, tenant string, entries []store.Suppression) error {
	if tenant == "" {
		return fmt.Errorf("put suppressions: %w: empty tenant", store.ErrInvalidArgument)
	}
	if len(entries) > store.MaxPutItems {
		return fmt.Errorf("put suppressions: %w: %d entries, at most %d", store.ErrInvalidArgument, len(entries), store.MaxPutItems)
	}
	for _, e := range entries {
		if e.Account == "" || e.To == "" {
			return fmt.Errorf("put suppressions: %w: empty account or recipient", store.ErrInvalidArgument)
		}
	}
	if len(entries) == 0 {
		return nil
	}
	return s.write(ctx, func(tx *sql.Tx) error {
		st, err := tx.PrepareContext(ctx, `INSERT INTO suppressions (tenant, account, to_id, reason, created_at)
VALUES (?, ?, ?, ?, ?) ON CONFLICT (tenant, account, to_id) DO UPDATE SET reason = excluded.reason, created_at = excluded.created_at`)
		if err != nil {
			return fmt.Errorf("put suppressions: %w", err)
		}
		defer st.Close()
		for _, e := range entries {
			if _, err := st.ExecContext(ctx, tenant, e.Account, e.To, e.Reason, toNanos(e.CreatedAt)); err != nil {
				return fmt.Errorf("put suppression %s/%s: %w", e.Account, e.To, err)
			}
		}
		return nil
	})
}

// DeleteSuppression removes one entry; removing an absent one is no error.
func (s *Store) DeleteSuppression(ctx context.Context, tenant, account, to string) error {
	if tenant == "" {
		return fmt.Errorf("delete suppression: %w: empty tenant", store.ErrInvalidArgument)
	}
	return s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM suppressions WHERE tenant = ? AND account = ? AND to_id = ?`, tenant, account, to)
		if err != nil {
			return fmt.Errorf("delete suppression %s/%s: %w", account, to, err)
		}
		return nil
	})
}

// SuppressedAmong returns the given recipients that are on the tenant's
// list (one query for the whole batch; absent recipients are absent from
// the map).
// SuppressionsChangedAt answers the end of time when the tenant has any
// entry, and the zero time for an empty list: look-ups cost little here
// (primary-key reads), while finding the newest entry would scan the
// tenant's whole list at every call.
func (s *Store) SuppressionsChangedAt(ctx context.Context, tenant string) (time.Time, error) {
	var any bool
	if err := s.r.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM suppressions WHERE tenant = ?)`, tenant).Scan(&any); err != nil {
		return time.Time{}, mapErr(fmt.Errorf("suppressions of %s: %w", tenant, err))
	}
	if any {
		return store.EndOfTime, nil
	}
	return time.Time{}, nil
}

func (s *Store) SuppressedAmong(ctx context.Context, tenant string, keys []store.RecipientKey) (map[store.RecipientKey]bool, error) {
	if tenant == "" {
		return nil, fmt.Errorf("suppressed among: %w: empty tenant", store.ErrInvalidArgument)
	}
	if len(keys) > store.MaxPutItems {
		return nil, fmt.Errorf("suppressed among: %w: %d recipients, at most %d", store.ErrInvalidArgument, len(keys), store.MaxPutItems)
	}
	out := map[store.RecipientKey]bool{}
	if len(keys) == 0 {
		return out, nil
	}
	pairs := make([][2]string, len(keys))
	for i, k := range keys {
		pairs[i] = [2]string{k.Account, k.To}
	}
	batch, err := json.Marshal(pairs)
	if err != nil {
		return nil, fmt.Errorf("suppressed among: %w", err)
	}
	rows, err := s.r.QueryContext(ctx, qSuppressedAmong, tenant, string(batch))
	if err != nil {
		return nil, mapErr(fmt.Errorf("suppressed among: %w", err))
	}
	defer rows.Close()
	for rows.Next() {
		var k store.RecipientKey
		if err := rows.Scan(&k.Account, &k.To); err != nil {
			return nil, mapErr(fmt.Errorf("suppressed among: %w", err))
		}
		out[k] = true
	}
	if err := rows.Err(); err != nil {
		return nil, mapErr(fmt.Errorf("suppressed among: %w", err))
	}
	return out, nil
}

// ListSuppressions pages a tenant's list in (account, recipient) order; the
// cursor is the last key returned.
func (s *Store) ListSuppressions(ctx context.Context, p store.ListSuppressionsParams) (store.ListSuppressionsResult, error) {
	if p.Tenant == "" {
		return store.ListSuppressionsResult{}, fmt.Errorf("list suppressions: %w: empty tenant", store.ErrInvalidArgument)
	}
	limit, err := pageLimit(p.Limit, defaultSuppressionsLimit)
	if err != nil {
		return store.ListSuppressionsResult{}, fmt.Errorf("list suppressions: %w", err)
	}
	q := `SELECT account, to_id, reason, created_at FROM suppressions WHERE tenant = ?1
ORDER BY account, to_id LIMIT ?2`
	args := []any{p.Tenant, limit + 1}
	if p.Cursor != "" {
		after, err := decodeTextCursor(p.Cursor, "sup")
		if err != nil {
			return store.ListSuppressionsResult{}, fmt.Errorf("list suppressions: %w", err)
		}
		q = `SELECT account, to_id, reason, created_at FROM suppressions WHERE tenant = ?1 AND (account, to_id) > (?3, ?4)
ORDER BY account, to_id LIMIT ?2`
		args = append(args, after[0], after[1])
	}
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return store.ListSuppressionsResult{}, mapErr(fmt.Errorf("list suppressions: %w", err))
	}
	defer rows.Close()
	var res store.ListSuppressionsResult
	for rows.Next() {
		var (
			e       store.Suppression
			created int64
		)
		if err := rows.Scan(&e.Account, &e.To, &e.Reason, &created); err != nil {
			return store.ListSuppressionsResult{}, mapErr(fmt.Errorf("list suppressions: %w", err))
		}
		e.CreatedAt = fromNanos(created)
		res.Entries = append(res.Entries, e)
	}
	if err := rows.Err(); err != nil {
		return store.ListSuppressionsResult{}, mapErr(fmt.Errorf("list suppressions: %w", err))
	}
	if len(res.Entries) > limit {
		res.Entries = res.Entries[:limit]
		last := res.Entries[limit-1]
		res.NextCursor = encodeTextCursor("sup", last.Account, last.To)
	}
	return res, nil
}

// encodeTextCursor makes an opaque cursor of a (string, string) key.
func encodeTextCursor(kind, a, b string) string {
	raw, _ := json.Marshal([]string{kind, a, b}) // strings always encode
	return base64.RawURLEncoding.EncodeToString(raw)
}

func decodeTextCursor(c, kind string) ([2]string, error) {
	bad := fmt.Errorf("%w: malformed cursor", store.ErrInvalidArgument)
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return [2]string{}, bad
	}
	var parts []string
	if err := json.Unmarshal(raw, &parts); err != nil || len(parts) != 3 || parts[0] != kind {
		return [2]string{}, bad
	}
	return [2]string{parts[1], parts[2]}, nil
}
