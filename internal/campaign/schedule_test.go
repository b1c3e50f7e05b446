package campaign_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/campaign"
)

func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

func TestScheduleNext(t *testing.T) {
	tests := []struct {
		expr  string
		after string
		want  []string // successive firings
	}{
		{"rate(1 minute)", "2025-03-01T09:00:30Z", []string{"2025-03-01T09:01:00Z", "2025-03-01T09:02:00Z"}},
		{"rate(5 minutes)", "2025-03-01T09:00:00Z", []string{"2025-03-01T09:05:00Z", "2025-03-01T09:10:00Z"}},
		{"rate(1 hour)", "2025-03-01T09:59:59Z", []string{"2025-03-01T10:00:00Z", "2025-03-01T11:00:00Z"}},
		{"rate(2 days)", "2025-03-01T00:00:00Z", []string{"2025-03-03T00:00:00Z", "2025-03-05T00:00:00Z"}},
		{"cron(0 9 * * ? *)", "2025-03-01T08:00:00Z", []string{"2025-03-01T09:00:00Z", "2025-03-02T09:00:00Z"}},
		{"cron(0 9 * * ? *)", "2025-03-01T09:00:00Z", []string{"2025-03-02T09:00:00Z"}},
		{"cron(15 10 ? * 6L 2025)", "", nil}, // refused below
		// Weekdays at 09:30 (2025-03-01 is a Saturday).
		{"cron(30 9 ? * MON-FRI *)", "2025-03-01T00:00:00Z", []string{"2025-03-03T09:30:00Z", "2025-03-04T09:30:00Z"}},
		{"cron(30 9 ? * 2-6 *)", "2025-03-07T10:00:00Z", []string{"2025-03-10T09:30:00Z"}},
		// Day-of-week wraps: FRI-MON.
		{"cron(0 0 ? * FRI-MON *)", "2025-03-01T12:00:00Z", []string{"2025-03-02T00:00:00Z", "2025-03-03T00:00:00Z", "2025-03-07T00:00:00Z"}},
		{"cron(0/15 * * * ? *)", "2025-03-01T09:07:00Z", []string{"2025-03-01T09:15:00Z", "2025-03-01T09:30:00Z", "2025-03-01T09:45:00Z", "2025-03-01T10:00:00Z"}},
		{"cron(5,35 8-9 * * ? *)", "2025-03-01T08:35:00Z", []string{"2025-03-01T09:05:00Z", "2025-03-01T09:35:00Z", "2025-03-02T08:05:00Z"}},
		{"cron(0 12 1 JAN,jul ? *)", "2025-03-01T00:00:00Z", []string{"2025-07-01T12:00:00Z", "2026-01-01T12:00:00Z"}},
		{"cron(0 0 31 * ? *)", "2025-01-31T00:00:00Z", []string{"2025-03-31T00:00:00Z", "2025-05-31T00:00:00Z"}},
		{"cron(0 0 29 2 ? *)", "2025-01-01T00:00:00Z", []string{"2028-02-29T00:00:00Z"}},
		{"cron(0 10 * * ? 2025-2026)", "2026-12-31T10:00:00Z", []string{""}}, // never again
		{"cron(0 10 1 1 ? 2030/5)", "2025-01-01T00:00:00Z", []string{"2030-01-01T10:00:00Z", "2035-01-01T10:00:00Z"}},
	}
	for _, tt := range tests {
		if tt.want == nil {
			continue
		}
		t.Run(tt.expr, func(t *testing.T) {
			s, err := campaign.ParseSchedule(tt.expr)
			if err != nil {
				t.Fatal(err)
			}
			cur := at(tt.after)
			for _, w := range tt.want {
				got := s.Next(cur)
				if w == "" {
					if !got.IsZero() {
						t.Fatalf("Next(%s) = %s, want never", cur, got)
					}
					return
				}
				if !got.Equal(at(w)) {
					t.Fatalf("Next(%s) = %s, want %s", cur.Format(time.RFC3339), got.Format(time.RFC3339), w)
				}
				cur = got
			}
		})
	}
}

