package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/qunfa/qunfa/internal/store"
)

var _ store.WebhookStore = (*Store)(nil)

// webhookSchema holds the webhooks aggregate: schema version 5
// (migrations[5]). IF NOT EXISTS because builds of the webhooks branch
// before it was numbered created these tables at every Open on a version 3
// file; such a data directory migrates like any other. The partial index
// holds pending deliveries only: the delivery worker's "what is due"
// query.
const webhookSchema = `
CREATE TABLE IF NOT EXISTS webhooks (
	tenant      TEXT NOT NULL,
	id          TEXT NOT NULL,
	url         TEXT NOT NULL,
	events      TEXT NOT NULL,
	secret      TEXT NOT NULL,
	created_at  INTEGER NOT NULL,
	PRIMARY KEY (tenant, id)
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS webhook_deliveries (
	tenant        TEXT NOT NULL,
	webhook_id    TEXT NOT NULL,
	id            TEXT NOT NULL,
	event_id      TEXT NOT NULL,
	event_type    TEXT NOT NULL,
	body          BLOB NOT NULL,
	status        TEXT NOT NULL,
	attempts      INTEGER NOT NULL,
	next_at       INTEGER NOT NULL,
	last_status   INTEGER NOT NULL,
	last_error    TEXT NOT NULL,
	last_at       INTEGER NOT NULL,
	delivered_at  INTEGER NOT NULL,
	created_at    INTEGER NOT NULL,
	version       INTEGER NOT NULL,
	PRIMARY KEY (tenant, webhook_id, id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS webhook_deliveries_due ON webhook_deliveries (next_at) WHERE status = 'pending';
`

