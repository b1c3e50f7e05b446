package campaign

import (
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"time"
)

// Schedule is a parsed EventBridge schedule expression: "rate(N unit)" or
// "cron(minutes hours day-of-month month day-of-week year)", evaluated in
// UTC, or in the zone given by In as EventBridge Scheduler evaluates a
// schedule with a time zone.
//
// Supported in cron fields: numbers, names (JAN–DEC, SUN–SAT), "*", "?",
// lists ",", ranges "-" and increments "/". EventBridge's "L", "W" and "#"
// are refused with an error. As in EventBridge, exactly one of
// day-of-month and day-of-week must be "?", and day-of-week counts 1 = SUN
// to 7 = SAT.
//
// A rate has no start time in its expression: EventBridge counts it from
// the rule's creation; the local runtime counts it from the Unix epoch (so
// rate(1 hour) fires on the hour, rate(1 day) at 00:00 UTC).
type Schedule struct {
	expr string
	// rate > 0 for a rate expression.
	rate time.Duration
	// cron fields as bit sets: minute bits 0–59, hour 0–23, dom 1–31,
	// month 1–12, dow 1–7 (1 = Sunday); years 1970–2199 in yearBits.
	minute, hour, dom, month, dow uint64
	domAny, dowAny                bool // the field is "?" (no restriction)
	years                         [4]uint64
	// loc is the zone of the cron fields (nil: UTC); see In.
	loc *time.Location
}

// Limits of the expressions EventBridge accepts.
const (
	minYear = 1970
	maxYear = 2199
	// maxRate bounds a rate's value (EventBridge refuses absurd ones; a
	// bound also keeps the duration from overflowing).
	maxRate = 1_000_000
)

// ErrSchedule marks every schedule parse error.
var ErrSchedule = errors.New("invalid schedule expression")

func scheduleErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrSchedule, fmt.Sprintf(format, args...))
}

// ParseSchedule parses an EventBridge schedule expression.
func ParseSchedule(expr string) (Schedule, error) {
	switch {
	case strings.HasPrefix(expr, "rate(") && strings.HasSuffix(expr, ")"):
		return parseRate(expr)
	case strings.HasPrefix(expr, "cron(") && strings.HasSuffix(expr, ")"):
		return parseCron(expr)
	}
	return Schedule{}, scheduleErr(`%q: want "rate(N unit)" or "cron(min hour day-of-month month day-of-week year)"`, clip(expr))
}

// MustParseSchedule is ParseSchedule for constant expressions: it panics
// on an error.
func MustParseSchedule(expr string) Schedule {
	s, err := ParseSchedule(expr)
	if err != nil {
		panic(err)
	}
	return s
}

func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

// String is the expression as given.
func (s Schedule) String() string { return s.expr }

// IsZero reports whether s was never parsed.
func (s Schedule) IsZero() bool { return s.expr == "" }

// Rate is the period of a rate expression (0 for cron).
func (s Schedule) Rate() time.Duration { return s.rate }

func parseRate(expr string) (Schedule, error) {
	body := strings.TrimSuffix(strings.TrimPrefix(expr, "rate("), ")")
	num, unit, ok := strings.Cut(body, " ")
	if !ok || strings.Contains(unit, " ") {
		return Schedule{}, scheduleErr(`%q: want "rate(N unit)" with one space, e.g. rate(5 minutes)`, clip(expr))
	}
	n, err := strconv.Atoi(num)
	if err != nil || n <= 0 || n > maxRate || num[0] == '+' || num[0] == '0' {
		return Schedule{}, scheduleErr("%q: the value must be a positive whole number (at most %d)", clip(expr), maxRate)
	}
	var per time.Duration
	switch strings.TrimSuffix(unit, "s") {
	case "minute":
		per = time.Minute
	case "hour":
		per = time.Hour
	case "day":
		per = 24 * time.Hour
	default:
		return Schedule{}, scheduleErr("%q: the unit must be minute(s), hour(s) or day(s)", clip(expr))
	}
	// EventBridge: singular for 1, plural otherwise.
	if plural := strings.HasSuffix(unit, "s"); plural != (n != 1) {
		return Schedule{}, scheduleErr("%q: use the singular unit for 1 and the plural for more (rate(1 hour), rate(2 hours))", clip(expr))
	}
	return Schedule{expr: expr, rate: time.Duration(n) * per}, nil
}

