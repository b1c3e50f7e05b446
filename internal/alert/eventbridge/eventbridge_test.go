package eventbridge_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	sdkeventbridge "github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge/types"

	"github.com/qunfa/qunfa/internal/alert"
	"github.com/qunfa/qunfa/internal/alert/eventbridge"
)

// fakeAPI records PutEvents calls and answers from a script.
type fakeAPI struct {
	mu     sync.Mutex
	calls  [][]types.PutEventsRequestEntry
	answer func(call int, in *sdkeventbridge.PutEventsInput) (*sdkeventbridge.PutEventsOutput, error)
}

func (f *fakeAPI) PutEvents(_ context.Context, in *sdkeventbridge.PutEventsInput, _ ...func(*sdkeventbridge.Options)) (*sdkeventbridge.PutEventsOutput, error) {
	f.mu.Lock()
	call := len(f.calls)
	f.calls = append(f.calls, in.Entries)
	f.mu.Unlock()
	if f.answer != nil {
		return f.answer(call, in)
	}
	return accepted(len(in.Entries)), nil
}

func accepted(n int) *sdkeventbridge.PutEventsOutput {
	out := &sdkeventbridge.PutEventsOutput{}
	for i := range n {
		out.Entries = append(out.Entries, types.PutEventsResultEntry{EventId: aws.String(fmt.Sprint("id-", i))})
	}
	return out
}

func jobEvents(n int) []alert.Event {
	events := make([]alert.Event, n)
	for i := range events {
		events[i] = alert.Event{Type: alert.ItemsNeedReview, Tenant: "acme",
			Detail: alert.ItemsNeedReviewDetail{JobID: fmt.Sprintf("job-%d", i), Count: i}}
	}
	return events
}

func TestPublishBatches(t *testing.T) {
	big := alert.Event{Type: alert.DeadLetters, Tenant: "acme",
		Detail: alert.DeadLettersDetail{JobID: "big", Failures: map[string]int64{strings.Repeat("x", 100*1024): 1}}}
	tests := []struct {
		name   string
		events []alert.Event
		want   []int // entries per PutEvents call
	}{
		{"none", nil, nil},
		{"one", jobEvents(1), []int{1}},
		{"ten", jobEvents(10), []int{10}},
		{"eleven", jobEvents(11), []int{10, 1}},
		{"twenty-three", jobEvents(23), []int{10, 10, 3}},
		{"split by size", append([]alert.Event{big, big, big}, jobEvents(2)...), []int{2, 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			api := &fakeAPI{}
			if err := eventbridge.New(api, "bus").Publish(t.Context(), tt.events...); err != nil {
				t.Fatalf("Publish: %v", err)
			}
			var got []int
			i := 0
			for _, call := range api.calls {
				got = append(got, len(call))
				for _, e := range call {
					if want := string(tt.events[i].Type); aws.ToString(e.DetailType) != want {
						t.Errorf("entry %d detail-type %q, want %q (order kept)", i, aws.ToString(e.DetailType), want)
					}
					i++
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("batches %v, want %v", got, tt.want)
			}
		})
	}
}

func TestPublishReportsFailures(t *testing.T) {
	tests := []struct {
		name      string
		events    []alert.Event
		answer    func(call int, in *sdkeventbridge.PutEventsInput) (*sdkeventbridge.PutEventsOutput, error)
		wantCalls int
		wantCodes []string // PublishError failure codes, in order
		wantErr   string   // substring of the error, beyond the PublishError
	}{
		{
			name:   "failed entries listed",
			events: jobEvents(12),
			answer: func(call int, in *sdkeventbridge.PutEventsInput) (*sdkeventbridge.PutEventsOutput, error) {
				out := accepted(len(in.Entries))
				if call == 1 {
					out.FailedEntryCount = 1
					out.Entries[1] = types.PutEventsResultEntry{ErrorCode: aws.String("ThrottlingException"), ErrorMessage: aws.String("Rate exceeded")}
				}
				return out, nil
			},
			wantCalls: 2,
			wantCodes: []string{"ThrottlingException"},
			wantErr:   "Rate exceeded",
		},
		{
			name:   "request error does not stop later batches",
			events: jobEvents(21),
			answer: func(call int, in *sdkeventbridge.PutEventsInput) (*sdkeventbridge.PutEventsOutput, error) {
				if call == 0 {
					return nil, errors.New("connection reset")
				}
				return accepted(len(in.Entries)), nil
			},
			wantCalls: 3,
			wantErr:   "connection reset",
		},
		{
			name: "detail that is not an object refused before sending",
			events: append(jobEvents(1), alert.Event{Type: alert.JobPaused, Tenant: "acme", Detail: "paused"},
				alert.Event{Type: alert.CountsMismatch, Tenant: "acme", Detail: alert.CountsMismatchDetail{JobID: "j", Total: 3, Counted: 2}}),
			wantCalls: 1,
			wantCodes: []string{"Encoding"},
		},
		{
			name: "entry over the size limit refused before sending",
			events: []alert.Event{{Type: alert.DeadLetters, Tenant: "acme",
				Detail: alert.DeadLettersDetail{JobID: "huge", Failures: map[string]int64{strings.Repeat("x", 300*1024): 1}}}},
			wantCalls: 0,
			wantCodes: []string{"TooLarge"},
		},
		{
			name:   "failed count without error entries",
			events: jobEvents(2),
			answer: func(call int, in *sdkeventbridge.PutEventsInput) (*sdkeventbridge.PutEventsOutput, error) {
				out := accepted(len(in.Entries))
				out.FailedEntryCount = 1
				return out, nil
			},
			wantCalls: 1,
			wantErr:   "FailedEntryCount 1",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			api := &fakeAPI{answer: tt.answer}
			err := eventbridge.New(api, "bus").Publish(t.Context(), tt.events...)
			if err == nil {
				t.Fatal("Publish succeeded, want an error")
			}
			if len(api.calls) != tt.wantCalls {
				t.Errorf("%d PutEvents calls, want %d", len(api.calls), tt.wantCalls)
			}
			var pe *eventbridge.PublishError
			var codes []string
			if errors.As(err, &pe) {
				for _, f := range pe.Failures {
					codes = append(codes, f.Code)
					if f.Tenant != "acme" || f.Type == "" {
						t.Errorf("failure %+v does not name the event", f)
					}
				}
			}
			if fmt.Sprint(codes) != fmt.Sprint(tt.wantCodes) {
				t.Errorf("failure codes %v, want %v (error: %v)", codes, tt.wantCodes, err)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error %q does not contain %q", err, tt.wantErr)
			}
		})
	}
}

