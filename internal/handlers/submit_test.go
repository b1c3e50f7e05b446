package handlers_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/qunfa/qunfa/internal/api"
	"github.com/qunfa/qunfa/internal/campaign"
	"github.com/qunfa/qunfa/internal/control"
	"github.com/qunfa/qunfa/internal/handlers"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/submit"
)

// sampleEvent reads events/<name> (the samples for `sam local invoke -e`).
func sampleEvent(t *testing.T, name string, replace ...string) json.RawMessage {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "events", name))
	if err != nil {
		t.Fatal(err)
	}
	return json.RawMessage(strings.NewReplacer(replace...).Replace(string(b)))
}

// The submit function's handler on the embedded adapters, fed with the
// sample events: an API Gateway POST /v1/jobs and a campaign firing.
func TestSubmitHandlerSampleEvents(t *testing.T) {
	ctx := context.Background()
	st, q, clk := embedded(t, "qf_example_token", time.Date(2025, 2, 3, 9, 30, 0, 0, time.UTC))
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	sub := &submit.Submitter{Store: st, Queue: q, Clock: clk}
	camps := &campaign.Campaigns{Store: st, Submitter: sub, Clock: clk, Log: log}
	h := handlers.Submit(api.New(api.Deps{
		Store: st, Submitter: sub, Control: &control.Controller{Store: st, Queue: q, Clock: clk}, Clock: clk, Logger: log,
	}), camps, log)

	out, err := h(ctx, sampleEvent(t, "submit-api.json"))
	resp, ok := out.(events.APIGatewayV2HTTPResponse)
	if err != nil || !ok || resp.StatusCode != 202 {
		t.Fatalf("API submit: %v %+v", err, out)
	}
	var job api.Job
	if err := json.Unmarshal([]byte(resp.Body), &job); err != nil || job.Total != 3 {
		t.Fatalf("job %s (the sample's duplicate recipient is dropped): %v", resp.Body, err)
	}

	// The sample firing's campaign, stored as POST /v1/campaigns stores it.
	if _, err := st.PutCampaign(ctx, store.Campaign{
		Tenant: "tenant-a", ID: "weekly-digest", Name: "Weekly digest", Schedule: "cron(0 8 ? * MON *)", Mode: campaign.ModeSnapshot,
		MaxDelaySec: 7200, Enabled: true, CreatedAt: clk.Now().Add(-30 * 24 * time.Hour),
		Request: []byte(`{"template": "{{name}}, here is your weekly digest.", "recipients": [
			{"account": "acct-a", "to": "wm-user-101", "vars": {"name": "Chen Jie"}},
			{"account": "acct-a", "to": "wm-user-102", "vars": {"name": "Liu Yang"}}]}`),
	}); err != nil {
		t.Fatal(err)
	}
	// A firing delivered twice: one job.
	first, err := h(ctx, sampleEvent(t, "submit-campaign.json"))
	if err != nil {
		t.Fatal(err)
	}
	again, err := h(ctx, sampleEvent(t, "submit-campaign.json"))
	if err != nil {
		t.Fatal(err)
	}
	a, b := first.(handlers.CampaignResult), again.(handlers.CampaignResult)
	if a.Outcome != "fired" || !a.Created || b.Created || a.JobID != b.JobID || a.Total != 2 || a.Key != "campaign:weekly-digest:2025-02-03T08:00:00Z" {
		t.Fatalf("campaign: first %+v, again %+v", a, b)
	}
	// The next firing is a new job.
	clk.Set(time.Date(2025, 2, 10, 8, 0, 5, 0, time.UTC))
	next, err := h(ctx, sampleEvent(t, "submit-campaign.json", "2025-02-03T08:00:00Z", "2025-02-10T08:00:00Z"))
	if err != nil || !next.(handlers.CampaignResult).Created || next.(handlers.CampaignResult).JobID == a.JobID {
		t.Fatalf("next firing: %v %+v", err, next)
	}
	// A deleted campaign's firing: answered, nothing done.
	gone, err := h(ctx, sampleEvent(t, "submit-campaign.json", "weekly-digest", "deleted-one"))
	if err != nil || gone.(handlers.CampaignResult).Outcome != handlers.OutcomeNotFound {
		t.Errorf("deleted campaign: %v %+v", err, gone)
	}

	before, _ := st.ListJobs(ctx, store.ListJobsParams{Tenant: "tenant-a", Limit: 100})
	for name, ev := range map[string]json.RawMessage{
		"no tenant":       sampleEvent(t, "submit-campaign.json", `"tenant": "tenant-a",`, ""),
		"unknown field":   sampleEvent(t, "submit-campaign.json", `"tenant": "tenant-a",`, `"tenant": "tenant-a", "tennant": "x",`),
		"bad time":        sampleEvent(t, "submit-campaign.json", "2025-02-03T08:00:00Z", "Monday"),
		"bad campaign id": sampleEvent(t, "submit-campaign.json", "weekly-digest", "weekly digest"),
		"an event":        json.RawMessage(`{"detail-type": "Scheduled Event", "campaign": "weekly-digest"}`),
		"not an event":    json.RawMessage(`{"hello": "world"}`),
		"not JSON object": json.RawMessage(`[1, 2]`),
	} {
		if _, err := h(ctx, ev); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	after, _ := st.ListJobs(ctx, store.ListJobsParams{Tenant: "tenant-a", Limit: 100})
	if len(after.Jobs) != len(before.Jobs) {
		t.Errorf("refused firings stored jobs: %d → %d", len(before.Jobs), len(after.Jobs))
	}
}