// cronField describes one field of a cron expression.
type cronField struct {
	name     string
	min, max int
	names    []string // names[i] is the value min+i
}

var (
	fieldMinute = cronField{name: "minutes", min: 0, max: 59}
	fieldHour   = cronField{name: "hours", min: 0, max: 23}
	fieldDOM    = cronField{name: "day-of-month", min: 1, max: 31}
	fieldMonth  = cronField{name: "month", min: 1, max: 12,
		names: []string{"JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"}}
	fieldDOW = cronField{name: "day-of-week", min: 1, max: 7,
		names: []string{"SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"}}
	fieldYear = cronField{name: "year", min: minYear, max: maxYear}
)

func parseCron(expr string) (Schedule, error) {
	body := strings.TrimSuffix(strings.TrimPrefix(expr, "cron("), ")")
	f := strings.Fields(body)
	if len(f) != 6 {
		return Schedule{}, scheduleErr("%q: cron needs 6 fields (minutes hours day-of-month month day-of-week year), got %d", clip(expr), len(f))
	}
	s := Schedule{expr: expr}
	var errs []error
	set := func(dst *uint64, field cronField, v string, allowAny bool) bool {
		if v == "?" {
			if !allowAny {
				errs = append(errs, scheduleErr("%s: \"?\" is allowed only in day-of-month and day-of-week", field.name))
			}
			return true
		}
		bitsOf, err := parseField(field, v)
		if err != nil {
			errs = append(errs, err)
			return false
		}
		*dst = bitsOf
		return false
	}
	set(&s.minute, fieldMinute, f[0], false)
	set(&s.hour, fieldHour, f[1], false)
	s.domAny = set(&s.dom, fieldDOM, f[2], true)
	set(&s.month, fieldMonth, f[3], false)
	s.dowAny = set(&s.dow, fieldDOW, f[4], true)
	if f[5] == "?" {
		errs = append(errs, scheduleErr("year: \"?\" is allowed only in day-of-month and day-of-week"))
	} else if err := parseYears(&s.years, f[5]); err != nil {
		errs = append(errs, err)
	}
	if len(errs) == 0 && s.domAny == s.dowAny {
		errs = append(errs, scheduleErr("%q: exactly one of day-of-month and day-of-week must be \"?\" (e.g. cron(0 9 * * ? *) or cron(0 9 ? * MON-FRI *))", clip(expr)))
	}
	if len(errs) > 0 {
		return Schedule{}, errors.Join(errs...)
	}
	return s, nil
}

// parseField parses a field into a bit set of its values.
func parseField(field cronField, v string) (uint64, error) {
	var out uint64
	width := field.max - field.min + 1
	err := eachRange(field, v, func(lo, hi, step int) {
		span := hi - lo
		if span < 0 { // day-of-week ranges may wrap: FRI-MON
			span += width
		}
		for d := 0; d <= span; d += step {
			x := lo + d
			if x > field.max {
				x -= width
			}
			out |= 1 << uint(x)
		}
	})
	return out, err
}

// parseYears parses the year field into a 230-bit set.
func parseYears(dst *[4]uint64, v string) error {
	return eachRange(fieldYear, v, func(lo, hi, step int) {
		for y := lo; y <= hi; y += step {
			i := y - minYear
			dst[i/64] |= 1 << uint(i%64)
		}
	})
}

