// Package sqlitequeue is the embedded adapter of the queue port: a FIFO
// queue with message groups, visibility timeouts, deduplication and a
// dead-letter queue, kept in a SQLite file, with the semantics of SQS FIFO.
//
// Several named queues (a work queue and its dead-letter queue) may share
// one file, and several processes may open it at once: every state change
// is one BEGIN IMMEDIATE transaction, so the group lock holds across
// goroutines and processes. The file is in WAL mode and survives a kill -9
// of any of them.
//
// Only the head (oldest undeleted message) of a group is ever delivered,
// and only while it is not in flight, so a group is locked while its
// message is in flight and its messages are delivered in send order. One
// Receive therefore returns at most one message per group. A groups table
// keeps each group's head and hold, so finding available heads costs the
// number of groups in flight, not the backlog.
package sqlitequeue

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/queue"

	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// pollInterval is how often a long poll looks for messages sent by other
// processes (in-process sends wake it at once).
const pollInterval = 50 * time.Millisecond

// busyTimeout is how long a statement waits for another connection's write
// lock before failing.
const busyTimeout = 10 * time.Second

// Options configures one named queue in a file.
type Options struct {
	// Name of the queue in the file (e.g. "work", "work-dlq"). Required.
	Name string
	// MaxReceiveCount is how many times a message may be received; the
	// receive after that moves it to the end of its group in DeadLetter,
	// keeping its ID and receive count (as SQS does). 0 means never move.
	MaxReceiveCount int
	// DeadLetter names the queue in the same file that takes messages
	// received more than MaxReceiveCount times. Required when
	// MaxReceiveCount > 0.
	DeadLetter string
	// Clock is used for visibility timeouts, the dedup window and SentAt.
	// Default clock.System{}.
	Clock clock.Clock
	// Logger receives dead-letter moves. Default slog.Default().
	Logger *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.Clock == nil {
		o.Clock = clock.System{}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

func (o Options) validate() error {
	var errs []error
	if o.Name == "" {
		errs = append(errs, errors.New("name is required"))
	}
	if o.MaxReceiveCount < 0 {
		errs = append(errs, errors.New("max receive count must not be negative"))
	}
	if o.MaxReceiveCount > 0 && o.DeadLetter == "" {
		errs = append(errs, errors.New("dead-letter queue is required with a max receive count"))
	}
	if o.DeadLetter != "" && o.DeadLetter == o.Name {
		errs = append(errs, errors.New("a queue cannot be its own dead-letter queue"))
	}
	return errors.Join(errs...)
}

// Queue is one named queue in a SQLite file. Safe for concurrent use.
type Queue struct {
	db   *sql.DB
	opts Options

	mu      sync.Mutex
	changed chan struct{} // closed and replaced when messages may have become available
	closed  chan struct{}
	once    sync.Once
}

var _ queue.Queue = (*Queue)(nil)

const schema = `
CREATE TABLE IF NOT EXISTS queue_messages (
	seq           INTEGER PRIMARY KEY AUTOINCREMENT, -- send order
	queue         TEXT    NOT NULL,
	id            TEXT    NOT NULL UNIQUE,
	grp           TEXT    NOT NULL,
	dedup_id      TEXT    NOT NULL,
	body          BLOB    NOT NULL,
	sent_at       INTEGER NOT NULL, -- unix nanoseconds
	visible_at    INTEGER NOT NULL, -- in flight while > now
	receipt       TEXT,             -- handle of the latest receive
	receive_count INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS queue_messages_group ON queue_messages (queue, grp, seq);
CREATE UNIQUE INDEX IF NOT EXISTS queue_messages_receipt ON queue_messages (receipt) WHERE receipt IS NOT NULL;
-- One row per non-empty group: its head message and the head's visible_at.
CREATE TABLE IF NOT EXISTS queue_groups (
	queue      TEXT    NOT NULL,
	grp        TEXT    NOT NULL,
	head_seq   INTEGER NOT NULL,
	visible_at INTEGER NOT NULL,
	PRIMARY KEY (queue, grp)
);
CREATE INDEX IF NOT EXISTS queue_groups_order ON queue_groups (queue, head_seq);
CREATE TABLE IF NOT EXISTS queue_dedup (
	queue      TEXT    NOT NULL,
	dedup_id   TEXT    NOT NULL,
	message_id TEXT    NOT NULL,
	sent_at    INTEGER NOT NULL,
	PRIMARY KEY (queue, dedup_id)
);
CREATE INDEX IF NOT EXISTS queue_dedup_sent ON queue_dedup (queue, sent_at);
`

// Open opens (creating if needed) the named queue in the SQLite file at
// path. Close releases it.
func Open(ctx context.Context, path string, opts Options) (*Queue, error) {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, fmt.Errorf("sqlitequeue: %w: %w", queue.ErrInvalidArgument, err)
	}
	// The path is escaped: SQLite decodes %XX in a file: URI, and ? or #
	// would end it.
	dsn := fmt.Sprintf("file:%s?_txlock=immediate&_pragma=busy_timeout(%d)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)",
		(&url.URL{Path: path}).EscapedPath(), busyTimeout.Milliseconds())
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("sqlitequeue: open %s: %w", path, err)
	}
	// One connection per Queue: goroutines of this process take turns
	// instead of spinning on SQLite's busy handler; other processes and
	// other Queues are kept apart by BEGIN IMMEDIATE.
	db.SetMaxOpenConns(1)
	if _, err := db.ExecContext(ctx, schema); err != nil {
		db.Close()
		return nil, fmt.Errorf("sqlitequeue: create schema in %s: %w", path, err)
	}
	return &Queue{db: db, opts: opts, changed: make(chan struct{}), closed: make(chan struct{})}, nil
}

