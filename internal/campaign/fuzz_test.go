package campaign_test

import (
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/campaign"
)

// FuzzSchedule parses arbitrary schedule expressions: ParseSchedule never
// panics; a parsed schedule keeps its expression, and its next firing
// after a time is later than it (or never), on a whole minute.
func FuzzSchedule(f *testing.F) {
	for _, s := range []string{
		"rate(5 minutes)", "rate(1 hour)", "rate(0 days)", "rate(-1 minutes)",
		"cron(0 9 ? * MON *)", "cron(*/15 * * * ? *)", "cron(0 0 L * ? 2030)", "cron(0 12 ? * MON-FRI#2 *)",
		"cron(60 25 32 13 ? 1969)", "cron(0/0 * * * ? *)", "cron(", "rate(", "", "cron(0 9 1,15 JAN,JUL ? 2025-2099/2)",
	} {
		f.Add(s)
	}
	from := time.Date(2025, 3, 1, 9, 0, 30, 0, time.UTC)
	f.Fuzz(func(t *testing.T, expr string) {
		s, err := campaign.ParseSchedule(expr)
		if err != nil {
			return
		}
		if s.String() != expr {
			t.Fatalf("String() = %q, want %q", s.String(), expr)
		}
		next := s.Next(from)
		if next.IsZero() {
			return
		}
		if !next.After(from) || next.Second() != 0 || next.Nanosecond() != 0 {
			t.Fatalf("%s: Next(%v) = %v", expr, from, next)
		}
	})
}