// Cron fields read in a zone, as EventBridge Scheduler reads them with
// ScheduleExpressionTimezone: 09:00 stays 09:00 local across
// daylight-saving changes, a skipped time does not fire that day, a
// repeated one fires once.
func TestScheduleNextInZone(t *testing.T) {
	tests := []struct {
		zone, expr, after string
		want              []string
	}{
		// New York springs forward on 2025-03-09 and falls back on 2025-11-02.
		{"America/New_York", "cron(0 9 * * ? *)", "2025-03-07T15:00:00Z",
			[]string{"2025-03-08T14:00:00Z", "2025-03-09T13:00:00Z", "2025-03-10T13:00:00Z"}},
		{"America/New_York", "cron(0 9 * * ? *)", "2025-10-31T14:00:00Z",
			[]string{"2025-11-01T13:00:00Z", "2025-11-02T14:00:00Z"}},
		{"America/New_York", "cron(30 2 * * ? *)", "2025-03-08T00:00:00Z", // 02:30 does not exist on 03-09
			[]string{"2025-03-08T07:30:00Z", "2025-03-10T06:30:00Z"}},
		{"America/New_York", "cron(30 1 * * ? *)", "2025-11-01T00:00:00Z", // 01:30 happens twice on 11-02
			[]string{"2025-11-01T05:30:00Z", "2025-11-02T05:30:00Z", "2025-11-03T06:30:00Z"}},
		{"America/New_York", "cron(0/30 * * * ? *)", "2025-11-02T05:00:00Z",
			[]string{"2025-11-02T05:30:00Z", "2025-11-02T07:00:00Z", "2025-11-02T07:30:00Z"}},
		{"Asia/Shanghai", "cron(0 9 ? * MON-FRI *)", "2025-03-07T02:00:00Z", // Friday 10:00 in Shanghai
			[]string{"2025-03-10T01:00:00Z", "2025-03-11T01:00:00Z"}},
		{"Asia/Kolkata", "cron(0 0 1 * ? *)", "2025-01-01T00:00:00Z",
			[]string{"2025-01-31T18:30:00Z"}},
		// A rate does not depend on the zone.
		{"Asia/Shanghai", "rate(1 day)", "2025-03-01T12:00:00Z", []string{"2025-03-02T00:00:00Z"}},
	}
	for _, tt := range tests {
		t.Run(tt.zone+" "+tt.expr, func(t *testing.T) {
			loc, err := time.LoadLocation(tt.zone)
			if err != nil {
				t.Fatal(err)
			}
			s := campaign.MustParseSchedule(tt.expr).In(loc)
			cur := at(tt.after)
			for _, w := range tt.want {
				got := s.Next(cur)
				if !got.Equal(at(w)) || got.Location() != time.UTC {
					t.Fatalf("Next(%s) = %s (%s local), want %s", cur.Format(time.RFC3339), got.Format(time.RFC3339), got.In(loc).Format(time.Kitchen), w)
				}
				cur = got
			}
		})
	}
}