// Close closes the file. Receives waiting in a long poll return an error.
func (q *Queue) Close() error {
	q.once.Do(func() { close(q.closed) })
	return q.db.Close()
}

// notify wakes this process's long polls.
func (q *Queue) notify() {
	q.mu.Lock()
	close(q.changed)
	q.changed = make(chan struct{})
	q.mu.Unlock()
}

func (q *Queue) waitChanged() <-chan struct{} {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.changed
}

func validID(what, s string) error {
	if s == "" || len(s) > queue.MaxIDLength {
		return fmt.Errorf("%w: %s must have 1 to %d characters", queue.ErrInvalidArgument, what, queue.MaxIDLength)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '!' || s[i] > '~' {
			return fmt.Errorf("%w: %s may hold only ASCII letters, digits and punctuation", queue.ErrInvalidArgument, what)
		}
	}
	return nil
}

func validateSend(p queue.SendParams) error {
	if len(p.Body) == 0 || len(p.Body) > queue.MaxBodyBytes {
		return fmt.Errorf("%w: body must have 1 to %d bytes", queue.ErrInvalidArgument, queue.MaxBodyBytes)
	}
	if !legalBody(p.Body) {
		return fmt.Errorf("%w: body must be UTF-8 text in the SQS character set", queue.ErrInvalidArgument)
	}
	return errors.Join(validID("group", p.Group), validID("dedup id", p.DedupID))
}

// legalBody reports whether b is UTF-8 text of the characters SQS accepts:
// #x9 | #xA | #xD | #x20-#xD7FF | #xE000-#xFFFD | #x10000-#x10FFFF.
func legalBody(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for _, r := range string(b) {
		switch {
		case r == 0x9 || r == 0xA || r == 0xD:
		case r >= 0x20 && r <= 0xD7FF:
		case r >= 0xE000 && r <= 0xFFFD:
		case r >= 0x10000 && r <= 0x10FFFF:
		default:
			return false
		}
	}
	return true
}

func validVisibility(d time.Duration) error {
	if d < 0 || d > queue.MaxVisibilityTimeout {
		return fmt.Errorf("%w: visibility timeout %v out of 0..%v", queue.ErrInvalidArgument, d, queue.MaxVisibilityTimeout)
	}
	return nil
}

func validateReceive(p queue.ReceiveParams) error {
	var errs []error
	if p.Max < 1 || p.Max > queue.MaxReceive {
		errs = append(errs, fmt.Errorf("%w: max %d out of 1..%d", queue.ErrInvalidArgument, p.Max, queue.MaxReceive))
	}
	if p.Wait < 0 || p.Wait > queue.MaxWait {
		errs = append(errs, fmt.Errorf("%w: wait %v out of 0..%v", queue.ErrInvalidArgument, p.Wait, queue.MaxWait))
	}
	return errors.Join(append(errs, validVisibility(p.VisibilityTimeout))...)
}

