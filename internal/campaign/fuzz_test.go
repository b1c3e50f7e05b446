package campaign_test

import (
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/campaign"
)

// FuzzSchedule parses arbitrary schedule expressions: ParseSchedule never
// panics; a parsed schedule keeps its expression, and its next firing
// after a time is later than it (or never), on a whole minute — in UTC,
// and read in zones with daylight-saving changes and half-hour offsets,
// from the night New York falls back.
func FuzzSchedule(f *testing.F) {
	for _, s := range []string{
		"rate(5 minutes)", "rate(1 hour)", "rate(0 days)", "rate(-1 minutes)",
		"cron(0 9 ? * MON *)", "cron(*/15 * * * ? *)", "cron(0 0 L * ? 2030)", "cron(0 12 ? * MON-FRI#2 *)",
		"cron(60 25 32 13 ? 1969)", "cron(0/0 * * * ? *)", "cron(", "rate(", "", "cron(0 9 1,15 JAN,JUL ? 2025-2099/2)",
	} {
		f.Add(s)
	}
	var zones []*time.Location
	for _, name := range []string{"UTC", "America/New_York", "Asia/Kolkata", "Australia/Lord_Howe"} {
		loc, err := time.LoadLocation(name)
		if err != nil {
			f.Fatal(err)
		}
		zones = append(zones, loc)
	}
	froms := []time.Time{time.Date(2025, 3, 1, 9, 0, 30, 0, time.UTC), time.Date(2025, 11, 2, 5, 0, 30, 0, time.UTC)}
	f.Fuzz(func(t *testing.T, expr string) {
		s, err := campaign.ParseSchedule(expr)
		if err != nil {
			return
		}
		if s.String() != expr {
			t.Fatalf("String() = %q, want %q", s.String(), expr)
		}
		for _, loc := range zones {
			for _, from := range froms {
				next := s.In(loc).Next(from)
				if next.IsZero() {
					continue
				}
				if !next.After(from) || next.Second() != 0 || next.Nanosecond() != 0 {
					t.Fatalf("%s in %s: Next(%v) = %v", expr, loc, from, next)
				}
			}
		}
	})
}
