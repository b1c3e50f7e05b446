package campaign

import (
	"errors"
	"fmt"
	"time"

	"github.com/qunfa/qunfa/internal/store"
)

// maxZoneName bounds a time zone name (the longest IANA names are about
// 30 bytes).
const maxZoneName = 64

// LoadZone loads a campaign's time zone, an IANA name such as
// "Asia/Shanghai"; "" is def, the stack's default (nil: UTC). "Local" is
// refused: it would mean whatever zone the host runs in, which EventBridge
// Scheduler does not know. The binaries that call it embed the zone
// database (time/tzdata), so it does not depend on the host's.
func LoadZone(name string, def *time.Location) (*time.Location, error) {
	switch {
	case name == "":
		if def == nil {
			return time.UTC, nil
		}
		return def, nil
	case name == "Local" || len(name) > maxZoneName:
		return nil, fmt.Errorf("unknown time zone %q", clip(name))
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("unknown time zone %q", clip(name))
	}
	return loc, nil
}

// ScheduleOf is the campaign's schedule, its cron fields read in the
// campaign's time zone, or in def (the stack's default; nil: UTC) when it
// names none.
func ScheduleOf(c store.Campaign, def *time.Location) (Schedule, error) {
	sched, err := ParseSchedule(c.Schedule)
	if err != nil {
		return sched, err
	}
	loc, err := LoadZone(c.Timezone, def)
	if err != nil {
		return sched, errors.Join(ErrSchedule, err)
	}
	return sched.In(loc), nil
}
