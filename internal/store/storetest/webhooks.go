package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/store"
)

// testWebhooks checks the webhooks aggregate (store.WebhookStore): webhooks
// are tenant-scoped, deliveries are added idempotently, listed newest
// first, found when due across tenants, and updated only by the holder of
// their current version.
func testWebhooks(t *testing.T, s store.Store, _ Capabilities) {
	ws, ok := s.(store.WebhookStore)
	if !ok {
		t.Fatalf("%T does not implement store.WebhookStore", s)
	}
	ctx := ctxOf(t)

	// Webhooks.
	a1 := store.Webhook{Tenant: "tenant-a", ID: "wh-1", Kind: store.WebhookHTTP, URL: "https://a.example/hook", Events: []string{"job.finished", "items.outcomes"},
		Secret: "s3cret-a1", CreatedAt: at(time.Second)}
	a2 := store.Webhook{Tenant: "tenant-a", ID: "wh-2", Kind: store.WebhookHTTP, URL: "https://a.example/other", Events: []string{"job.paused"}, Secret: "s3cret-a2", CreatedAt: at(2 * time.Second)}
	b1 := store.Webhook{Tenant: "tenant-b", ID: "wh-1", Kind: store.WebhookHTTP, URL: "https://b.example/hook", Events: []string{"job.started"}, Secret: "s3cret-b1", CreatedAt: at(3 * time.Second)}
	// A WeCom group robot: no secret, its kind kept.
	robot := store.Webhook{Tenant: "tenant-b", ID: "wh-robot", Kind: store.WebhookWeComRobot, URL: "https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=k-1",
		Events: []string{"breaker.opened"}, CreatedAt: at(4 * time.Second)}
	// A webhook saved without a kind reads as http.
	bare := store.Webhook{Tenant: "tenant-b", ID: "wh-bare", URL: "https://b.example/bare", Events: []string{"job.started"}, Secret: "s3cret-b2", CreatedAt: at(5 * time.Second)}
	for _, w := range []store.Webhook{a2, a1, b1, robot, bare} {
		if err := ws.CreateWebhook(ctx, w); err != nil {
			t.Fatalf("CreateWebhook(%s/%s): %v", w.Tenant, w.ID, err)
		}
	}
	if err := ws.CreateWebhook(ctx, a1); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("CreateWebhook of a taken id: %v, want ErrConflict", err)
	}
	if err := ws.CreateWebhook(ctx, store.Webhook{Tenant: "tenant-a", ID: "wh-3"}); !errors.Is(err, store.ErrInvalidArgument) {
		t.Fatalf("CreateWebhook without URL: %v, want ErrInvalidArgument", err)
	}
	sameWebhook := func(a, b store.Webhook) bool {
		if !a.CreatedAt.Equal(b.CreatedAt) {
			return false
		}
		a.CreatedAt, b.CreatedAt = time.Time{}, time.Time{}
		return reflect.DeepEqual(a, b)
	}
	got, err := ws.GetWebhook(ctx, "tenant-a", "wh-1")
	if err != nil || !sameWebhook(got, a1) {
		t.Fatalf("GetWebhook = %+v, %v; want %+v", got, err, a1)
	}
	if _, err := ws.GetWebhook(ctx, "tenant-c", "wh-1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetWebhook of another tenant: %v, want ErrNotFound", err)
	}
	list, err := ws.ListWebhooks(ctx, "tenant-a")
	if err != nil || len(list) != 2 || !sameWebhook(list[0], a1) || !sameWebhook(list[1], a2) {
		t.Fatalf("ListWebhooks(tenant-a) = %+v, %v; want wh-1, wh-2", list, err)
	}
	if got, err := ws.GetWebhook(ctx, "tenant-b", "wh-robot"); err != nil || !sameWebhook(got, robot) {
		t.Fatalf("GetWebhook(robot) = %+v, %v; want %+v", got, err, robot)
	}
	if got, err := ws.GetWebhook(ctx, "tenant-b", "wh-bare"); err != nil || got.Kind != store.WebhookHTTP {
		t.Fatalf("GetWebhook(saved without a kind) = %+v, %v; want kind http", got, err)
	}
	if list, err := ws.ListWebhooks(ctx, "tenant-c"); err != nil || len(list) != 0 {
		t.Fatalf("ListWebhooks(tenant-c) = %+v, %v; want none", list, err)
	}
	if err := ws.DeleteWebhook(ctx, "tenant-c", "wh-2"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("DeleteWebhook of another tenant's: %v, want ErrNotFound", err)
	}
	if err := ws.DeleteWebhook(ctx, "tenant-a", "wh-2"); err != nil {
		t.Fatalf("DeleteWebhook: %v", err)
	}
	if _, err := ws.GetWebhook(ctx, "tenant-a", "wh-2"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetWebhook after delete: %v, want ErrNotFound", err)
	}
	if err := ws.DeleteWebhook(ctx, "tenant-a", "wh-2"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("DeleteWebhook twice: %v, want ErrNotFound", err)
	}

	// Deliveries.
	delivery := func(tenant, webhook string, n int, next time.Duration) store.Delivery {
		return store.Delivery{
			Tenant: tenant, WebhookID: webhook, ID: fmt.Sprintf("d-%03d", n), EventID: fmt.Sprintf("evt-%d", n), EventType: "job.finished",
			Body: []byte(fmt.Sprintf(`{"id":"evt-%d"}`, n)), Status: store.DeliveryPending, NextAttemptAt: at(next), CreatedAt: at(time.Duration(n) * time.Millisecond),
		}
	}
	var ds []store.Delivery
	for n := 1; n <= 5; n++ {
		ds = append(ds, delivery("tenant-a", "wh-1", n, time.Duration(n)*time.Minute))
	}
	other := delivery("tenant-b", "wh-1", 6, 30*time.Second)
	if err := ws.AddDeliveries(ctx, append(ds, other)); err != nil {
		t.Fatalf("AddDeliveries: %v", err)
	}
	// Adding again changes nothing, even with another body.
	again := ds[0]
	again.Body, again.Attempts = []byte(`{"changed":true}`), 3
	if err := ws.AddDeliveries(ctx, []store.Delivery{again}); err != nil {
		t.Fatalf("AddDeliveries again: %v", err)
	}
	if err := ws.AddDeliveries(ctx, []store.Delivery{{Tenant: "tenant-a", WebhookID: "wh-1", Status: store.DeliveryPending}}); !errors.Is(err, store.ErrInvalidArgument) {
		t.Fatalf("AddDeliveries without id: %v, want ErrInvalidArgument", err)
	}
	sameDelivery := func(a, b store.Delivery) bool {
		for _, p := range [][2]time.Time{{a.NextAttemptAt, b.NextAttemptAt}, {a.LastAttemptAt, b.LastAttemptAt}, {a.DeliveredAt, b.DeliveredAt}, {a.CreatedAt, b.CreatedAt}} {
			if !p[0].Equal(p[1]) {
				return false
			}
		}
		if !bytes.Equal(a.Body, b.Body) {
			return false
		}
		a.NextAttemptAt, a.LastAttemptAt, a.DeliveredAt, a.CreatedAt, a.Body = time.Time{}, time.Time{}, time.Time{}, time.Time{}, nil
		b.NextAttemptAt, b.LastAttemptAt, b.DeliveredAt, b.CreatedAt, b.Body = time.Time{}, time.Time{}, time.Time{}, time.Time{}, nil
		return reflect.DeepEqual(a, b)
	}
	d1, err := ws.GetDelivery(ctx, "tenant-a", "wh-1", "d-001")
	if err != nil || !sameDelivery(d1, ds[0]) {
		t.Fatalf("GetDelivery = %+v, %v; want %+v (unchanged by the second add)", d1, err, ds[0])
	}
	if _, err := ws.GetDelivery(ctx, "tenant-b", "wh-1", "d-001"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetDelivery of another tenant: %v, want ErrNotFound", err)
	}
	page, err := ws.ListDeliveries(ctx, store.ListDeliveriesParams{Tenant: "tenant-a", WebhookID: "wh-1", Limit: 2})
	if err != nil || len(page) != 2 || page[0].ID != "d-005" || page[1].ID != "d-004" {
		t.Fatalf("ListDeliveries first page = %v, %v; want d-005, d-004", idsOf(page), err)
	}
	page, err = ws.ListDeliveries(ctx, store.ListDeliveriesParams{Tenant: "tenant-a", WebhookID: "wh-1", Before: "d-004", Limit: 10})
	if err != nil || !reflect.DeepEqual(idsOf(page), []string{"d-003", "d-002", "d-001"}) {
		t.Fatalf("ListDeliveries after d-004 = %v, %v; want d-003, d-002, d-001", idsOf(page), err)
	}
	if page, err := ws.ListDeliveries(ctx, store.ListDeliveriesParams{Tenant: "tenant-c", WebhookID: "wh-1", Limit: 10}); err != nil || len(page) != 0 {
		t.Fatalf("ListDeliveries of another tenant = %v, %v; want none", idsOf(page), err)
	}

	// Due: across tenants, earliest first, pending only.
	due, err := ws.DueDeliveries(ctx, store.DueDeliveriesParams{Now: at(2 * time.Minute), Limit: 10})
	if err != nil || !reflect.DeepEqual(idsOf(due), []string{"d-006", "d-001", "d-002"}) {
		t.Fatalf("DueDeliveries at +2m = %v, %v; want d-006, d-001, d-002", idsOf(due), err)
	}
	if due, err := ws.DueDeliveries(ctx, store.DueDeliveriesParams{Now: at(10 * time.Minute), Limit: 2}); err != nil || len(due) != 2 {
		t.Fatalf("DueDeliveries limit 2 = %v, %v", idsOf(due), err)
	}

	// Update: version-fenced.
	claim := d1
	claim.NextAttemptAt, claim.Attempts = at(time.Hour), 1
	claimed, err := ws.UpdateDelivery(ctx, claim)
	if err != nil || claimed.Version != d1.Version+1 || !claimed.NextAttemptAt.Equal(at(time.Hour)) || claimed.Attempts != 1 {
		t.Fatalf("UpdateDelivery = %+v, %v", claimed, err)
	}
	if _, err := ws.UpdateDelivery(ctx, claim); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("UpdateDelivery with a stale version: %v, want ErrConflict", err)
	}
	done := claimed
	done.Status, done.LastStatus, done.LastAttemptAt, done.DeliveredAt = store.DeliveryDelivered, 204, at(time.Hour), at(time.Hour)
	delivered, err := ws.UpdateDelivery(ctx, done)
	if err != nil || delivered.Status != store.DeliveryDelivered || delivered.LastStatus != 204 || !delivered.DeliveredAt.Equal(at(time.Hour)) {
		t.Fatalf("UpdateDelivery(delivered) = %+v, %v", delivered, err)
	}
	if got, err := ws.GetDelivery(ctx, "tenant-a", "wh-1", "d-001"); err != nil || !sameDelivery(got, delivered) {
		t.Fatalf("GetDelivery after update = %+v, %v; want %+v", got, err, delivered)
	}
	failed, err := ws.GetDelivery(ctx, "tenant-a", "wh-1", "d-002")
	if err != nil {
		t.Fatal(err)
	}
	failed.Status, failed.Attempts, failed.LastStatus, failed.LastError = store.DeliveryFailed, 8, 500, "HTTP 500"
	if _, err := ws.UpdateDelivery(ctx, failed); err != nil {
		t.Fatalf("UpdateDelivery(failed): %v", err)
	}
	if due, err := ws.DueDeliveries(ctx, store.DueDeliveriesParams{Now: at(24 * time.Hour), Limit: 10}); err != nil ||
		!reflect.DeepEqual(idsOf(due), []string{"d-006", "d-003", "d-004", "d-005"}) {
		t.Fatalf("DueDeliveries after delivered and failed = %v, %v; want d-006, d-003, d-004, d-005", idsOf(due), err)
	}
	missing := delivery("tenant-a", "wh-1", 99, 0)
	if _, err := ws.UpdateDelivery(ctx, missing); !errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrConflict) {
		t.Fatalf("UpdateDelivery of an unknown delivery: %v, want ErrNotFound", err)
	}

	// Concurrent claims of one delivery: exactly one wins.
	d3, err := ws.GetDelivery(ctx, "tenant-a", "wh-1", "d-003")
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		wins int
	)
	for range 8 {
		wg.Go(func() {
			c := d3
			c.NextAttemptAt = at(2 * time.Hour)
			_, err := ws.UpdateDelivery(ctx, c)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				wins++
			case !errors.Is(err, store.ErrConflict):
				t.Errorf("concurrent UpdateDelivery: %v", err)
			}
		})
	}
	wg.Wait()
	if wins != 1 {
		t.Fatalf("%d concurrent claims of one version won, want 1", wins)
	}
}

func idsOf(ds []store.Delivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.ID
	}
	return out
}
