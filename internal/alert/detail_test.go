package alert_test

import (
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/alert"
)

func TestDetailJSON(t *testing.T) {
	at := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name    string
		event   alert.Event
		want    string
		wantErr bool
	}{
		{"job started", alert.Event{Type: alert.JobStarted, Tenant: "acme", Detail: alert.JobStartedDetail{JobID: "j1", Name: "sale", Total: 20000, Shards: 8}},
			`{"tenant":"acme","job_id":"j1","name":"sale","total":20000,"shards":8}`, false},
		{"pointer detail", alert.Event{Type: alert.ItemsNeedReview, Tenant: "acme", Detail: &alert.ItemsNeedReviewDetail{JobID: "j1", Count: 3}},
			`{"tenant":"acme","job_id":"j1","count":3}`, false},
		{"job finished", alert.Event{Type: alert.JobFinished, Tenant: "acme", Detail: alert.JobFinishedDetail{JobID: "j1", Name: "sale", Status: "done",
			Counts: alert.Counts{Confirmed: 9, Failed: 1}, Failures: map[string]int64{"invalid_number": 1}}},
			`{"tenant":"acme","job_id":"j1","name":"sale","status":"done","counts":{"pending":0,"submitted":0,"confirmed":9,"failed":1,"abandoned":0},"failures":{"invalid_number":1}}`, false},
		{"paused manual omits budget", alert.Event{Type: alert.JobPaused, Tenant: "acme", Detail: alert.JobPausedDetail{JobID: "j1", Reason: "manual"}},
			`{"tenant":"acme","job_id":"j1","reason":"manual"}`, false},
		{"breaker closed omits until", alert.Event{Type: alert.BreakerClosed, Tenant: "acme", Detail: alert.BreakerDetail{Account: "a", Reason: "probe ok", Opens: 1}},
			`{"tenant":"acme","account":"a","reason":"probe ok","opens":1}`, false},
		{"breaker opened has until", alert.Event{Type: alert.BreakerOpened, Tenant: "acme", Detail: alert.BreakerDetail{Account: "a", Reason: "errors", Until: at, Opens: 2}},
			`{"tenant":"acme","account":"a","reason":"errors","until":"2025-03-01T12:00:00Z","opens":2}`, false},
		{"tenant is escaped", alert.Event{Type: alert.CountsMismatch, Tenant: `a"b`, Detail: alert.CountsMismatchDetail{JobID: "j", Total: 3, Counted: 2}},
			`{"tenant":"a\"b","job_id":"j","total":3,"counted":2}`, false},
		{"nil detail", alert.Event{Type: alert.JobStarted, Tenant: "acme"}, `{"tenant":"acme"}`, false},
		{"nil pointer detail", alert.Event{Type: alert.JobStarted, Tenant: "acme", Detail: (*alert.JobStartedDetail)(nil)}, `{"tenant":"acme"}`, false},
		{"empty object", alert.Event{Type: alert.JobStarted, Tenant: "acme", Detail: struct{}{}}, `{"tenant":"acme"}`, false},
		{"not an object", alert.Event{Type: alert.JobStarted, Tenant: "acme", Detail: []int{1}}, "", true},
		{"own tenant field", alert.Event{Type: alert.JobStarted, Tenant: "acme", Detail: map[string]string{"tenant": "other"}}, "", true},
		{"unmarshalable", alert.Event{Type: alert.JobStarted, Tenant: "acme", Detail: map[string]any{"f": func() {}}}, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := alert.DetailJSON(tt.event)
			if (err != nil) != tt.wantErr {
				t.Fatalf("DetailJSON error %v, want error %v", err, tt.wantErr)
			}
			if string(got) != tt.want {
				t.Errorf("DetailJSON = %s, want %s", got, tt.want)
			}
		})
	}
}
