package store

import (
	"context"
	"time"
)

// WebhookStore is the webhooks aggregate of the store port: tenants'
// webhook endpoints and the deliveries of events to them. It is a port of
// its own, beside Store, so that its consumers (the API's webhook routes,
// the webhook publisher and delivery worker) name only what they use; both
// adapters implement it and storetest proves them.
type WebhookStore interface {
	// CreateWebhook stores a new webhook (ErrConflict if the tenant already
	// has one with its ID; ErrInvalidArgument for an empty tenant, ID or URL).
	CreateWebhook(ctx context.Context, w Webhook) error
	// GetWebhook reads a tenant's webhook (ErrNotFound, also for another
	// tenant's).
	GetWebhook(ctx context.Context, tenant, id string) (Webhook, error)
	// ListWebhooks lists a tenant's webhooks ordered by ID.
	ListWebhooks(ctx context.Context, tenant string) ([]Webhook, error)
	// DeleteWebhook removes a webhook (absent: ErrNotFound). Its deliveries
	// stay; pending ones fail when they come due.
	DeleteWebhook(ctx context.Context, tenant, id string) error

	// AddDeliveries stores new deliveries. A delivery whose (Tenant,
	// WebhookID, ID) is already stored is left as it is, so adding the
	// deliveries of one event again (a retried publish) is harmless.
	AddDeliveries(ctx context.Context, ds []Delivery) error
	// GetDelivery reads one delivery (ErrNotFound).
	GetDelivery(ctx context.Context, tenant, webhookID, id string) (Delivery, error)
	// ListDeliveries lists a webhook's deliveries by ID descending (IDs
	// sort by creation, so newest first), paged: at most p.Limit, starting
	// after the ID p.Before (exclusive) when set.
	ListDeliveries(ctx context.Context, p ListDeliveriesParams) ([]Delivery, error)
	// DueDeliveries lists, across tenants, up to p.Limit deliveries in
	// status pending whose NextAttemptAt is not after p.Now, earliest
	// first.
	DueDeliveries(ctx context.Context, p DueDeliveriesParams) ([]Delivery, error)
	// UpdateDelivery replaces the mutable fields of a delivery (Status,
	// Attempts, NextAttemptAt, LastStatus, LastError, LastAttemptAt,
	// DeliveredAt) on condition its Version is still d.Version, and
	// returns it with Version + 1. A stale version is ErrConflict (another
	// worker claimed or recorded it); an unknown delivery ErrNotFound.
	UpdateDelivery(ctx context.Context, d Delivery) (Delivery, error)
}

// WebhookKind is what a webhook's endpoint takes.
type WebhookKind string

// Webhook kinds: an HTTP endpoint of the tenant's that gets signed JSON
// events (the empty kind reads as it), or a WeCom group robot that gets
// markdown messages (its URL holds the robot's key, a secret).
const (
	WebhookHTTP       WebhookKind = "http"
	WebhookWeComRobot WebhookKind = "wecom_robot"
)

// Webhook is a tenant's endpoint for events.
type Webhook struct {
	Tenant string
	ID     string
	// Kind is WebhookHTTP or WebhookWeComRobot ("" reads as http).
	Kind WebhookKind
	URL  string
	// Events are the event types it receives (webhook.EventType names).
	Events []string
	// Secret signs every delivery (HMAC-SHA256). It is never returned by
	// the API nor logged.
	Secret    string
	CreatedAt time.Time
}

// DeliveryStatus is where a delivery stands.
type DeliveryStatus string

// Delivery statuses: pending (due at NextAttemptAt), delivered (a 2xx
// answer), failed (attempts used up, or the webhook was deleted).
const (
	DeliveryPending   DeliveryStatus = "pending"
	DeliveryDelivered DeliveryStatus = "delivered"
	DeliveryFailed    DeliveryStatus = "failed"
)

// Delivery is one event to be delivered to one webhook. The body is fixed
// when the delivery is made, so every attempt sends the same bytes and the
// same event ID.
type Delivery struct {
	Tenant    string
	WebhookID string
	// ID is unique per webhook and sorts by creation.
	ID        string
	EventID   string
	EventType string
	// Body is the JSON the endpoint receives.
	Body          []byte
	Status        DeliveryStatus
	Attempts      int
	NextAttemptAt time.Time
	// LastStatus is the HTTP status of the last attempt (0: none, or no
	// answer); LastError says why it failed.
	LastStatus    int
	LastError     string
	LastAttemptAt time.Time
	DeliveredAt   time.Time
	CreatedAt     time.Time
	// Version counts the delivery's updates; UpdateDelivery is conditional
	// on it.
	Version int64
}

// ListDeliveriesParams pages a webhook's delivery log.
type ListDeliveriesParams struct {
	Tenant    string
	WebhookID string
	Before    string // a delivery ID; empty: from the newest
	Limit     int
}

// DueDeliveriesParams selects deliveries whose next attempt is due.
type DueDeliveriesParams struct {
	Now   time.Time
	Limit int
}