func TestScheduleRefused(t *testing.T) {
	for expr, want := range map[string]string{
		"":                            "want",
		"every day":                   "want",
		"rate(0 minutes)":             "positive",
		"rate(-1 minutes)":            "positive",
		"rate(1 minutes)":             "singular",
		"rate(2 hour)":                "plural",
		"rate(5 weeks)":               "unit",
		"rate(5  minutes)":            "one space",
		"rate(05 minutes)":            "positive",
		"cron(0 9 * * *)":             "6 fields",
		"cron(0 9 * * * *)":           "exactly one",
		"cron(0 9 ? * ? *)":           "exactly one",
		"cron(60 9 * * ? *)":          "out of range",
		"cron(0 24 * * ? *)":          "out of range",
		"cron(0 9 L * ? *)":           "not supported",
		"cron(0 9 ? * 6L *)":          "not supported",
		"cron(0 9 ? * 2#1 *)":         "not supported",
		"cron(0 9 15W * ? *)":         "not supported",
		"cron(0 9 * FOO ? *)":         "name",
		"cron(0 9 * * ? 1969)":        "out of range",
		"cron(0 9 * * ? ?)":           "\"?\"",
		"cron(? 9 * * ? *)":           "\"?\"",
		"cron(0/0 9 * * ? *)":         "increment",
		"cron(30-10 9 * * ? *)":       "backwards",
		"cron(0 9 * * ? *) trailing":  "want",
		"cron(0,,5 9 * * ? *)":        "number",
		"cron(0 9 1-+3 * ? *)":        "number",
		"cron(0 9 * 1-12/13 ? *)":     "increment",
		"cron(0 9 * * ? 2025-2200)":   "out of range",
		"CRON(0 9 * * ? *)":           "want",
		"rate(1000001 minutes)":       "positive",
		"rate(9999999999999 minutes)": "positive",
	} {
		_, err := campaign.ParseSchedule(expr)
		if err == nil {
			t.Errorf("%q accepted", expr)
			continue
		}
		if !errors.Is(err, campaign.ErrSchedule) || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %q, want ErrSchedule mentioning %q", expr, err, want)
		}
	}
}

func TestScheduleFirings(t *testing.T) {
	s := campaign.MustParseSchedule("rate(1 hour)")
	got, total := s.Firings(at("2025-03-01T00:30:00Z"), at("2025-03-01T05:00:00Z"), 3)
	if total != 5 || len(got) != 3 || !got[0].Equal(at("2025-03-01T03:00:00Z")) || !got[2].Equal(at("2025-03-01T05:00:00Z")) {
		t.Errorf("rate firings %v (total %d)", got, total)
	}
	c := campaign.MustParseSchedule("cron(0 * * * ? *)")
	got2, total2 := c.Firings(at("2025-03-01T00:30:00Z"), at("2025-03-01T05:00:00Z"), 3)
	if total2 != total || len(got2) != 3 || !got2[0].Equal(got[0]) || !got2[2].Equal(got[2]) {
		t.Errorf("cron firings %v (total %d), want %v (total %d)", got2, total2, got, total)
	}
	if f, n := s.Firings(at("2025-03-01T00:30:00Z"), at("2025-03-01T00:59:00Z"), 3); n != 0 || f != nil {
		t.Errorf("no firing due: %v %d", f, n)
	}
}

// FuzzParseSchedule: the parser never panics, and whatever it accepts
// gives increasing firings that Next agrees with.
func FuzzParseSchedule(f *testing.F) {
	for _, seed := range []string{
		"rate(1 minute)", "rate(7 days)", "cron(0 9 * * ? *)", "cron(0/15 8-18 ? * MON-FRI 2025-2030)",
		"cron(0 0 ? * FRI-MON *)", "cron(5,35 * 1,15 JAN-DEC ? *)", "cron(0 9 L * ? *)", "cron(0 0 29 2 ? 2199)",
	} {
		f.Add(seed)
	}
	start := at("2025-03-01T09:00:00Z")
	f.Fuzz(func(t *testing.T, expr string) {
		s, err := campaign.ParseSchedule(expr)
		if err != nil {
			if !errors.Is(err, campaign.ErrSchedule) {
				t.Fatalf("%q: error %v is not ErrSchedule", expr, err)
			}
			return
		}
		if s.String() != expr {
			t.Fatalf("String() = %q, want %q", s.String(), expr)
		}
		prev := start
		for range 3 {
			next := s.Next(prev)
			if next.IsZero() {
				return
			}
			if !next.After(prev) || next.Second() != 0 || next.Location() != time.UTC {
				t.Fatalf("%q: Next(%s) = %s", expr, prev, next)
			}
			if got, n := s.Firings(prev, next, 1); n != 1 || !got[0].Equal(next) {
				t.Fatalf("%q: Firings(%s, %s] = %v (%d), want just %s", expr, prev, next, got, n, next)
			}
			prev = next
		}
	})
}
