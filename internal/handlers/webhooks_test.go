package handlers_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/qunfa/qunfa/internal/handlers"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/webhook"
	"github.com/qunfa/qunfa/internal/webhook/httppost"
)

// The webhooks function's handler on the embedded store, fed with the
// sample events: the alert from the bus is stored once as a delivery (even
// when the rule retries it) and posted, signed; a failed post is retried
// by the scheduled event once due.
func TestWebhooksHandlerSampleEvents(t *testing.T) {
	ctx := context.Background()
	st, _, clk := embedded(t, "qf_example_token", time.Date(2025, 2, 3, 9, 41, 8, 0, time.UTC))
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	var (
		mu     sync.Mutex
		bodies [][]byte
		fail   = true
	)
	const secret = "whsec-sample-0123456789"
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		if err := webhook.Verify(r.Header.Get(webhook.SignatureHeader), secret, b, clk.Now(), time.Minute); err != nil {
			t.Errorf("signature: %v", err)
		}
		bodies = append(bodies, b)
		if fail {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer recv.Close()
	if err := st.CreateWebhook(ctx, store.Webhook{Tenant: "tenant-a", ID: "wh", URL: recv.URL, Events: []string{"job.finished"}, Secret: secret}); err != nil {
		t.Fatal(err)
	}
	pub := &webhook.Publisher{Store: st, Clock: clk, Log: log}
	del := &webhook.Deliverer{Store: st, Clock: clk, Log: log, Poster: httppost.New(httppost.Config{AllowPrivate: true}), Rand: func() float64 { return 0 }}
	h := handlers.Webhooks(pub, del, log)

	var alertEv, schedEv events.EventBridgeEvent
	if err := json.Unmarshal(sampleEvent(t, "webhooks-alert.json"), &alertEv); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(sampleEvent(t, "webhooks-schedule.json"), &schedEv); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the rule's retry of the same event stores nothing new
		if err := h(ctx, alertEv); err != nil {
			t.Fatal(err)
		}
	}
	ds, err := st.ListDeliveries(ctx, store.ListDeliveriesParams{Tenant: "tenant-a", WebhookID: "wh", Limit: 10})
	if err != nil || len(ds) != 1 || ds[0].EventID != "evt_"+alertEv.ID || ds[0].Attempts != 1 || ds[0].Status != store.DeliveryPending {
		t.Fatalf("deliveries %+v, %v; want one, tried once, pending", ds, err)
	}
	var ev webhook.Event
	if err := json.Unmarshal(bodies[0], &ev); err != nil || ev.Type != webhook.JobFinished || !ev.CreatedAt.Equal(alertEv.Time) {
		t.Fatalf("posted %s: %v", bodies[0], err)
	}
	var data map[string]any
	if err := json.Unmarshal(ev.Data, &data); err != nil || data["job_id"] != "01JNF3Q6W8X2K" || data["tenant"] != nil {
		t.Fatalf("data %s: %v", ev.Data, err)
	}

	mu.Lock()
	fail = false
	mu.Unlock()
	clk.Advance(time.Minute)
	if err := h(ctx, schedEv); err != nil {
		t.Fatal(err)
	}
	ds, _ = st.ListDeliveries(ctx, store.ListDeliveriesParams{Tenant: "tenant-a", WebhookID: "wh", Limit: 10})
	if len(ds) != 1 || ds[0].Status != store.DeliveryDelivered || ds[0].Attempts != 2 || len(bodies) != 2 || string(bodies[1]) != string(bodies[0]) {
		t.Fatalf("after the schedule: %+v, %d posts", ds, len(bodies))
	}
}
