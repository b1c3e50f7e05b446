package dynamostore

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/qunfa/qunfa/internal/store"
)

// maxListLimit caps the page size of listings.
const maxListLimit = 1000

func suppressionFrom(m map[string]types.AttributeValue) store.Suppression {
	return store.Suppression{
		Account: getS(m, "account"), To: getS(m, "to"), Reason: getS(m, "reason"),
		CreatedAt: fromNanos(getN(m, "createdAt")),
	}
}

// PutSuppressions writes the entries with BatchWriteItem (a duplicate in
// the call is written once, the last one winning, as BatchWriteItem
// refuses two requests for one key).
func (s *Store) PutSuppressions(ctx context.Context, tenant string, entries []store.Suppression) error {
	if tenant == "" {
		return fmt.Errorf("put suppressions: %w: empty tenant", store.ErrInvalidArgument)
	}
	if len(entries) > store.MaxPutItems {
		return fmt.Errorf("put suppressions: %w: %d entries, at most %d", store.ErrInvalidArgument, len(entries), store.MaxPutItems)
	}
	last := map[string]int{}
	for i, e := range entries {
		if e.Account == "" || e.To == "" {
			return fmt.Errorf("put suppressions: %w: empty account or recipient", store.ErrInvalidArgument)
		}
		last[skSupp(e.Account, e.To)] = i
	}
	reqs := make([]types.WriteRequest, 0, len(last))
	for i, e := range entries {
		if last[skSupp(e.Account, e.To)] != i {
			continue
		}
		item := map[string]types.AttributeValue{
			attrPK: attrS(suppPK(tenant)), attrSK: attrS(skSupp(e.Account, e.To)),
			"account": attrS(e.Account), "to": attrS(e.To),
		}
		if e.Reason != "" {
			item["reason"] = attrS(e.Reason)
		}
		if t := nanos(e.CreatedAt); t != 0 {
			item["createdAt"] = attrN(t)
		}
		reqs = append(reqs, types.WriteRequest{PutRequest: &types.PutRequest{Item: item}})
	}
	// The tenant's change mark first: entries are never on the list with
	// a mark older than they are (a crash after it only costs look-ups).
	if err := s.markSuppressions(ctx, tenant, entries); err != nil {
		return err
	}
	if err := s.batchWrite(ctx, reqs); err != nil {
		return fmt.Errorf("put suppressions of %s: %w", tenant, err)
	}
	return nil
}

// The change mark of a tenant's suppression list (SuppressionsChangedAt):
// its own record, outside the list's partition so listing never sees it.
func suppMarkPK(tenant string) string { return "SUPPMARK#" + tenant }

const skSuppMark = "M"

// markSuppressions moves the tenant's mark forward to the newest CreatedAt
// of entries (the end of time for an entry without one); a mark already
// later is kept.
func (s *Store) markSuppressions(ctx context.Context, tenant string, entries []store.Suppression) error {
	if len(entries) == 0 {
		return nil
	}
	var newest int64
	for _, e := range entries {
		t := nanos(e.CreatedAt)
		if t == 0 {
			t = nanos(store.EndOfTime)
		}
		newest = max(newest, t)
	}
	out, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(s.table),
		Key:                       key(suppMarkPK(tenant), skSuppMark),
		UpdateExpression:          aws.String("SET #at = :t"),
		ConditionExpression:       aws.String("attribute_not_exists(#at) OR #at < :t"),
		ExpressionAttributeNames:  map[string]string{"#at": "at"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":t": attrN(newest)},
		ReturnConsumedCapacity:    s.capacity(),
	})
	if err != nil && !isConditionFailed(err) {
		return fmt.Errorf("mark suppressions of %s: %w", tenant, err)
	}
	if err == nil {
		s.consumed("UpdateItem", out.ConsumedCapacity)
	}
	return nil
}

// SuppressionsChangedAt reads the tenant's mark (eventually consistent:
// callers allow a margin). A tenant whose list has entries but no mark
// (written before marks existed) gets the end of time.
func (s *Store) SuppressionsChangedAt(ctx context.Context, tenant string) (time.Time, error) {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(s.table), Key: key(suppMarkPK(tenant), skSuppMark), ReturnConsumedCapacity: s.capacity(),
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("suppressions of %s: %w", tenant, mapErr(err))
	}
	s.consumed("GetItem", out.ConsumedCapacity)
	if out.Item != nil {
		return fromNanos(getN(out.Item, "at")), nil
	}
	page, err := s.ListSuppressions(ctx, store.ListSuppressionsParams{Tenant: tenant, Limit: 1})
	if err != nil {
		return time.Time{}, err
	}
	if len(page.Entries) > 0 {
		return store.EndOfTime, nil
	}
	return time.Time{}, nil
}

