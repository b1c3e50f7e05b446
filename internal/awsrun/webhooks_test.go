package awsrun_test

import (
	"slices"
	"testing"

	"github.com/qunfa/qunfa/internal/alert"
)

// checkWebhookRule: the webhooks function's rule takes qunfa's events of
// exactly the alert types webhooks deliver.
func checkWebhookRule(t *testing.T, e any) {
	t.Helper()
	if got := strs(at(e, "Properties", "Pattern", "source")); !slices.Equal(got, []string{alert.Source}) {
		t.Errorf("webhook rule source %v, want [%s]", got, alert.Source)
	}
	want := []string{string(alert.JobStarted), string(alert.JobPaused), string(alert.CanaryReady), string(alert.JobFinished),
		string(alert.DeadLetters), string(alert.ItemsNeedReview), string(alert.ItemOutcomes)}
	if got := strs(at(e, "Properties", "Pattern", "detail-type")); !slices.Equal(sorted(got), sorted(want)) {
		t.Errorf("webhook rule detail-types %v, want %v", got, want)
	}
}
