package alert_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/alert"
)

func TestLevel(t *testing.T) {
	tests := []struct {
		typ  alert.Type
		want slog.Level
	}{
		{alert.JobStarted, slog.LevelInfo},
		{alert.JobFinished, slog.LevelInfo},
		{alert.BreakerClosed, slog.LevelInfo},
		{alert.JobPaused, slog.LevelWarn},
		{alert.BreakerOpened, slog.LevelWarn},
		{alert.ItemsNeedReview, slog.LevelWarn},
		{alert.DeadLetters, slog.LevelWarn},
		{alert.CampaignSkipped, slog.LevelWarn},
		{alert.CountsMismatch, slog.LevelError},
		{alert.Type("SomethingNew"), slog.LevelWarn},
	}
	for _, tt := range tests {
		if got := alert.Level(tt.typ); got != tt.want {
			t.Errorf("Level(%s) = %v, want %v", tt.typ, got, tt.want)
		}
	}
}

func TestLogPublish(t *testing.T) {
	at := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name    string
		event   alert.Event
		want    map[string]any // JSON record, without the handler's own time
		wantErr bool
	}{
		{
			name:  "job finished with nested counts",
			event: alert.Event{Type: alert.JobFinished, Tenant: "acme", Time: at, Detail: alert.JobFinishedDetail{JobID: "j1", Name: "sale", Status: "done", Counts: alert.Counts{Confirmed: 9007199254740993}, Failures: map[string]int64{"blocked": 2}}},
			want: map[string]any{"level": "INFO", "msg": "alert", "type": "JobFinished", "tenant": "acme", "event_time": "2025-03-01T12:00:00Z",
				"detail": map[string]any{"job_id": "j1", "name": "sale", "status": "done",
					"counts":   map[string]any{"pending": json.Number("0"), "submitted": json.Number("0"), "confirmed": json.Number("9007199254740993"), "failed": json.Number("0"), "abandoned": json.Number("0")},
					"failures": map[string]any{"blocked": json.Number("2")}}},
		},
		{
			name:  "counts mismatch is an error",
			event: alert.Event{Type: alert.CountsMismatch, Tenant: "acme", Detail: alert.CountsMismatchDetail{JobID: "j1", Total: 10, Counted: 9}},
			want: map[string]any{"level": "ERROR", "msg": "alert", "type": "CountsMismatch", "tenant": "acme",
				"detail": map[string]any{"job_id": "j1", "total": json.Number("10"), "counted": json.Number("9")}},
		},
		{
			name:  "only schema fields reach the log",
			event: alert.Event{Type: alert.JobPaused, Tenant: "acme", Detail: secretive{JobID: "j1", Token: "s3cr3t"}},
			want: map[string]any{"level": "WARN", "msg": "alert", "type": "JobPaused", "tenant": "acme",
				"detail": map[string]any{"job_id": "j1"}},
		},
		{
			name:    "bad detail still logged, error returned",
			event:   alert.Event{Type: alert.DeadLetters, Tenant: "acme", Detail: []string{"x"}},
			want:    map[string]any{"level": "WARN", "msg": "alert", "type": "DeadLetters", "tenant": "acme", "detail_error": "DeadLetters detail: []string is not a JSON object"},
			wantErr: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			logger := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{
				ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
					if len(groups) == 0 && a.Key == slog.TimeKey {
						return slog.Attr{} // the handler's clock, not the event's
					}
					return a
				},
			}))
			err := alert.NewLog(logger).Publish(t.Context(), tt.event)
			if (err != nil) != tt.wantErr {
				t.Fatalf("Publish error %v, want error %v", err, tt.wantErr)
			}
			lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
			if len(lines) != 1 {
				t.Fatalf("%d records, want 1: %s", len(lines), buf.String())
			}
			if strings.Contains(lines[0], "s3cr3t") {
				t.Fatalf("record leaks a field outside the schema: %s", lines[0])
			}
			dec := json.NewDecoder(strings.NewReader(lines[0]))
			dec.UseNumber()
			var got map[string]any
			if err := dec.Decode(&got); err != nil {
				t.Fatalf("record %s: %v", lines[0], err)
			}
			gotJSON, _ := json.Marshal(got)
			wantJSON, _ := json.Marshal(tt.want)
			if string(gotJSON) != string(wantJSON) {
				t.Errorf("record\n got %s\nwant %s", gotJSON, wantJSON)
			}
		})
	}
}

// secretive is a detail with a field kept out of the schema.
type secretive struct {
	JobID string `json:"job_id"`
	Token string `json:"-"`
}

func TestLogOneRecordPerEvent(t *testing.T) {
	var buf bytes.Buffer
	events := []alert.Event{
		{Type: alert.JobStarted, Tenant: "a", Detail: alert.JobStartedDetail{JobID: "1"}},
		{Type: alert.JobStarted, Tenant: "b", Detail: alert.JobStartedDetail{JobID: "2"}},
		{Type: alert.JobStarted, Tenant: "c", Detail: alert.JobStartedDetail{JobID: "3"}},
	}
	if err := alert.NewLog(slog.New(slog.NewJSONHandler(&buf, nil))).Publish(t.Context(), events...); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(buf.String(), "\n"); n != len(events) {
		t.Errorf("%d records for %d events", n, len(events))
	}
}
