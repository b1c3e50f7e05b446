package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/qunfa/qunfa/internal/store"
)

var _ store.WebhookStore = (*Store)(nil)

// The webhooks aggregate, in addition to the package doc's table:
//
//	webhook     TENANT#<tenant>                 WEBHOOK#<id>   url, events (L), secret, createdAt
//	delivery    WHDLV#"<tenant>"#<webhook>      <delivery id>  body (B), status, attempts, times, v (version);
//	                                                           while pending: g2pk WHDUE, g2sk <next ns 20d>#<pk>#<sk>
//
// A webhook's deliveries are one item collection, so its delivery log is
// a Query in sort-key order (delivery IDs sort by creation). Pending
// deliveries of all tenants are in the WHDUE partition of the running
// index (overloaded like the breakers'), keyed by their next attempt, so
// the delivery worker's "what is due" is one Query; a delivered or failed
// delivery leaves it. Like BREAKERS#, it is a single index partition: fine
// for the deliveries in retry at any moment, not for millions.
const (
	skWebhook      = "WEBHOOK#"
	deliveriesDue  = "WHDUE"
	deliveryPKHead = "WHDLV#"
)

func deliveryPK(tenant, webhookID string) string {
	return deliveryPKHead + strconv.Quote(tenant) + "#" + webhookID
}

func deliveryDueKey(next time.Time, pk, sk string) string {
	return fmt.Sprintf("%020d#%s#%s", nanos(next), pk, sk)
}

func webhookItem(w store.Webhook) map[string]types.AttributeValue {
	events := make([]types.AttributeValue, len(w.Events))
	for i, e := range w.Events {
		events[i] = attrS(e)
	}
	m := map[string]types.AttributeValue{
		attrPK: attrS(tenantPK(w.Tenant)), attrSK: attrS(skWebhook + w.ID),
		"tenant": attrS(w.Tenant), "id": attrS(w.ID), "url": attrS(w.URL),
		"events": &types.AttributeValueMemberL{Value: events}, "createdAt": attrN(nanos(w.CreatedAt)),
		"kind": attrS(string(kindOrHTTP(w.Kind))),
	}
	if w.Secret != "" {
		m["secret"] = attrS(w.Secret)
	}
	return m
}

func webhookFrom(m map[string]types.AttributeValue) store.Webhook {
	w := store.Webhook{Tenant: getS(m, "tenant"), ID: getS(m, "id"), URL: getS(m, "url"), Secret: getS(m, "secret"),
		CreatedAt: fromNanos(getN(m, "createdAt")), Kind: kindOrHTTP(store.WebhookKind(getS(m, "kind")))}
	if l, ok := m["events"].(*types.AttributeValueMemberL); ok {
		w.Events = make([]string, 0, len(l.Value))
		for _, v := range l.Value {
			if s, ok := v.(*types.AttributeValueMemberS); ok {
				w.Events = append(w.Events, s.Value)
			}
		}
	}
	return w
}

// CreateWebhook puts the webhook record on condition it does not exist.
func (s *Store) CreateWebhook(ctx context.Context, w store.Webhook) error {
	if w.Tenant == "" || w.ID == "" || w.URL == "" {
		return fmt.Errorf("create webhook: %w: empty tenant, id or url", store.ErrInvalidArgument)
	}
	err := s.putItem(ctx, webhookItem(w), "attribute_not_exists(pk)", nil, nil)
	if err != nil {
		return fmt.Errorf("create webhook %s/%s: %w", w.Tenant, w.ID, mapErr(err))
	}
	return nil
}

// GetWebhook reads one webhook record.
func (s *Store) GetWebhook(ctx context.Context, tenant, id string) (store.Webhook, error) {
	rec, err := s.getItem(ctx, tenantPK(tenant), skWebhook+id)
	if err != nil {
		return store.Webhook{}, fmt.Errorf("get webhook %s/%s: %w", tenant, id, err)
	}
	if rec == nil {
		return store.Webhook{}, fmt.Errorf("webhook %s/%s: %w", tenant, id, store.ErrNotFound)
	}
	return webhookFrom(rec), nil
}

// ListWebhooks queries the tenant's partition for WEBHOOK# records.
func (s *Store) ListWebhooks(ctx context.Context, tenant string) ([]store.Webhook, error) {
	recs, err := s.query(ctx, &dynamodb.QueryInput{
		KeyConditionExpression: aws.String("pk = :pk AND begins_with(sk, :sk)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":pk": attrS(tenantPK(tenant)), ":sk": attrS(skWebhook),
		},
		ConsistentRead: aws.Bool(true),
	}, 0)
	if err != nil {
		return nil, fmt.Errorf("list webhooks: %w", err)
	}
	out := make([]store.Webhook, 0, len(recs))
	for _, r := range recs {
		out = append(out, webhookFrom(r))
	}
	return out, nil
}