// eachRange parses the comma-separated terms of a field and calls fn with
// each term's range and step.
func eachRange(field cronField, v string, fn func(lo, hi, step int)) error {
	if v == "" {
		return scheduleErr("%s is empty", field.name)
	}
	for term := range strings.SplitSeq(v, ",") {
		if strings.ContainsAny(term, "LW#") && !isName(field, term) {
			return scheduleErr("%s %q: L, W and # are not supported; list the days instead", field.name, clip(term))
		}
		rng, stepStr, hasStep := strings.Cut(term, "/")
		step := 1
		if hasStep {
			n, err := strconv.Atoi(stepStr)
			if err != nil || n <= 0 || n > field.max-field.min+1 {
				return scheduleErr("%s %q: the increment must be a whole number from 1 to %d", field.name, clip(term), field.max-field.min+1)
			}
			step = n
		}
		var lo, hi int
		switch {
		case rng == "*":
			lo, hi = field.min, field.max
		case strings.Contains(rng, "-"):
			a, b, _ := strings.Cut(rng, "-")
			var err error
			if lo, err = fieldValue(field, a); err != nil {
				return err
			}
			if hi, err = fieldValue(field, b); err != nil {
				return err
			}
			if hi < lo && field.name != fieldDOW.name {
				return scheduleErr("%s %q: the range runs backwards", field.name, clip(term))
			}
		default:
			var err error
			if lo, err = fieldValue(field, rng); err != nil {
				return err
			}
			hi = lo
			if hasStep { // "5/15": from 5 to the end in steps of 15
				hi = field.max
			}
		}
		fn(lo, hi, step)
	}
	return nil
}

func isName(field cronField, term string) bool {
	for _, part := range strings.FieldsFunc(term, func(r rune) bool { return r == '-' || r == '/' }) {
		ok := false
		for _, n := range field.names {
			if strings.EqualFold(part, n) {
				ok = true
			}
		}
		if !ok {
			if _, err := strconv.Atoi(part); err != nil {
				return false
			}
		}
	}
	return true
}

func fieldValue(field cronField, v string) (int, error) {
	for i, n := range field.names {
		if strings.EqualFold(v, n) {
			return field.min + i, nil
		}
	}
	n, err := strconv.Atoi(v)
	if err != nil || v == "" || v[0] == '+' || v[0] == '-' {
		if len(field.names) > 0 {
			return 0, scheduleErr("%s %q: want a number from %d to %d or a name (%s…)", field.name, clip(v), field.min, field.max, field.names[0])
		}
		return 0, scheduleErr("%s %q: want a number from %d to %d", field.name, clip(v), field.min, field.max)
	}
	if n < field.min || n > field.max {
		return 0, scheduleErr("%s %d is out of range %d–%d", field.name, n, field.min, field.max)
	}
	return n, nil
}

// Next returns the first firing strictly after t (in UTC, at a whole
// minute), or the zero time if the schedule never fires again (a cron
// whose years are all past). A cron expression's fields are wall-clock
// times of the schedule's zone (In), as EventBridge Scheduler reads them
// with ScheduleExpressionTimezone: a time that a daylight-saving change
// skips does not fire that day, and a time it repeats fires once, at its
// first occurrence.
func (s Schedule) Next(t time.Time) time.Time {
	t = t.UTC()
	if s.rate > 0 {
		// Multiples of the period since the Unix epoch.
		p := int64(s.rate / time.Second)
		sec := t.Unix()
		n := sec / p
		if sec < 0 && sec%p != 0 {
			n-- // floor
		}
		return time.Unix((n+1)*p, 0).UTC()
	}
	if s.expr == "" {
		return time.Time{}
	}
	if s.loc == nil || s.loc == time.UTC {
		return s.nextWall(t)
	}
	// Walk the zone's wall clock; each wall time that matches is mapped
	// back to an instant.
	wall := wallClock(t, s.loc)
	for {
		w := s.nextWall(wall)
		if w.IsZero() {
			return w
		}
		if at, ok := instant(w, s.loc); ok && at.After(t) {
			return at
		}
		wall = w
	}
}

// In returns the schedule with its cron fields read in loc (nil: UTC).
// Rate expressions do not depend on the zone.
func (s Schedule) In(loc *time.Location) Schedule {
	s.loc = loc
	return s
}

// Location is the zone the schedule's cron fields are read in.
func (s Schedule) Location() *time.Location {
	if s.loc == nil {
		return time.UTC
	}
	return s.loc
}

// wallClock is t's wall clock in loc, written as a UTC time.
func wallClock(t time.Time, loc *time.Location) time.Time {
	l := t.In(loc)
	return time.Date(l.Year(), l.Month(), l.Day(), l.Hour(), l.Minute(), l.Second(), l.Nanosecond(), time.UTC)
}

