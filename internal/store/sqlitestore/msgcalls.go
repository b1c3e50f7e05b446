package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/qunfa/qunfa/internal/store"
)

var _ store.MsgCallStore = (*Store)(nil)

// msgCallsSchema (version 17): provider calls accepted under a message id
// whose result comes later (store.MsgCall), by (account, msg_id) for
// provider events and by job for the reconciler; seqs as store.EncodeSeqs
// runs.
const msgCallsSchema = `
CREATE TABLE msg_calls (
	account  TEXT NOT NULL,
	msg_id   TEXT NOT NULL,
	job_id   TEXT NOT NULL,
	shard    INTEGER NOT NULL,
	claim_id TEXT NOT NULL,
	seqs     TEXT NOT NULL,
	at       INTEGER NOT NULL,
	PRIMARY KEY (account, msg_id)
) WITHOUT ROWID;
CREATE INDEX msg_calls_job ON msg_calls (job_id);
`

// PutMsgCall stores c, replacing the call of the same message id.
func (s *Store) PutMsgCall(ctx context.Context, c store.MsgCall) error {
	if !store.ValidMsgCall(c) {
		return fmt.Errorf("put msg call: %w: empty id or 0 or over %d seqs", store.ErrInvalidArgument, store.MaxMsgCallSeqs)
	}
	return s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT OR REPLACE INTO msg_calls (account, msg_id, job_id, shard, claim_id, seqs, at) VALUES (?, ?, ?, ?, ?, ?, ?)`,
			c.Account, c.MsgID, c.JobID, c.Shard, c.ClaimID, store.EncodeSeqs(c.Seqs), toNanos(c.At))
		if err != nil {
			return fmt.Errorf("put msg call %s/%s: %w", c.Account, c.MsgID, err)
		}
		return nil
	})
}

const msgCallCols = `account, msg_id, job_id, shard, claim_id, seqs, at`

func scanMsgCall(row interface{ Scan(...any) error }) (store.MsgCall, error) {
	var (
		c    store.MsgCall
		seqs string
		at   int64
	)
	if err := row.Scan(&c.Account, &c.MsgID, &c.JobID, &c.Shard, &c.ClaimID, &seqs, &at); err != nil {
		return c, err
	}
	c.At = fromNanos(at)
	var err error
	c.Seqs, err = store.DecodeSeqs(seqs)
	return c, err
}

// GetMsgCall reads the call of account's message id.
func (s *Store) GetMsgCall(ctx context.Context, account, msgID string) (store.MsgCall, error) {
	c, err := scanMsgCall(s.r.QueryRowContext(ctx, `SELECT `+msgCallCols+` FROM msg_calls WHERE account = ? AND msg_id = ?`, account, msgID))
	if errors.Is(err, sql.ErrNoRows) {
		return store.MsgCall{}, fmt.Errorf("msg call %s/%s: %w", account, msgID, store.ErrNotFound)
	}
	if err != nil {
		return store.MsgCall{}, mapErr(fmt.Errorf("get msg call %s/%s: %w", account, msgID, err))
	}
	return c, nil
}

// ListMsgCalls lists a job's calls.
func (s *Store) ListMsgCalls(ctx context.Context, jobID string) ([]store.MsgCall, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+msgCallCols+` FROM msg_calls WHERE job_id = ?`, jobID)
	if err != nil {
		return nil, mapErr(fmt.Errorf("list msg calls of %s: %w", jobID, err))
	}
	defer rows.Close()
	var out []store.MsgCall
	for rows.Next() {
		c, err := scanMsgCall(rows)
		if err != nil {
			return nil, fmt.Errorf("list msg calls of %s: %w", jobID, err)
		}
		out = append(out, c)
	}
	return out, mapErr(rows.Err())
}