// DeleteWebhook deletes the record on condition it exists.
func (s *Store) DeleteWebhook(ctx context.Context, tenant, id string) error {
	err := s.deleteItem(ctx, tenantPK(tenant), skWebhook+id, "attribute_exists(pk)")
	if isConditionFailed(err) {
		return fmt.Errorf("webhook %s/%s: %w", tenant, id, store.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("delete webhook %s/%s: %w", tenant, id, err)
	}
	return nil
}

func checkDelivery(d store.Delivery) error {
	if d.Tenant == "" || d.WebhookID == "" || d.ID == "" {
		return fmt.Errorf("delivery: %w: empty tenant, webhook or id", store.ErrInvalidArgument)
	}
	switch d.Status {
	case store.DeliveryPending, store.DeliveryDelivered, store.DeliveryFailed:
	default:
		return fmt.Errorf("delivery %s: %w: status %q", d.ID, store.ErrInvalidArgument, d.Status)
	}
	if d.Attempts < 0 {
		return fmt.Errorf("delivery %s: %w: negative attempts", d.ID, store.ErrInvalidArgument)
	}
	return nil
}

func deliveryItem(d store.Delivery) map[string]types.AttributeValue {
	pk := deliveryPK(d.Tenant, d.WebhookID)
	m := map[string]types.AttributeValue{
		attrPK: attrS(pk), attrSK: attrS(d.ID),
		"tenant": attrS(d.Tenant), "webhook": attrS(d.WebhookID), "body": &types.AttributeValueMemberB{Value: append([]byte{}, d.Body...)},
		"status": attrS(string(d.Status)), "attempts": attrN(int64(d.Attempts)), "nextAt": attrN(nanos(d.NextAttemptAt)),
		"lastStatus": attrN(int64(d.LastStatus)), "lastAt": attrN(nanos(d.LastAttemptAt)),
		"deliveredAt": attrN(nanos(d.DeliveredAt)), "createdAt": attrN(nanos(d.CreatedAt)), "v": attrN(0),
	}
	for name, v := range map[string]string{"eventId": d.EventID, "eventType": d.EventType, "lastError": d.LastError} {
		if v != "" {
			m[name] = attrS(v)
		}
	}
	if d.Status == store.DeliveryPending {
		m["g2pk"], m["g2sk"] = attrS(deliveriesDue), attrS(deliveryDueKey(d.NextAttemptAt, pk, d.ID))
	}
	return m
}

func deliveryFrom(m map[string]types.AttributeValue) store.Delivery {
	d := store.Delivery{
		Tenant: getS(m, "tenant"), WebhookID: getS(m, "webhook"), ID: getS(m, attrSK), EventID: getS(m, "eventId"),
		EventType: getS(m, "eventType"), Status: store.DeliveryStatus(getS(m, "status")), Attempts: int(getN(m, "attempts")),
		NextAttemptAt: fromNanos(getN(m, "nextAt")), LastStatus: int(getN(m, "lastStatus")), LastError: getS(m, "lastError"),
		LastAttemptAt: fromNanos(getN(m, "lastAt")), DeliveredAt: fromNanos(getN(m, "deliveredAt")),
		CreatedAt: fromNanos(getN(m, "createdAt")), Version: getN(m, "v"),
	}
	if b, ok := m["body"].(*types.AttributeValueMemberB); ok {
		d.Body = b.Value
	}
	return d
}

// AddDeliveries puts each delivery on condition it does not exist (an
// existing one is left as it is).
func (s *Store) AddDeliveries(ctx context.Context, ds []store.Delivery) error {
	for _, d := range ds {
		if err := checkDelivery(d); err != nil {
			return err
		}
	}
	for _, d := range ds {
		err := s.putItem(ctx, deliveryItem(d), "attribute_not_exists(pk)", nil, nil)
		if err != nil && !isConditionFailed(err) {
			return fmt.Errorf("add delivery %s: %w", d.ID, err)
		}
	}
	return nil
}

// GetDelivery reads one delivery record.
func (s *Store) GetDelivery(ctx context.Context, tenant, webhookID, id string) (store.Delivery, error) {
	rec, err := s.getItem(ctx, deliveryPK(tenant, webhookID), id)
	if err != nil {
		return store.Delivery{}, fmt.Errorf("get delivery %s: %w", id, err)
	}
	if rec == nil {
		return store.Delivery{}, fmt.Errorf("delivery %s/%s/%s: %w", tenant, webhookID, id, store.ErrNotFound)
	}
	return deliveryFrom(rec), nil
}

// ListDeliveries queries the webhook's delivery collection backwards.
func (s *Store) ListDeliveries(ctx context.Context, p store.ListDeliveriesParams) ([]store.Delivery, error) {
	if p.Limit <= 0 {
		return nil, fmt.Errorf("list deliveries: %w: limit %d", store.ErrInvalidArgument, p.Limit)
	}
	in := &dynamodb.QueryInput{
		KeyConditionExpression:    aws.String("pk = :pk"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": attrS(deliveryPK(p.Tenant, p.WebhookID))},
		ScanIndexForward:          aws.Bool(false),
		ConsistentRead:            aws.Bool(true),
	}
	if p.Before != "" {
		in.KeyConditionExpression = aws.String("pk = :pk AND sk < :before")
		in.ExpressionAttributeValues[":before"] = attrS(p.Before)
	}
	recs, err := s.query(ctx, in, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("list deliveries: %w", err)
	}
	out := make([]store.Delivery, 0, len(recs))
	for _, r := range recs {
		out = append(out, deliveryFrom(r))
	}
	return out, nil
}

// DueDeliveries queries the WHDUE partition of the running index up to
// p.Now and reads the records; the index is eventually consistent, so
// status and time are checked on the record.
func (s *Store) DueDeliveries(ctx context.Context, p store.DueDeliveriesParams) ([]store.Delivery, error) {
	if p.Limit <= 0 {
		return nil, fmt.Errorf("due deliveries: %w: limit %d", store.ErrInvalidArgument, p.Limit)
	}
	idx, err := s.query(ctx, &dynamodb.QueryInput{
		IndexName:              aws.String(indexRunning),
		KeyConditionExpression: aws.String("g2pk = :pk AND g2sk < :to"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":pk": attrS(deliveriesDue), ":to": attrS(fmt.Sprintf("%020d$", nanos(p.Now))),
		},
	}, p.Limit*2)
	if err != nil {
		return nil, fmt.Errorf("due deliveries: %w", err)
	}
	keys := make([]map[string]types.AttributeValue, len(idx))
	for i, k := range idx {
		keys[i] = key(getS(k, attrPK), getS(k, attrSK))
	}
	recs, err := s.batchGet(ctx, keys, true)
	if err != nil {
		return nil, fmt.Errorf("due deliveries: %w", err)
	}
	out := make([]store.Delivery, 0, len(recs))
	for _, r := range recs {
		d := deliveryFrom(r)
		if d.Status == store.DeliveryPending && !d.NextAttemptAt.After(p.Now) {
			out = append(out, d)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if !a.NextAttemptAt.Equal(b.NextAttemptAt) {
			return a.NextAttemptAt.Before(b.NextAttemptAt)
		}
		if a.Tenant != b.Tenant {
			return a.Tenant < b.Tenant
		}
		if a.WebhookID != b.WebhookID {
			return a.WebhookID < b.WebhookID
		}
		return a.ID < b.ID
	})
	if len(out) > p.Limit {
		out = out[:p.Limit]
	}
	return out, nil
}

// UpdateDelivery sets the mutable fields with one UpdateItem conditional
// on the version, entering or leaving the due index with the status.
func (s *Store) UpdateDelivery(ctx context.Context, d store.Delivery) (store.Delivery, error) {
	if err := checkDelivery(d); err != nil {
		return store.Delivery{}, err
	}
	pk := deliveryPK(d.Tenant, d.WebhookID)
	set := "SET #status = :status, attempts = :attempts, nextAt = :nextAt, lastStatus = :lastStatus, lastAt = :lastAt, " +
		"deliveredAt = :deliveredAt, lastError = :lastError, v = v + :one"
	values := map[string]types.AttributeValue{
		":status": attrS(string(d.Status)), ":attempts": attrN(int64(d.Attempts)), ":nextAt": attrN(nanos(d.NextAttemptAt)),
		":lastStatus": attrN(int64(d.LastStatus)), ":lastAt": attrN(nanos(d.LastAttemptAt)),
		":deliveredAt": attrN(nanos(d.DeliveredAt)), ":lastError": attrS(d.LastError), ":one": attrN(1), ":v": attrN(d.Version),
	}
	if d.Status == store.DeliveryPending {
		set += ", g2pk = :duePK, g2sk = :dueSK"
		values[":duePK"], values[":dueSK"] = attrS(deliveriesDue), attrS(deliveryDueKey(d.NextAttemptAt, pk, d.ID))
	} else {
		set += " REMOVE g2pk, g2sk"
	}
	rec, err := s.updateItem(ctx, &dynamodb.UpdateItemInput{
		Key:                       key(pk, d.ID),
		UpdateExpression:          aws.String(set),
		ConditionExpression:       aws.String("attribute_exists(pk) AND v = :v"),
		ExpressionAttributeNames:  map[string]string{"#status": "status"},
		ExpressionAttributeValues: values,
	})
	if isConditionFailed(err) {
		cur, gerr := s.getItem(ctx, pk, d.ID)
		switch {
		case gerr != nil:
			return store.Delivery{}, fmt.Errorf("update delivery %s: %w", d.ID, errors.Join(mapErr(err), gerr))
		case cur == nil:
			return store.Delivery{}, fmt.Errorf("delivery %s: %w", d.ID, store.ErrNotFound)
		}
		return store.Delivery{}, fmt.Errorf("delivery %s: version %d is stale (now %d): %w", d.ID, d.Version, getN(cur, "v"), store.ErrConflict)
	}
	if err != nil {
		return store.Delivery{}, fmt.Errorf("update delivery %s: %w", d.ID, err)
	}
	return deliveryFrom(rec), nil
}

// kindOrHTTP reads the empty kind (webhooks made before kinds) as http.
func kindOrHTTP(k store.WebhookKind) store.WebhookKind {
	if k == "" {
		return store.WebhookHTTP
	}
	return k
}
