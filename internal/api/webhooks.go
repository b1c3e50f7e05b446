package api

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/qunfa/qunfa/internal/netguard"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/submit"
	"github.com/qunfa/qunfa/internal/webhook"
)

// WebhookRequest is the body of POST /v1/webhooks. Kind "http" (the
// default) is an endpoint of the tenant's that gets signed JSON events
// (secret required); "wecom_robot" a WeCom group robot that gets markdown
// messages (no secret: the key in its URL is the secret).
type WebhookRequest struct {
	Kind   string   `json:"kind"`
	URL    string   `json:"url"`
	Events []string `json:"events"`
	Secret string   `json:"secret"`
}

// Webhook is a registered endpoint; its secret is never shown, nor a
// robot's key (its URL is shown masked).
type Webhook struct {
	ID        string    `json:"id"`
	Kind      string    `json:"kind"`
	URL       string    `json:"url"`
	Events    []string  `json:"events"`
	CreatedAt time.Time `json:"created_at"`
}

// WebhookList is a tenant's webhooks.
type WebhookList struct {
	Webhooks []Webhook `json:"webhooks"`
}

// WebhookDelivery is one entry of a webhook's delivery log.
type WebhookDelivery struct {
	ID            string     `json:"id"`
	EventID       string     `json:"event_id"`
	EventType     string     `json:"event_type"`
	Status        string     `json:"status"`
	Attempts      int        `json:"attempts"`
	LastStatus    int        `json:"last_status"`
	LastError     string     `json:"last_error"`
	LastAttemptAt *time.Time `json:"last_attempt_at"`
	NextAttemptAt *time.Time `json:"next_attempt_at"`
	DeliveredAt   *time.Time `json:"delivered_at"`
	CreatedAt     time.Time  `json:"created_at"`
}

// WebhookDeliveryList is a page of a webhook's delivery log, newest first.
type WebhookDeliveryList struct {
	Deliveries []WebhookDelivery `json:"deliveries"`
	NextCursor string            `json:"next_cursor"`
}

// Bounds of a webhook registration.
const (
	maxWebhooks        = 20
	maxWebhookURL      = 2048
	minWebhookSecret   = 16
	maxWebhookSecret   = 256
	maxDeliveriesPage  = 100
	defaultDeliveryPge = 20
)

func webhookView(w store.Webhook) Webhook {
	kind, u := w.Kind, w.URL
	if kind == "" {
		kind = store.WebhookHTTP
	}
	if kind == store.WebhookWeComRobot {
		u = maskRobotKey(u)
	}
	return Webhook{ID: w.ID, Kind: string(kind), URL: u, Events: slices.Clone(w.Events), CreatedAt: w.CreatedAt.UTC()}
}

// maskRobotKey shows a robot's URL with its key masked but for its last
// four characters, so an operator can tell robots apart.
func maskRobotKey(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unreadable URL)"
	}
	q := u.Query()
	if k := q.Get("key"); k != "" {
		tail := ""
		if len(k) > 8 {
			tail = k[len(k)-4:]
		}
		q.Set("key", "****"+tail)
	}
	u.RawQuery = q.Encode()
	u.User = nil
	return u.String()
}

func deliveryView(d store.Delivery) WebhookDelivery {
	v := WebhookDelivery{ID: d.ID, EventID: d.EventID, EventType: d.EventType, Status: string(d.Status), Attempts: d.Attempts,
		LastStatus: d.LastStatus, LastError: d.LastError, LastAttemptAt: timePtr(d.LastAttemptAt),
		DeliveredAt: timePtr(d.DeliveredAt), CreatedAt: d.CreatedAt.UTC()}
	if d.Status == store.DeliveryPending {
		v.NextAttemptAt = timePtr(d.NextAttemptAt)
	}
	return v
}