// CreateWebhook inserts a webhook (ErrConflict if its id is taken).
func (s *Store) CreateWebhook(ctx context.Context, w store.Webhook) error {
	if w.Tenant == "" || w.ID == "" || w.URL == "" {
		return fmt.Errorf("create webhook: %w: empty tenant, id or url", store.ErrInvalidArgument)
	}
	events, err := json.Marshal(w.Events)
	if err != nil {
		return fmt.Errorf("create webhook %s: %w", w.ID, err)
	}
	return s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO webhooks (tenant, id, url, events, secret, created_at, kind) VALUES (?, ?, ?, ?, ?, ?, ?)`,
			w.Tenant, w.ID, w.URL, string(events), w.Secret, toNanos(w.CreatedAt), string(kindOrHTTP(w.Kind)))
		if err != nil {
			return fmt.Errorf("create webhook %s/%s: %w", w.Tenant, w.ID, err)
		}
		return nil
	})
}

func scanWebhook(row interface{ Scan(...any) error }) (store.Webhook, error) {
	var (
		w       store.Webhook
		events  string
		created int64
		kind    string
	)
	if err := row.Scan(&w.Tenant, &w.ID, &w.URL, &events, &w.Secret, &created, &kind); err != nil {
		return w, err
	}
	w.Kind = kindOrHTTP(store.WebhookKind(kind))
	if err := json.Unmarshal([]byte(events), &w.Events); err != nil {
		return w, fmt.Errorf("webhook %s: events: %w", w.ID, err)
	}
	w.CreatedAt = fromNanos(created)
	return w, nil
}

const webhookCols = `tenant, id, url, events, secret, created_at, kind`

// kindOrHTTP reads the empty kind (webhooks made before kinds) as http.
func kindOrHTTP(k store.WebhookKind) store.WebhookKind {
	if k == "" {
		return store.WebhookHTTP
	}
	return k
}

// GetWebhook reads a tenant's webhook.
func (s *Store) GetWebhook(ctx context.Context, tenant, id string) (store.Webhook, error) {
	w, err := scanWebhook(s.r.QueryRowContext(ctx, `SELECT `+webhookCols+` FROM webhooks WHERE tenant = ? AND id = ?`, tenant, id))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Webhook{}, fmt.Errorf("webhook %s/%s: %w", tenant, id, store.ErrNotFound)
	}
	if err != nil {
		return store.Webhook{}, mapErr(fmt.Errorf("get webhook %s/%s: %w", tenant, id, err))
	}
	return w, nil
}

// ListWebhooks lists a tenant's webhooks ordered by id.
func (s *Store) ListWebhooks(ctx context.Context, tenant string) ([]store.Webhook, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+webhookCols+` FROM webhooks WHERE tenant = ? ORDER BY id`, tenant)
	if err != nil {
		return nil, mapErr(fmt.Errorf("list webhooks: %w", err))
	}
	defer rows.Close()
	var out []store.Webhook
	for rows.Next() {
		w, err := scanWebhook(rows)
		if err != nil {
			return nil, mapErr(fmt.Errorf("list webhooks: %w", err))
		}
		out = append(out, w)
	}
	if err := rows.Err(); err != nil {
		return nil, mapErr(fmt.Errorf("list webhooks: %w", err))
	}
	return out, nil
}

// DeleteWebhook removes a webhook (ErrNotFound if there is none).
func (s *Store) DeleteWebhook(ctx context.Context, tenant, id string) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		r, err := tx.ExecContext(ctx, `DELETE FROM webhooks WHERE tenant = ? AND id = ?`, tenant, id)
		if err != nil {
			return fmt.Errorf("delete webhook %s/%s: %w", tenant, id, err)
		}
		if n, err := r.RowsAffected(); err != nil {
			return fmt.Errorf("delete webhook %s/%s: %w", tenant, id, err)
		} else if n == 0 {
			return fmt.Errorf("webhook %s/%s: %w", tenant, id, store.ErrNotFound)
		}
		return nil
	})
}

const deliveryCols = `tenant, webhook_id, id, event_id, event_type, body, status, attempts, next_at,
last_status, last_error, last_at, delivered_at, created_at, version`

func scanDelivery(row interface{ Scan(...any) error }) (store.Delivery, error) {
	var (
		d                              store.Delivery
		status                         string
		next, last, delivered, created int64
	)
	err := row.Scan(&d.Tenant, &d.WebhookID, &d.ID, &d.EventID, &d.EventType, &d.Body, &status, &d.Attempts, &next,
		&d.LastStatus, &d.LastError, &last, &delivered, &created, &d.Version)
	if err != nil {
		return d, err
	}
	d.Status = store.DeliveryStatus(status)
	d.NextAttemptAt, d.LastAttemptAt, d.DeliveredAt, d.CreatedAt = fromNanos(next), fromNanos(last), fromNanos(delivered), fromNanos(created)
	return d, nil
}

func checkDelivery(d store.Delivery) error {
	if d.Tenant == "" || d.WebhookID == "" || d.ID == "" {
		return fmt.Errorf("delivery: %w: empty tenant, webhook or id", store.ErrInvalidArgument)
	}
	switch d.Status {
	case store.DeliveryPending, store.DeliveryDelivered, store.DeliveryFailed:
	default:
		return fmt.Errorf("delivery %s: %w: status %q", d.ID, store.ErrInvalidArgument, d.Status)
	}
	if d.Attempts < 0 {
		return fmt.Errorf("delivery %s: %w: negative attempts", d.ID, store.ErrInvalidArgument)
	}
	return nil
}

// AddDeliveries inserts deliveries, leaving any already stored as they are.
func (s *Store) AddDeliveries(ctx context.Context, ds []store.Delivery) error {
	for _, d := range ds {
		if err := checkDelivery(d); err != nil {
			return err
		}
	}
	if len(ds) == 0 {
		return nil
	}
	return s.write(ctx, func(tx *sql.Tx) error {
		for _, d := range ds {
			_, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO webhook_deliveries (`+deliveryCols+`)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0)`,
				d.Tenant, d.WebhookID, d.ID, d.EventID, d.EventType, nonNil(d.Body), string(d.Status), d.Attempts, toNanos(d.NextAttemptAt),
				d.LastStatus, d.LastError, toNanos(d.LastAttemptAt), toNanos(d.DeliveredAt), toNanos(d.CreatedAt))
			if err != nil {
				return fmt.Errorf("add delivery %s: %w", d.ID, err)
			}
		}
		return nil
	})
}

func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// GetDelivery reads one delivery.
func (s *Store) GetDelivery(ctx context.Context, tenant, webhookID, id string) (store.Delivery, error) {
	d, err := scanDelivery(s.r.QueryRowContext(ctx, `SELECT `+deliveryCols+` FROM webhook_deliveries
WHERE tenant = ? AND webhook_id = ? AND id = ?`, tenant, webhookID, id))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Delivery{}, fmt.Errorf("delivery %s/%s/%s: %w", tenant, webhookID, id, store.ErrNotFound)
	}
	if err != nil {
		return store.Delivery{}, mapErr(fmt.Errorf("get delivery %s: %w", id, err))
	}
	return d, nil
}