// DeleteSuppression deletes one entry (DeleteItem; absent is no error).
func (s *Store) DeleteSuppression(ctx context.Context, tenant, account, to string) error {
	if tenant == "" {
		return fmt.Errorf("delete suppression: %w: empty tenant", store.ErrInvalidArgument)
	}
	if err := s.deleteItem(ctx, suppPK(tenant), skSupp(account, to), ""); err != nil {
		return fmt.Errorf("delete suppression %s/%s: %w", account, to, err)
	}
	return nil
}

// SuppressedAmong reads the entries of the given recipients by key: one
// BatchGetItem per 100 recipients, the chunks in parallel. The reads are
// eventually consistent (half the read units): the senders check every
// batch, so an entry added a moment ago is honoured by the next one.
func (s *Store) SuppressedAmong(ctx context.Context, tenant string, keys []store.RecipientKey) (map[store.RecipientKey]bool, error) {
	if tenant == "" {
		return nil, fmt.Errorf("suppressed among: %w: empty tenant", store.ErrInvalidArgument)
	}
	if len(keys) > store.MaxPutItems {
		return nil, fmt.Errorf("suppressed among: %w: %d recipients, at most %d", store.ErrInvalidArgument, len(keys), store.MaxPutItems)
	}
	seen := map[store.RecipientKey]bool{}
	var ks []map[string]types.AttributeValue
	for _, k := range keys {
		// Entries never have an empty account or recipient: such a
		// recipient cannot be on the list.
		if seen[k] || k.Account == "" || k.To == "" {
			continue
		}
		seen[k] = true
		ks = append(ks, key(suppPK(tenant), skSupp(k.Account, k.To)))
	}
	var (
		mu  sync.Mutex
		out = map[store.RecipientKey]bool{}
	)
	const chunk = 100
	err := s.parallel(ctx, (len(ks)+chunk-1)/chunk, func(ctx context.Context, i int) error {
		recs, err := s.batchGet(ctx, ks[i*chunk:min((i+1)*chunk, len(ks))], false)
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		for _, r := range recs {
			out[store.RecipientKey{Account: getS(r, "account"), To: getS(r, "to")}] = true
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("suppressed among: %w", err)
	}
	return out, nil
}

// suppressionCursor is the sort key of the last entry of a page.
type suppressionCursor struct {
	SK string `json:"sk"`
}

// ListSuppressions queries the tenant's suppression partition, which sorts
// by account then recipient.
func (s *Store) ListSuppressions(ctx context.Context, p store.ListSuppressionsParams) (store.ListSuppressionsResult, error) {
	if p.Tenant == "" || p.Limit < 0 {
		return store.ListSuppressionsResult{}, fmt.Errorf("list suppressions: %w: empty tenant or negative limit", store.ErrInvalidArgument)
	}
	limit := p.Limit
	if limit == 0 {
		limit = 100
	}
	limit = min(limit, maxListLimit)
	in := &dynamodb.QueryInput{
		KeyConditionExpression:    aws.String("pk = :pk"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": attrS(suppPK(p.Tenant))},
		ConsistentRead:            aws.Bool(true),
	}
	if p.Cursor != "" {
		var c suppressionCursor
		if err := decodeCursor(p.Cursor, &c); err != nil || c.SK == "" {
			return store.ListSuppressionsResult{}, fmt.Errorf("list suppressions: %w: bad cursor", store.ErrInvalidArgument)
		}
		in.ExclusiveStartKey = key(suppPK(p.Tenant), c.SK)
	}
	recs, err := s.query(ctx, in, limit+1)
	if err != nil {
		return store.ListSuppressionsResult{}, fmt.Errorf("list suppressions of %s: %w", p.Tenant, err)
	}
	var res store.ListSuppressionsResult
	if len(recs) > limit {
		recs = recs[:limit]
		if res.NextCursor, err = encodeCursor(suppressionCursor{SK: getS(recs[limit-1], attrSK)}); err != nil {
			return store.ListSuppressionsResult{}, err
		}
	}
	for _, r := range recs {
		res.Entries = append(res.Entries, suppressionFrom(r))
	}
	return res, nil
}