// routeWebhooks registers the webhook routes.
func (s *server) routeWebhooks() {
	s.handle("POST /v1/webhooks", s.createWebhook)
	s.handle("GET /v1/webhooks", s.listWebhooks)
	s.handle("DELETE /v1/webhooks/{id}", s.deleteWebhook)
	s.handle("GET /v1/webhooks/{id}/deliveries", s.listDeliveries)
	s.handle("POST /v1/webhooks/{id}/deliveries/{delivery}/redeliver", s.redeliver)
}

// webhooks is the webhooks aggregate of the store: Deps.Webhooks, or the
// Store itself when it implements it.
func (s *server) webhooks() store.WebhookStore {
	if s.Webhooks != nil {
		return s.Webhooks
	}
	ws, _ := s.Store.(store.WebhookStore)
	return ws
}

func (s *server) checkWebhook(ctx context.Context, req WebhookRequest) []submit.FieldError {
	var errs []submit.FieldError
	kind := store.WebhookKind(req.Kind)
	switch kind {
	case store.WebhookHTTP, store.WebhookWeComRobot:
	default:
		errs = append(errs, submit.FieldError{Field: "kind", Message: "must be http or wecom_robot"})
	}
	switch {
	case req.URL == "":
		errs = append(errs, submit.FieldError{Field: "url", Message: "is required"})
	case len(req.URL) > maxWebhookURL || !utf8.ValidString(req.URL):
		errs = append(errs, submit.FieldError{Field: "url", Message: "must be valid UTF-8 of at most " + strconv.Itoa(maxWebhookURL) + " bytes"})
	default:
		var r netguard.Resolver = net.DefaultResolver
		if s.Resolver != nil {
			r = s.Resolver
		}
		if err := netguard.CheckURL(ctx, req.URL, r, s.AllowPrivateURLs); err != nil {
			errs = append(errs, submit.FieldError{Field: "url", Message: err.Error()})
		} else if u, err := url.Parse(req.URL); kind == store.WebhookWeComRobot && (err != nil || u.Query().Get("key") == "") {
			errs = append(errs, submit.FieldError{Field: "url", Message: "a WeCom group robot's URL has its key: https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=…"})
		}
	}
	if len(req.Events) == 0 {
		errs = append(errs, submit.FieldError{Field: "events", Message: "must name at least one event type"})
	}
	for i, e := range req.Events {
		field := "events[" + strconv.Itoa(i) + "]"
		switch {
		case !webhook.EventType(e).ValidFor(kind):
			errs = append(errs, submit.FieldError{Field: field, Message: "is not an event type of a " + string(kind) + " webhook (" + eventTypeList(kind) + ")"})
		case slices.Index(req.Events, e) < i:
			errs = append(errs, submit.FieldError{Field: field, Message: "repeats " + strconv.Quote(e)})
		}
	}
	switch {
	case kind == store.WebhookWeComRobot && req.Secret != "":
		errs = append(errs, submit.FieldError{Field: "secret", Message: "must be absent for a WeCom group robot (the key in its URL is its secret)"})
	case kind == store.WebhookWeComRobot:
	case req.Secret == "":
		errs = append(errs, submit.FieldError{Field: "secret", Message: "is required (it signs every delivery)"})
	case len(req.Secret) < minWebhookSecret || len(req.Secret) > maxWebhookSecret:
		errs = append(errs, submit.FieldError{Field: "secret", Message: "must be " + strconv.Itoa(minWebhookSecret) + " to " + strconv.Itoa(maxWebhookSecret) + " bytes long"})
	}
	return errs
}

func eventTypeList(kind store.WebhookKind) string {
	types := webhook.EventTypes()
	if kind == store.WebhookWeComRobot {
		types = webhook.RobotEventTypes()
	}
	var b []byte
	for i, t := range types {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = append(b, t...)
	}
	return string(b)
}

