package store

import (
	"context"
	"time"
)

// SeriesStore keeps counters per minute under a key: what the sender and
// the reconciler did in each minute (sends, confirmations, new failures
// by category), per job and per account, so charts of progress and
// failures over time come from the server and survive a reload. It is a
// port of its own beside Store; both adapters implement it and storetest
// proves them. The counters are written by the storeseries decorator,
// coalesced, so they cost a few writes a minute, not one per batch.
type SeriesStore interface {
	// AddSeries adds p.Counts to the counters of p.Key for the minute
	// containing p.Minute (creating them at zero). Counters only grow or
	// shrink by what is added; adding the same counts twice counts twice.
	AddSeries(ctx context.Context, p AddSeriesParams) error
	// ListSeries returns p.Key's minutes in [From, To), oldest first, at
	// most MaxSeriesMinutes of them; minutes with no counters are left
	// out.
	ListSeries(ctx context.Context, p ListSeriesParams) ([]SeriesPoint, error)
}

// MaxSeriesMinutes is the longest span ListSeries answers for (a day).
const MaxSeriesMinutes = 24 * 60

// Series counter names (besides failure categories, which count new
// failures of that category under their own name).
const (
	// SeriesSent counts provider attempts (each recipient of a call).
	SeriesSent = "sent"
	// SeriesConfirmed counts items that became confirmed.
	SeriesConfirmed = "confirmed"
)

// AddSeriesParams adds counts to one minute of a series.
type AddSeriesParams struct {
	Key    string
	Minute time.Time // any instant of the minute
	Counts map[string]int64
}

// ListSeriesParams selects minutes of a series.
type ListSeriesParams struct {
	Key      string
	From, To time.Time
}

// SeriesPoint is one minute of a series.
type SeriesPoint struct {
	Minute time.Time // the minute's start, UTC
	Counts map[string]int64
}

// JobSeriesKey is the series key of a job.
func JobSeriesKey(jobID string) string { return "job:" + jobID }

// AccountSeriesKey is the series key of a tenant's account.
func AccountSeriesKey(tenant, account string) string { return "acct:" + tenant + "/" + account }
