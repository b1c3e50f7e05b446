package campaign_test

import (
	"fmt"
	"time"

	"github.com/qunfa/qunfa/internal/campaign"
)

// A weekday-morning schedule in EventBridge syntax and its next firings.
func ExampleParseSchedule() {
	s, err := campaign.ParseSchedule("cron(30 9 ? * MON-FRI *)")
	if err != nil {
		fmt.Println(err)
		return
	}
	t := time.Date(2025, 3, 7, 12, 0, 0, 0, time.UTC) // a Friday noon
	for range 2 {
		t = s.Next(t)
		fmt.Println(t.Format("Mon 2006-01-02 15:04"))
	}
	fmt.Println(campaign.IdempotencyKey("weekly", t))
	// Output:
	// Mon 2025-03-10 09:30
	// Tue 2025-03-11 09:30
	// campaign:weekly:2025-03-11T09:30:00Z
}

// A schedule read in a campaign's time zone: 09:00 in New York stays 09:00
// there when the clocks change (2025-03-09), so its UTC time moves.
func ExampleSchedule_In() {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		fmt.Println(err)
		return
	}
	s := campaign.MustParseSchedule("cron(0 9 * * ? *)").In(ny)
	t := time.Date(2025, 3, 8, 0, 0, 0, 0, time.UTC)
	for range 2 {
		t = s.Next(t)
		fmt.Println(t.Format("01-02 15:04 MST"), "=", t.In(ny).Format("15:04 MST"))
	}
	// Output:
	// 03-08 14:00 UTC = 09:00 EST
	// 03-09 13:00 UTC = 09:00 EDT
}
