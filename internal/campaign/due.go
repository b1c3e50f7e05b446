package campaign

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/qunfa/qunfa/internal/alert"
	"github.com/qunfa/qunfa/internal/store"
)

// maxMissedAlerts bounds the CampaignSkipped alerts for the missed firings
// of one campaign at one time (the rest are only counted in the log).
const maxMissedAlerts = 10

// DueFiring is a campaign with a firing due.
type DueFiring struct {
	Campaign store.Campaign
	// ScheduledAt is the latest firing due: the one to fire.
	ScheduledAt time.Time
	// Missed are the earlier firings due since the last one handled (the
	// latest maxMissedAlerts of them, oldest first); MissedTotal counts
	// them all. They are not fired: only the latest is.
	Missed      []time.Time
	MissedTotal int
}

// Due lists the enabled campaigns (of every tenant) whose schedule fired
// after their LastFiredAt (or their creation) and at or before now: the
// local runtime's stand-in for EventBridge Scheduler. Cron schedules are
// read in the campaign's time zone (Zone when it names none). A campaign
// whose stored schedule or zone no longer parses is logged and left out.
func (c *Campaigns) Due(ctx context.Context, now time.Time) ([]DueFiring, error) {
	all, err := c.Store.ListCampaigns(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("list campaigns: %w", err)
	}
	var due []DueFiring
	for _, cmp := range all {
		if !cmp.Enabled {
			continue
		}
		sched, err := ScheduleOf(cmp, c.Zone)
		if err != nil {
			c.log().Error("campaign has an invalid schedule", slog.String("tenant", cmp.Tenant), slog.String("campaign", cmp.ID), slog.Any("err", err))
			continue
		}
		since := cmp.CreatedAt
		if cmp.LastFiredAt.After(since) {
			since = cmp.LastFiredAt
		}
		firings, total := sched.Firings(since, now, maxMissedAlerts+1)
		if total == 0 {
			continue
		}
		due = append(due, DueFiring{
			Campaign: cmp, ScheduledAt: firings[len(firings)-1],
			Missed: firings[:len(firings)-1], MissedTotal: total - 1,
		})
	}
	return due, nil
}

// RetryFailedAfter is how long FireDue waits before it tries a failed
// firing again (EventBridge, for its part, retries a failed invocation
// twice within minutes).
const RetryFailedAfter = time.Minute

// DueReport says what FireDue did.
type DueReport struct {
	Fired   int // firings that made (or found) a job
	Skipped int // firings skipped (late, disabled, duplicates) and missed ones
	Failed  int
}

// FireDue fires every due campaign's latest firing (Due) and skips the
// missed earlier ones — with a CampaignSkipped alert each when they are
// later than the campaign's MaxDelaySec. One campaign's failure does not
// keep the others from firing; the failures are joined. A failed firing
// is tried again after RetryFailedAfter.
func (c *Campaigns) FireDue(ctx context.Context) (DueReport, error) {
	var rep DueReport
	now := c.Clock.Now()
	due, err := c.Due(ctx, now)
	if err != nil {
		return rep, err
	}
	var errs []error
	for _, d := range due {
		cmp := d.Campaign
		if d.MissedTotal > 0 {
			rep.Skipped += d.MissedTotal
			var events []alert.Event
			for _, at := range d.Missed {
				if cmp.MaxDelaySec > 0 && now.Sub(at) > time.Duration(cmp.MaxDelaySec)*time.Second {
					events = append(events, alert.Event{Type: alert.CampaignSkipped, Tenant: cmp.Tenant, Time: now,
						Detail: alert.CampaignSkippedDetail{CampaignID: cmp.ID, ScheduledAt: at, StartedAt: now, MaxDelaySec: cmp.MaxDelaySec}})
				}
			}
			c.log().Warn("campaign firings missed; only the latest fires", slog.String("tenant", cmp.Tenant),
				slog.String("campaign", cmp.ID), slog.Int("missed", d.MissedTotal), slog.Time("latest", d.ScheduledAt))
			alert.Emit(ctx, c.Alerts, c.log(), events...)
		}
		fk := cmp.Tenant + "\x00" + cmp.ID + "\x00" + d.ScheduledAt.Format(time.RFC3339)
		c.mu.Lock()
		retryAt, failed := c.retryAt[fk]
		c.mu.Unlock()
		if failed && now.Before(retryAt) {
			continue
		}
		res, err := c.Fire(ctx, cmp.Tenant, cmp.ID, d.ScheduledAt)
		c.mu.Lock()
		delete(c.retryAt, fk)
		if err != nil {
			if c.retryAt == nil {
				c.retryAt = map[string]time.Time{}
			}
			c.retryAt[fk] = now.Add(RetryFailedAfter)
		}
		c.mu.Unlock()
		switch {
		case errors.Is(err, store.ErrNotFound): // deleted meanwhile
		case err != nil:
			rep.Failed++
			errs = append(errs, err)
			c.log().Error("campaign firing failed", slog.String("tenant", cmp.Tenant), slog.String("campaign", cmp.ID),
				slog.Time("scheduled_at", d.ScheduledAt), slog.Any("err", err))
		case res.Outcome == Fired:
			rep.Fired++
		default:
			rep.Skipped++
		}
	}
	return rep, errors.Join(errs...)
}