// Send appends a message to its group, or drops it (Duplicate, with the
// original's MessageID) when its dedup id was sent within queue.DedupWindow.
func (q *Queue) Send(ctx context.Context, p queue.SendParams) (queue.SendResult, error) {
	if err := validateSend(p); err != nil {
		return queue.SendResult{}, err
	}
	var res queue.SendResult
	err := q.inTx(ctx, func(tx *sql.Tx) error {
		now := q.opts.Clock.Now()
		horizon := now.Add(-queue.DedupWindow).UnixNano()
		var prevID string
		var prevAt int64
		err := tx.QueryRowContext(ctx, `SELECT message_id, sent_at FROM queue_dedup WHERE queue = ? AND dedup_id = ?`,
			q.opts.Name, p.DedupID).Scan(&prevID, &prevAt)
		switch {
		case err == nil && prevAt > horizon:
			res = queue.SendResult{MessageID: prevID, Duplicate: true}
			return nil
		case err != nil && !errors.Is(err, sql.ErrNoRows):
			return fmt.Errorf("look up dedup id: %w", err)
		}
		id := rand.Text()
		if err := appendMessage(ctx, tx, q.opts.Name, stored{id: id, group: p.Group, dedupID: p.DedupID, body: p.Body, sentAt: now.UnixNano()}); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT OR REPLACE INTO queue_dedup (queue, dedup_id, message_id, sent_at) VALUES (?, ?, ?, ?)`,
			q.opts.Name, p.DedupID, id, now.UnixNano()); err != nil {
			return fmt.Errorf("record dedup id: %w", err)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM queue_dedup WHERE queue = ? AND sent_at <= ?`, q.opts.Name, horizon); err != nil {
			return fmt.Errorf("prune dedup ids: %w", err)
		}
		res = queue.SendResult{MessageID: id}
		return nil
	})
	if err != nil {
		return queue.SendResult{}, fmt.Errorf("sqlitequeue: send to %s: %w", q.opts.Name, err)
	}
	if !res.Duplicate {
		q.notify()
	}
	return res, nil
}

// Receive returns up to p.Max messages, the head of each available group in
// send order, waiting up to p.Wait for one. Heads already received
// MaxReceiveCount times move to the dead-letter queue instead.
func (q *Queue) Receive(ctx context.Context, p queue.ReceiveParams) ([]queue.Message, error) {
	if err := validateReceive(p); err != nil {
		return nil, err
	}
	var timeout <-chan time.Time
	if p.Wait > 0 {
		timer := time.NewTimer(p.Wait)
		defer timer.Stop()
		timeout = timer.C
	}
	for {
		changed := q.waitChanged() // before looking, so no send is missed
		msgs, err := q.receiveOnce(ctx, p)
		if err != nil || len(msgs) > 0 || timeout == nil {
			return msgs, err
		}
		poll := time.NewTimer(pollInterval)
		select {
		case <-changed:
		case <-poll.C:
		case <-timeout:
			timeout = nil // one last look, then return
		case <-ctx.Done():
			poll.Stop()
			return nil, fmt.Errorf("sqlitequeue: receive from %s: %w", q.opts.Name, ctx.Err())
		case <-q.closed:
			poll.Stop()
			return nil, fmt.Errorf("sqlitequeue: receive from %s: queue closed", q.opts.Name)
		}
		poll.Stop()
	}
}

// stored is a message as kept in queue_messages.
type stored struct {
	seq     int64
	id      string
	group   string
	dedupID string
	body    []byte
	sentAt  int64
	count   int
}