func (s *Store) queryDeliveries(ctx context.Context, what, q string, args ...any) ([]store.Delivery, error) {
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, mapErr(fmt.Errorf("%s: %w", what, err))
	}
	defer rows.Close()
	var out []store.Delivery
	for rows.Next() {
		d, err := scanDelivery(rows)
		if err != nil {
			return nil, mapErr(fmt.Errorf("%s: %w", what, err))
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, mapErr(fmt.Errorf("%s: %w", what, err))
	}
	return out, nil
}

// ListDeliveries lists a webhook's deliveries, newest (highest id) first.
func (s *Store) ListDeliveries(ctx context.Context, p store.ListDeliveriesParams) ([]store.Delivery, error) {
	if p.Limit <= 0 {
		return nil, fmt.Errorf("list deliveries: %w: limit %d", store.ErrInvalidArgument, p.Limit)
	}
	if p.Before == "" {
		return s.queryDeliveries(ctx, "list deliveries", `SELECT `+deliveryCols+` FROM webhook_deliveries
WHERE tenant = ? AND webhook_id = ? ORDER BY id DESC LIMIT ?`, p.Tenant, p.WebhookID, p.Limit)
	}
	return s.queryDeliveries(ctx, "list deliveries", `SELECT `+deliveryCols+` FROM webhook_deliveries
WHERE tenant = ? AND webhook_id = ? AND id < ? ORDER BY id DESC LIMIT ?`, p.Tenant, p.WebhookID, p.Before, p.Limit)
}

// DueDeliveries lists pending deliveries due at p.Now, earliest first.
func (s *Store) DueDeliveries(ctx context.Context, p store.DueDeliveriesParams) ([]store.Delivery, error) {
	if p.Limit <= 0 {
		return nil, fmt.Errorf("due deliveries: %w: limit %d", store.ErrInvalidArgument, p.Limit)
	}
	return s.queryDeliveries(ctx, "due deliveries", `SELECT `+deliveryCols+` FROM webhook_deliveries
WHERE status = 'pending' AND next_at <= ? ORDER BY next_at, tenant, webhook_id, id LIMIT ?`, toNanos(p.Now), p.Limit)
}

// UpdateDelivery writes a delivery's mutable fields on condition of its
// version.
func (s *Store) UpdateDelivery(ctx context.Context, d store.Delivery) (store.Delivery, error) {
	if err := checkDelivery(d); err != nil {
		return store.Delivery{}, err
	}
	var out store.Delivery
	err := s.write(ctx, func(tx *sql.Tx) error {
		r, err := tx.ExecContext(ctx, `UPDATE webhook_deliveries SET status = ?, attempts = ?, next_at = ?, last_status = ?,
last_error = ?, last_at = ?, delivered_at = ?, version = version + 1
WHERE tenant = ? AND webhook_id = ? AND id = ? AND version = ?`,
			string(d.Status), d.Attempts, toNanos(d.NextAttemptAt), d.LastStatus, d.LastError, toNanos(d.LastAttemptAt),
			toNanos(d.DeliveredAt), d.Tenant, d.WebhookID, d.ID, d.Version)
		if err != nil {
			return fmt.Errorf("update delivery %s: %w", d.ID, err)
		}
		n, err := r.RowsAffected()
		if err != nil {
			return fmt.Errorf("update delivery %s: %w", d.ID, err)
		}
		out, err = scanDelivery(tx.QueryRowContext(ctx, `SELECT `+deliveryCols+` FROM webhook_deliveries
WHERE tenant = ? AND webhook_id = ? AND id = ?`, d.Tenant, d.WebhookID, d.ID))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("delivery %s: %w", d.ID, store.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("update delivery %s: %w", d.ID, err)
		}
		if n == 0 {
			return fmt.Errorf("delivery %s: version %d is stale (now %d): %w", d.ID, d.Version, out.Version, store.ErrConflict)
		}
		return nil
	})
	if err != nil {
		return store.Delivery{}, err
	}
	return out, nil
}
