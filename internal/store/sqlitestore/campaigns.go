package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/qunfa/qunfa/internal/store"
)

const campaignCols = `tenant, id, name, schedule, mode, request, source, max_delay_sec, enabled,
last_fired_at, created_by, created_at, updated_at, timezone`

func scanCampaign(row interface{ Scan(...any) error }) (store.Campaign, error) {
	var (
		c                           store.Campaign
		enabled                     int
		lastFired, created, updated int64
	)
	err := row.Scan(&c.Tenant, &c.ID, &c.Name, &c.Schedule, &c.Mode, &c.Request, &c.Source, &c.MaxDelaySec,
		&enabled, &lastFired, &c.CreatedBy, &created, &updated, &c.Timezone)
	if err != nil {
		return c, err
	}
	c.Enabled = enabled != 0
	c.LastFiredAt, c.CreatedAt, c.UpdatedAt = fromNanos(lastFired), fromNanos(created), fromNanos(updated)
	return c, nil
}

// PutCampaign creates or replaces a tenant's campaign.
func (s *Store) PutCampaign(ctx context.Context, c store.Campaign) (store.Campaign, error) {
	if c.Tenant == "" || c.ID == "" {
		return store.Campaign{}, fmt.Errorf("put campaign: %w: empty tenant or id", store.ErrInvalidArgument)
	}
	if c.MaxDelaySec < 0 {
		return store.Campaign{}, fmt.Errorf("put campaign %q: %w: negative max delay", c.ID, store.ErrInvalidArgument)
	}
	c.LastFiredAt = fromNanos(toNanos(c.LastFiredAt))
	c.CreatedAt = fromNanos(toNanos(c.CreatedAt))
	c.UpdatedAt = fromNanos(toNanos(c.UpdatedAt))
	enabled := 0
	if c.Enabled {
		enabled = 1
	}
	var request any
	if len(c.Request) > 0 {
		request = c.Request
	}
	err := s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT OR REPLACE INTO campaigns (`+campaignCols+`)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			c.Tenant, c.ID, c.Name, c.Schedule, c.Mode, request, c.Source, c.MaxDelaySec, enabled,
			toNanos(c.LastFiredAt), c.CreatedBy, toNanos(c.CreatedAt), toNanos(c.UpdatedAt), c.Timezone)
		if err != nil {
			return fmt.Errorf("put campaign %s/%s: %w", c.Tenant, c.ID, err)
		}
		return nil
	})
	if err != nil {
		return store.Campaign{}, err
	}
	return c, nil
}

// GetCampaign reads a tenant's campaign.
func (s *Store) GetCampaign(ctx context.Context, tenant, id string) (store.Campaign, error) {
	c, err := scanCampaign(s.r.QueryRowContext(ctx,
		`SELECT `+campaignCols+` FROM campaigns WHERE tenant = ? AND id = ?`, tenant, id))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Campaign{}, fmt.Errorf("campaign %s/%s: %w", tenant, id, store.ErrNotFound)
	}
	if err != nil {
		return store.Campaign{}, mapErr(fmt.Errorf("get campaign %s/%s: %w", tenant, id, err))
	}
	return c, nil
}

// ListCampaigns lists a tenant's campaigns ordered by id, or all tenants'
// (ordered by tenant, then id) when tenant is empty.
func (s *Store) ListCampaigns(ctx context.Context, tenant string) ([]store.Campaign, error) {
	q, args := `SELECT `+campaignCols+` FROM campaigns WHERE tenant = ? ORDER BY id`, []any{tenant}
	if tenant == "" {
		q, args = `SELECT `+campaignCols+` FROM campaigns ORDER BY tenant, id`, nil
	}
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, mapErr(fmt.Errorf("list campaigns: %w", err))
	}
	defer rows.Close()
	var out []store.Campaign
	for rows.Next() {
		c, err := scanCampaign(rows)
		if err != nil {
			return nil, mapErr(fmt.Errorf("list campaigns: %w", err))
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, mapErr(fmt.Errorf("list campaigns: %w", err))
	}
	return out, nil
}

// DeleteCampaign removes a campaign (ErrNotFound if there is none).
func (s *Store) DeleteCampaign(ctx context.Context, tenant, id string) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		r, err := tx.ExecContext(ctx, `DELETE FROM campaigns WHERE tenant = ? AND id = ?`, tenant, id)
		if err != nil {
			return fmt.Errorf("delete campaign %s/%s: %w", tenant, id, err)
		}
		if n, err := r.RowsAffected(); err != nil {
			return fmt.Errorf("delete campaign %s/%s: %w", tenant, id, err)
		} else if n == 0 {
			return fmt.Errorf("campaign %s/%s: %w", tenant, id, store.ErrNotFound)
		}
		return nil
	})
}