// instant is the first instant whose wall clock in loc is w (a UTC time
// holding the wall clock), in UTC; false when loc skips w (a
// daylight-saving gap). The offsets in force a day before and a day after
// w are the only candidates: zones do not change twice within two days.
func instant(w time.Time, loc *time.Location) (time.Time, bool) {
	var first time.Time
	for _, probe := range []time.Time{w.Add(-24 * time.Hour), w.Add(24 * time.Hour)} {
		_, off := probe.In(loc).Zone()
		at := w.Add(-time.Duration(off) * time.Second)
		if wallClock(at, loc).Equal(w) && (first.IsZero() || at.Before(first)) {
			first = at
		}
	}
	return first, !first.IsZero()
}

// nextWall is the first time strictly after t (a UTC time, or a wall
// clock written as one) at a whole minute that the cron fields allow, or
// the zero time.
func (s Schedule) nextWall(t time.Time) time.Time {
	// Start at the next whole minute and move field by field, jumping to
	// the next allowed value and resetting the smaller fields.
	t = t.Truncate(time.Minute).Add(time.Minute)
	if t.Year() < minYear {
		t = time.Date(minYear, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	for t.Year() <= maxYear {
		if !s.yearAllowed(t.Year()) {
			t = time.Date(t.Year()+1, 1, 1, 0, 0, 0, 0, time.UTC)
			continue
		}
		if s.month&(1<<uint(t.Month())) == 0 {
			t = time.Date(t.Year(), t.Month()+1, 1, 0, 0, 0, 0, time.UTC)
			continue
		}
		if !s.dayAllowed(t) {
			t = time.Date(t.Year(), t.Month(), t.Day()+1, 0, 0, 0, 0, time.UTC)
			continue
		}
		if s.hour&(1<<uint(t.Hour())) == 0 {
			t = time.Date(t.Year(), t.Month(), t.Day(), t.Hour()+1, 0, 0, 0, time.UTC)
			continue
		}
		if s.minute&(1<<uint(t.Minute())) == 0 {
			// Jump straight to the next allowed minute of this hour, if any.
			rest := s.minute >> uint(t.Minute())
			if rest == 0 {
				t = time.Date(t.Year(), t.Month(), t.Day(), t.Hour()+1, 0, 0, 0, time.UTC)
			} else {
				t = t.Add(time.Duration(bits.TrailingZeros64(rest)) * time.Minute)
			}
			continue
		}
		return t
	}
	return time.Time{}
}

func (s Schedule) yearAllowed(y int) bool {
	if y < minYear || y > maxYear {
		return false
	}
	i := y - minYear
	return s.years[i/64]&(1<<uint(i%64)) != 0
}

func (s Schedule) dayAllowed(t time.Time) bool {
	if !s.domAny && s.dom&(1<<uint(t.Day())) == 0 {
		return false
	}
	if !s.dowAny && s.dow&(1<<uint(t.Weekday()+1)) == 0 {
		return false
	}
	return true
}

// Firings returns the firings in (after, upTo], oldest first, at most max
// of them (the latest max when there are more), and how many there were in
// all (counted up to a bound of 1,000,000 for cron expressions).
func (s Schedule) Firings(after, upTo time.Time, max int) (latest []time.Time, total int) {
	if max <= 0 || !upTo.After(after) {
		return nil, 0
	}
	if s.rate > 0 {
		first := s.Next(after)
		if first.After(upTo) {
			return nil, 0
		}
		total = int(upTo.Sub(first)/s.rate) + 1
		last := first.Add(time.Duration(total-1) * s.rate)
		for i := min(total, max) - 1; i >= 0; i-- {
			latest = append(latest, last.Add(-time.Duration(i)*s.rate))
		}
		return latest, total
	}
	for t := s.Next(after); !t.IsZero() && !t.After(upTo) && total < 1_000_000; t = s.Next(t) {
		total++
		latest = append(latest, t)
		if len(latest) > max {
			latest = latest[1:]
		}
	}
	return latest, total
}
