package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/qunfa/qunfa/internal/store"
)

var _ store.SeriesStore = (*Store)(nil)

// seriesSchema holds per-minute counters: schema version 7
// (migrations[7]), one row per key, minute and counter name.
const seriesSchema = `
CREATE TABLE series (
	key     TEXT NOT NULL,
	minute  INTEGER NOT NULL,
	name    TEXT NOT NULL,
	n       INTEGER NOT NULL,
	PRIMARY KEY (key, minute, name)
) WITHOUT ROWID;
`

// AddSeries adds counts to one minute of a series.
func (s *Store) AddSeries(ctx context.Context, p store.AddSeriesParams) error {
	return s.AddSeriesMany(ctx, []store.AddSeriesParams{p})
}

// AddSeriesMany adds the counts of several series in one write
// transaction: a flush of every busy job's and account's series costs the
// single writer one turn, not one per series.
func (s *Store) AddSeriesMany(ctx context.Context, ps []store.AddSeriesParams) error {
	for _, p := range ps {
		if p.Key == "" {
			return fmt.Errorf("add series: %w: empty key", store.ErrInvalidArgument)
		}
	}
	return s.write(ctx, func(tx *sql.Tx) error {
		for _, p := range ps {
			minute := p.Minute.Unix() - p.Minute.Unix()%60
			for name, n := range p.Counts {
				if name == "" || n == 0 {
					continue
				}
				if _, err := tx.ExecContext(ctx, `INSERT INTO series (key, minute, name, n) VALUES (?, ?, ?, ?)
ON CONFLICT (key, minute, name) DO UPDATE SET n = n + excluded.n`, p.Key, minute, name, n); err != nil {
					return fmt.Errorf("add series %s: %w", p.Key, err)
				}
			}
		}
		return nil
	})
}

// ListSeries reads the minutes of a series in [From, To).
func (s *Store) ListSeries(ctx context.Context, p store.ListSeriesParams) ([]store.SeriesPoint, error) {
	from, to := p.From.Unix(), p.To.Unix()
	if p.Key == "" || to < from || to-from > store.MaxSeriesMinutes*60+60 {
		return nil, fmt.Errorf("list series: %w: a key and at most %d minutes are required", store.ErrInvalidArgument, store.MaxSeriesMinutes)
	}
	from -= ((from % 60) + 60) % 60 // the minute containing From
	rows, err := s.r.QueryContext(ctx, `SELECT minute, name, n FROM series WHERE key = ? AND minute >= ? AND minute < ? ORDER BY minute`,
		p.Key, from, to)
	if err != nil {
		return nil, mapErr(fmt.Errorf("list series %s: %w", p.Key, err))
	}
	defer rows.Close()
	var out []store.SeriesPoint
	for rows.Next() {
		var (
			minute, n int64
			name      string
		)
		if err := rows.Scan(&minute, &name, &n); err != nil {
			return nil, mapErr(fmt.Errorf("list series %s: %w", p.Key, err))
		}
		if len(out) == 0 || out[len(out)-1].Minute.Unix() != minute {
			out = append(out, store.SeriesPoint{Minute: time.Unix(minute, 0).UTC(), Counts: map[string]int64{}})
		}
		if n != 0 {
			out[len(out)-1].Counts[name] = n
		}
	}
	if err := rows.Err(); err != nil {
		return nil, mapErr(fmt.Errorf("list series %s: %w", p.Key, err))
	}
	return out, nil
}