// TestPutEventsRequestShape checks what goes over the wire with the real
// SDK client: one AWSEvents.PutEvents request per batch, each entry with
// source qunfa, the event type as DetailType, the bus name, the event time
// and the detail JSON with the tenant added.
func TestPutEventsRequestShape(t *testing.T) {
	type entry struct {
		Source       string
		DetailType   string
		Detail       string
		EventBusName string
		Time         float64
	}
	var (
		mu       sync.Mutex
		requests [][]entry
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if got := r.Header.Get("X-Amz-Target"); got != "AWSEvents.PutEvents" {
			http.Error(w, "unexpected target "+got, http.StatusBadRequest)
			return
		}
		if r.Method != http.MethodPost || !strings.HasPrefix(r.Header.Get("Authorization"), "AWS4-HMAC-SHA256") {
			http.Error(w, "unsigned or not POST", http.StatusBadRequest)
			return
		}
		var in struct{ Entries []entry }
		if err := json.Unmarshal(body, &in); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		requests = append(requests, in.Entries)
		mu.Unlock()
		results := make([]map[string]string, len(in.Entries))
		for i := range results {
			results[i] = map[string]string{"EventId": fmt.Sprint("e", i)}
		}
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		_ = json.NewEncoder(w).Encode(map[string]any{"FailedEntryCount": 0, "Entries": results})
	}))
	defer srv.Close()
	if !strings.HasPrefix(srv.URL, "http://127.0.0.1:") {
		t.Fatalf("fake endpoint %s is not on 127.0.0.1", srv.URL)
	}
	client := sdkeventbridge.New(sdkeventbridge.Options{
		Region:       "eu-west-1",
		BaseEndpoint: aws.String(srv.URL),
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
		Retryer:      aws.NopRetryer{},
	})

	at := time.Date(2025, 3, 1, 12, 30, 15, 0, time.UTC)
	events := jobEvents(11)
	for i := range events {
		events[i].Time = at
	}
	events[10] = alert.Event{Type: alert.CampaignSkipped, Tenant: "globex", Time: at, Detail: alert.CampaignSkippedDetail{
		CampaignID: "weekly", ScheduledAt: at.Add(-time.Hour), StartedAt: at, MaxDelaySec: 900}}
	if err := eventbridge.New(client, "qunfa-alerts").Publish(t.Context(), events...); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	if len(requests) != 2 || len(requests[0]) != 10 || len(requests[1]) != 1 {
		t.Fatalf("requests carried %v entries, want 10 then 1", func() (n []int) {
			for _, r := range requests {
				n = append(n, len(r))
			}
			return
		}())
	}
	first, last := requests[0][0], requests[1][0]
	if first.Source != "qunfa" || first.DetailType != "ItemsNeedReview" || first.EventBusName != "qunfa-alerts" || int64(first.Time) != at.Unix() {
		t.Errorf("first entry %+v", first)
	}
	if want := `{"tenant":"acme","job_id":"job-0","count":0}`; first.Detail != want {
		t.Errorf("first detail %s, want %s", first.Detail, want)
	}
	if want := `{"tenant":"globex","campaign_id":"weekly","scheduled_at":"2025-03-01T11:30:15Z","started_at":"2025-03-01T12:30:15Z","max_delay_sec":900}`; last.Detail != want {
		t.Errorf("last detail %s, want %s", last.Detail, want)
	}
	if last.DetailType != "CampaignSkipped" || last.Source != "qunfa" || last.EventBusName != "qunfa-alerts" {
		t.Errorf("last entry %+v", last)
	}
}