func (s *server) createWebhook(w http.ResponseWriter, r *http.Request, tenant string) *Problem {
	ws := s.webhooks()
	body, p := readJSON(w, r, s.MaxBodyBytes)
	if p != nil {
		return p
	}
	var req WebhookRequest
	if p := decodeStrict(body, &req); p != nil {
		return p
	}
	if req.Kind == "" {
		req.Kind = string(store.WebhookHTTP)
	}
	if errs := s.checkWebhook(r.Context(), req); len(errs) > 0 {
		return newProblem(http.StatusUnprocessableEntity, kindValidation, "the webhook was not registered", errs...)
	}
	existing, err := ws.ListWebhooks(r.Context(), tenant)
	if err != nil {
		return s.storeProblem(r, "webhooks", err)
	}
	if len(existing) >= maxWebhooks {
		return newProblem(http.StatusUnprocessableEntity, kindValidation, "the webhook was not registered",
			submit.FieldError{Field: "url", Message: "a tenant has at most " + strconv.Itoa(maxWebhooks) + " webhooks; delete one first"})
	}
	hook := store.Webhook{Tenant: tenant, ID: webhook.NewWebhookID(), Kind: store.WebhookKind(req.Kind), URL: req.URL, Events: req.Events, Secret: req.Secret,
		CreatedAt: s.Clock.Now().UTC().Truncate(time.Millisecond)}
	if err := ws.CreateWebhook(r.Context(), hook); err != nil {
		return s.storeProblem(r, "webhook", err)
	}
	s.Logger.Info("webhook registered", slog.String("tenant", tenant), slog.String("webhook", hook.ID),
		slog.String("kind", string(hook.Kind)), slog.Any("events", hook.Events))
	w.Header().Set("Location", "/v1/webhooks/"+hook.ID)
	writeJSON(w, http.StatusCreated, webhookView(hook))
	return nil
}

func (s *server) listWebhooks(w http.ResponseWriter, r *http.Request, tenant string) *Problem {
	hooks, err := s.webhooks().ListWebhooks(r.Context(), tenant)
	if err != nil {
		return s.storeProblem(r, "webhooks", err)
	}
	out := WebhookList{Webhooks: make([]Webhook, 0, len(hooks))}
	for _, h := range hooks {
		out.Webhooks = append(out.Webhooks, webhookView(h))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *server) deleteWebhook(w http.ResponseWriter, r *http.Request, tenant string) *Problem {
	if err := s.webhooks().DeleteWebhook(r.Context(), tenant, r.PathValue("id")); err != nil {
		return s.storeProblem(r, "webhook", err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *server) listDeliveries(w http.ResponseWriter, r *http.Request, tenant string) *Problem {
	ws := s.webhooks()
	q := r.URL.Query()
	limit, p := pageLimit(q, defaultDeliveryPge, maxDeliveriesPage)
	if p != nil {
		return p
	}
	hookID := r.PathValue("id")
	if _, err := ws.GetWebhook(r.Context(), tenant, hookID); err != nil {
		return s.storeProblem(r, "webhook", err)
	}
	// The cursor is the last delivery id of the previous page.
	ds, err := ws.ListDeliveries(r.Context(), store.ListDeliveriesParams{Tenant: tenant, WebhookID: hookID, Before: q.Get("cursor"), Limit: limit + 1})
	if err != nil {
		return s.storeProblem(r, "deliveries", err)
	}
	out := WebhookDeliveryList{Deliveries: make([]WebhookDelivery, 0, min(len(ds), limit))}
	for i, d := range ds {
		if i == limit {
			out.NextCursor = ds[limit-1].ID
			break
		}
		out.Deliveries = append(out.Deliveries, deliveryView(d))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *server) redeliver(w http.ResponseWriter, r *http.Request, tenant string) *Problem {
	ws := s.webhooks()
	hookID := r.PathValue("id")
	if _, err := ws.GetWebhook(r.Context(), tenant, hookID); err != nil {
		return s.storeProblem(r, "webhook", err)
	}
	d, err := ws.GetDelivery(r.Context(), tenant, hookID, r.PathValue("delivery"))
	if err != nil {
		return s.storeProblem(r, "delivery", err)
	}
	d, err = webhook.Redeliver(r.Context(), ws, d, s.Clock.Now())
	if err != nil {
		return s.storeProblem(r, "delivery", err)
	}
	writeJSON(w, http.StatusAccepted, deliveryView(d))
	return nil
}
