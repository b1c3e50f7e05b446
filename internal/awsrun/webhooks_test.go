package awsrun_test

import (
	"slices"
	"testing"

	"github.com/qunfa/qunfa/internal/alert"
	"github.com/qunfa/qunfa/internal/webhook"
)

// checkWebhookRule: the webhooks function's rule takes qunfa's events of
// exactly the alert types webhooks deliver (to endpoints and to WeCom
// group robots).
func checkWebhookRule(t *testing.T, e any) {
	t.Helper()
	if got := strs(at(e, "Properties", "Pattern", "source")); !slices.Equal(got, []string{alert.Source}) {
		t.Errorf("webhook rule source %v, want [%s]", got, alert.Source)
	}
	var want []string
	for _, a := range webhook.AlertTypes() {
		want = append(want, string(a))
	}
	if !slices.Contains(want, string(alert.BreakerOpened)) || !slices.Contains(want, string(alert.JobFinished)) {
		t.Fatalf("webhook.AlertTypes() = %v lacks breaker or job alerts", want)
	}
	if got := strs(at(e, "Properties", "Pattern", "detail-type")); !slices.Equal(sorted(got), sorted(want)) {
		t.Errorf("webhook rule detail-types %v, want %v", got, want)
	}
}
