package alert_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/qunfa/qunfa/internal/alert"
)

// Locally, alerts go to the log and to the dashboard's feed; in AWS an
// eventbridge.Publisher joins the Multi.
func Example() {
	ctx := context.Background()
	feed := alert.NewFeed(100)
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.TimeKey {
				return slog.Attr{} // keep the example's output stable
			}
			return a
		},
	}))
	alerts := alert.Multi{alert.NewLog(logger), feed}

	_ = alerts.Publish(ctx, alert.Event{Type: alert.ItemsNeedReview, Tenant: "acme",
		Detail: alert.ItemsNeedReviewDetail{JobID: "job-42", Count: 3}})

	for _, e := range feed.Since(0) {
		fmt.Println(e.Seq, e.Event.Type, e.Event.Tenant)
	}
	// Output:
	// level=WARN msg=alert type=ItemsNeedReview tenant=acme detail.count=3 detail.job_id=job-42
	// 1 ItemsNeedReview acme
}