// appendMessage adds m at the end of its group in queue name.
func appendMessage(ctx context.Context, tx *sql.Tx, name string, m stored) error {
	var seq int64
	if err := tx.QueryRowContext(ctx, `INSERT INTO queue_messages (queue, id, grp, dedup_id, body, sent_at, visible_at, receive_count)
		VALUES (?, ?, ?, ?, ?, ?, 0, ?) RETURNING seq`,
		name, m.id, m.group, m.dedupID, m.body, m.sentAt, m.count).Scan(&seq); err != nil {
		return fmt.Errorf("insert message: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO queue_groups (queue, grp, head_seq, visible_at) VALUES (?, ?, ?, 0)
		ON CONFLICT (queue, grp) DO NOTHING`, name, m.group, seq); err != nil {
		return fmt.Errorf("insert group: %w", err)
	}
	return nil
}

// removeMessage deletes the message seq of group and, if it was the
// group's head, makes the next message the head (or drops the group).
func removeMessage(ctx context.Context, tx *sql.Tx, name, group string, seq int64) error {
	if _, err := tx.ExecContext(ctx, `DELETE FROM queue_messages WHERE seq = ?`, seq); err != nil {
		return fmt.Errorf("delete message: %w", err)
	}
	var next sql.NullInt64
	if err := tx.QueryRowContext(ctx, `SELECT MIN(seq) FROM queue_messages WHERE queue = ? AND grp = ?`, name, group).Scan(&next); err != nil {
		return fmt.Errorf("find next head: %w", err)
	}
	if !next.Valid {
		if _, err := tx.ExecContext(ctx, `DELETE FROM queue_groups WHERE queue = ? AND grp = ?`, name, group); err != nil {
			return fmt.Errorf("drop group: %w", err)
		}
		return nil
	}
	if _, err := tx.ExecContext(ctx, `UPDATE queue_groups SET head_seq = ?, visible_at = 0 WHERE queue = ? AND grp = ? AND head_seq = ?`,
		next.Int64, name, group, seq); err != nil {
		return fmt.Errorf("advance group: %w", err)
	}
	return nil
}

// headsQuery selects the available heads (heads not in flight) in send
// order.
const headsQuery = `
SELECT m.seq, m.id, m.grp, m.dedup_id, m.body, m.sent_at, m.receive_count
FROM queue_groups g JOIN queue_messages m ON m.seq = g.head_seq
WHERE g.queue = ? AND g.visible_at <= ?
ORDER BY g.head_seq LIMIT ?`

func (q *Queue) receiveOnce(ctx context.Context, p queue.ReceiveParams) ([]queue.Message, error) {
	now := q.opts.Clock.Now()
	// A read first, so an idle poll takes no write lock.
	var found bool
	if err := q.db.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM queue_groups WHERE queue = ? AND visible_at <= ?)`,
		q.opts.Name, now.UnixNano()).Scan(&found); err != nil {
		return nil, fmt.Errorf("sqlitequeue: receive from %s: %w", q.opts.Name, err)
	}
	if !found {
		return nil, nil
	}
	var out []queue.Message
	var moved int
	err := q.inTx(ctx, func(tx *sql.Tx) error {
		out, moved = nil, 0
		now = q.opts.Clock.Now()
		visibleAt := now.Add(p.VisibilityTimeout).UnixNano()
		for len(out) < p.Max {
			heads, err := selectHeads(ctx, tx, q.opts.Name, now.UnixNano(), p.Max-len(out))
			if err != nil {
				return err
			}
			movedNow := 0
			for _, h := range heads {
				if q.opts.MaxReceiveCount > 0 && h.count >= q.opts.MaxReceiveCount {
					// Appended to the dead-letter queue, keeping its id
					// and receive count (as SQS does).
					if err := removeMessage(ctx, tx, q.opts.Name, h.group, h.seq); err != nil {
						return fmt.Errorf("move to dead-letter queue: %w", err)
					}
					if err := appendMessage(ctx, tx, q.opts.DeadLetter, h); err != nil {
						return fmt.Errorf("move to dead-letter queue: %w", err)
					}
					movedNow++
					continue
				}
				m := queue.Message{ID: h.id, Group: h.group, DedupID: h.dedupID, Body: h.body,
					ReceiptHandle: rand.Text(), ReceiveCount: h.count + 1, SentAt: time.Unix(0, h.sentAt)}
				if _, err := tx.ExecContext(ctx, `UPDATE queue_messages SET receipt = ?, visible_at = ?, receive_count = ? WHERE seq = ?`,
					m.ReceiptHandle, visibleAt, m.ReceiveCount, h.seq); err != nil {
					return fmt.Errorf("mark received: %w", err)
				}
				if _, err := tx.ExecContext(ctx, `UPDATE queue_groups SET visible_at = ? WHERE queue = ? AND grp = ?`,
					visibleAt, q.opts.Name, h.group); err != nil {
					return fmt.Errorf("lock group: %w", err)
				}
				out = append(out, m)
			}
			moved += movedNow
			if movedNow == 0 { // nothing new can have become a head
				break
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("sqlitequeue: receive from %s: %w", q.opts.Name, err)
	}
	if moved > 0 {
		q.opts.Logger.WarnContext(ctx, "queue messages moved to dead-letter queue",
			slog.String("queue", q.opts.Name), slog.String("dead_letter", q.opts.DeadLetter),
			slog.Int("moved", moved), slog.Int("max_receive_count", q.opts.MaxReceiveCount))
	}
	return out, nil
}

func selectHeads(ctx context.Context, tx *sql.Tx, name string, now int64, limit int) ([]stored, error) {
	rows, err := tx.QueryContext(ctx, headsQuery, name, now, limit)
	if err != nil {
		return nil, fmt.Errorf("select heads: %w", err)
	}
	defer rows.Close()
	var heads []stored
	for rows.Next() {
		var h stored
		if err := rows.Scan(&h.seq, &h.id, &h.group, &h.dedupID, &h.body, &h.sentAt, &h.count); err != nil {
			return nil, fmt.Errorf("scan head: %w", err)
		}
		heads = append(heads, h)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("select heads: %w", err)
	}
	return heads, nil
}

// Delete removes a received message; a handle that is not the message's
// latest receive (or of a deleted message) is queue.ErrNotFound.
func (q *Queue) Delete(ctx context.Context, receiptHandle string) error {
	if receiptHandle == "" {
		return fmt.Errorf("%w: empty receipt handle", queue.ErrInvalidArgument)
	}
	err := q.inTx(ctx, func(tx *sql.Tx) error {
		var seq int64
		var group string
		err := tx.QueryRowContext(ctx, `SELECT seq, grp FROM queue_messages WHERE queue = ? AND receipt = ?`,
			q.opts.Name, receiptHandle).Scan(&seq, &group)
		if errors.Is(err, sql.ErrNoRows) {
			return queue.ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("find message: %w", err)
		}
		return removeMessage(ctx, tx, q.opts.Name, group, seq)
	})
	if err != nil {
		return fmt.Errorf("sqlitequeue: delete from %s: %w", q.opts.Name, err)
	}
	q.notify() // the group's next message is now its head
	return nil
}

// ChangeVisibility makes a received message visible again d from now,
// keeping its group locked until then.
func (q *Queue) ChangeVisibility(ctx context.Context, receiptHandle string, d time.Duration) error {
	if receiptHandle == "" {
		return fmt.Errorf("%w: empty receipt handle", queue.ErrInvalidArgument)
	}
	if err := validVisibility(d); err != nil {
		return err
	}
	err := q.inTx(ctx, func(tx *sql.Tx) error {
		visibleAt := q.opts.Clock.Now().Add(d).UnixNano()
		var seq int64
		var group string
		err := tx.QueryRowContext(ctx, `UPDATE queue_messages SET visible_at = ? WHERE queue = ? AND receipt = ? RETURNING seq, grp`,
			visibleAt, q.opts.Name, receiptHandle).Scan(&seq, &group)
		if errors.Is(err, sql.ErrNoRows) {
			return queue.ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("update message: %w", err)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE queue_groups SET visible_at = ? WHERE queue = ? AND grp = ? AND head_seq = ?`,
			visibleAt, q.opts.Name, group, seq); err != nil {
			return fmt.Errorf("update group: %w", err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("sqlitequeue: change visibility in %s: %w", q.opts.Name, err)
	}
	if d == 0 {
		q.notify()
	}
	return nil
}

// ReleaseInFlight makes every message of the queue that is in flight (or
// handed back with a delay) visible at once, and returns how many. It is
// for a process that owns the queue file alone and starts again after a
// crash: the messages its previous life received will never be deleted or
// handed back, and waiting out their visibility timeout would only delay
// the work. Never call it while another process may hold messages.
func (q *Queue) ReleaseInFlight(ctx context.Context) (int, error) {
	var n int64
	err := q.inTx(ctx, func(tx *sql.Tx) error {
		now := q.opts.Clock.Now().UnixNano()
		res, err := tx.ExecContext(ctx, `UPDATE queue_messages SET visible_at = ? WHERE queue = ? AND visible_at > ? AND receive_count > 0`,
			now, q.opts.Name, now)
		if err != nil {
			return fmt.Errorf("release messages: %w", err)
		}
		if n, err = res.RowsAffected(); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE queue_groups SET visible_at = ? WHERE queue = ? AND visible_at > ?`,
			now, q.opts.Name, now); err != nil {
			return fmt.Errorf("release groups: %w", err)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("sqlitequeue: release in-flight messages of %s: %w", q.opts.Name, err)
	}
	if n > 0 {
		q.notify()
	}
	return int(n), nil
}

// Stats is a snapshot of a queue's depth, for metrics.
type Stats struct {
	// Visible counts messages not in flight (including those waiting
	// behind an in-flight message of their group).
	Visible int
	// InFlight counts messages received and not yet deleted or expired.
	InFlight int
}

// Stats counts the queue's messages by state.
func (q *Queue) Stats(ctx context.Context) (Stats, error) {
	var s Stats
	now := q.opts.Clock.Now().UnixNano()
	err := q.db.QueryRowContext(ctx, `SELECT
		COALESCE(SUM(CASE WHEN visible_at <= ? THEN 1 ELSE 0 END), 0),
		COALESCE(SUM(CASE WHEN visible_at > ? THEN 1 ELSE 0 END), 0)
		FROM queue_messages WHERE queue = ?`, now, now, q.opts.Name).Scan(&s.Visible, &s.InFlight)
	if err != nil {
		return Stats{}, fmt.Errorf("sqlitequeue: stats of %s: %w", q.opts.Name, err)
	}
	return s, nil
}

// inTx runs f in one BEGIN IMMEDIATE transaction (the DSN's _txlock).
func (q *Queue) inTx(ctx context.Context, f func(*sql.Tx) error) error {
	tx, err := q.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	if err := f(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}
