package api

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/submit"
)

// Series spans: the default and the longest a "minutes" parameter may ask.
const (
	defaultJobSeriesMinutes     = 60
	defaultAccountSeriesMinutes = 15
)

// SeriesPoint is one minute of a series: provider attempts ("sent"),
// items confirmed, and new failures by category in that minute.
type SeriesPoint struct {
	At        time.Time        `json:"at"`
	Sent      int64            `json:"sent"`
	Confirmed int64            `json:"confirmed"`
	Failures  map[string]int64 `json:"failures"`
}

// JobSeries is the answer of GET /v1/jobs/{id}/series: the job's minutes
// in [from, to) that saw activity, oldest first.
type JobSeries struct {
	JobID  string        `json:"job_id"`
	From   time.Time     `json:"from"`
	To     time.Time     `json:"to"`
	Points []SeriesPoint `json:"points"`
}

// AccountSeries is the answer of GET /v1/accounts/{account}/series: the
// account's sends per minute across the tenant's jobs, with the batch rate
// they are held to.
type AccountSeries struct {
	Account         string        `json:"account"`
	BatchRatePerSec float64       `json:"batch_rate_per_sec"`
	From            time.Time     `json:"from"`
	To              time.Time     `json:"to"`
	Points          []SeriesPoint `json:"points"`
}

// seriesSpan reads the optional "minutes" parameter and returns [from, to):
// the last minutes whole minutes and the current one.
func (s *server) seriesSpan(q url.Values, def int) (time.Time, time.Time, *Problem) {
	n := def
	if raw := q.Get("minutes"); raw != "" {
		v, err := strconv.Atoi(raw)
		if err != nil || v < 1 || v > store.MaxSeriesMinutes {
			return time.Time{}, time.Time{}, newProblem(http.StatusBadRequest, kindBadRequest, "invalid query parameters",
				submit.FieldError{Field: "minutes", Message: fmt.Sprintf("must be an integer from 1 to %d", store.MaxSeriesMinutes)})
		}
		n = v
	}
	to := s.Clock.Now().UTC().Truncate(time.Minute).Add(time.Minute)
	return to.Add(-time.Duration(n) * time.Minute), to, nil
}

func (s *server) readSeries(r *http.Request, key string, from, to time.Time) ([]SeriesPoint, *Problem) {
	out := []SeriesPoint{}
	if s.Series == nil {
		return out, nil
	}
	pts, err := s.Series.ListSeries(r.Context(), store.ListSeriesParams{Key: key, From: from, To: to})
	if err != nil {
		return nil, s.internal(r, "read the series", err)
	}
	for _, p := range pts {
		sp := SeriesPoint{At: p.Minute.UTC(), Failures: map[string]int64{}}
		for k, n := range p.Counts {
			switch k {
			case store.SeriesSent:
				sp.Sent = n
			case store.SeriesConfirmed:
				sp.Confirmed = n
			default:
				sp.Failures[k] = n
			}
		}
		out = append(out, sp)
	}
	return out, nil
}

func (s *server) jobSeries(w http.ResponseWriter, r *http.Request, tenant string) *Problem {
	v, p := s.tenantJob(r.Context(), r, tenant)
	if p != nil {
		return p
	}
	from, to, p := s.seriesSpan(r.URL.Query(), defaultJobSeriesMinutes)
	if p != nil {
		return p
	}
	pts, p := s.readSeries(r, store.JobSeriesKey(v.Job.ID), from, to)
	if p != nil {
		return p
	}
	writeJSON(w, http.StatusOK, JobSeries{JobID: v.Job.ID, From: from, To: to, Points: pts})
	return nil
}

func (s *server) accountSeries(w http.ResponseWriter, r *http.Request, tenant string) *Problem {
	a, err := s.Store.GetAccount(r.Context(), tenant, r.PathValue("account"))
	if err != nil {
		return s.storeProblem(r, "account", err)
	}
	from, to, p := s.seriesSpan(r.URL.Query(), defaultAccountSeriesMinutes)
	if p != nil {
		return p
	}
	pts, p := s.readSeries(r, store.AccountSeriesKey(tenant, a.ID), from, to)
	if p != nil {
		return p
	}
	writeJSON(w, http.StatusOK, AccountSeries{Account: a.ID, BatchRatePerSec: a.BatchRate(), From: from, To: to, Points: pts})
	return nil
}
