package dynamostore

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/qunfa/qunfa/internal/store"
)

var _ store.QuotaStore = (*Store)(nil)

// Quota records:
//
//	TENANT#<tenant>   QUOTA                 maxRun, maxRcpt, updated
//	TENANT#<tenant>   RCPT#<yyyy-mm-dd>     n: recipients accepted that UTC day
//
// Active jobs (store.ActiveJobStatuses) are counted on the submitted index:
// a starting, running or paused job's record carries g4pk = ACTIVE#<tenant>,
// g4sk = <job>, set by the status write that makes it active and removed by
// the one that makes it final, so a job is counted once whatever the number
// of writers, and a redriven job counts again.
const (
	skQuota    = "QUOTA"
	skDailyPfx = "RCPT#"
	activePfx  = "ACTIVE#"
)

func activePK(tenant string) string { return activePfx + tenant }

// PutQuota writes the tenant's quota record.
func (s *Store) PutQuota(ctx context.Context, q store.Quota) error {
	if q.Tenant == "" || q.MaxRunningJobs < 0 || q.MaxRecipientsPerDay < 0 {
		return fmt.Errorf("put quota: %w: a tenant and limits of 0 or more are required", store.ErrInvalidArgument)
	}
	err := s.putItem(ctx, map[string]types.AttributeValue{
		attrPK: attrS(tenantPK(q.Tenant)), attrSK: attrS(skQuota),
		"maxRun": attrN(q.MaxRunningJobs), "maxRcpt": attrN(q.MaxRecipientsPerDay), "updated": attrN(nanos(q.UpdatedAt)),
	}, "", nil, nil)
	if err != nil {
		return fmt.Errorf("put quota of %s: %w", q.Tenant, mapErr(err))
	}
	return nil
}

// GetQuota reads the tenant's quota record (zero when absent).
func (s *Store) GetQuota(ctx context.Context, tenant string) (store.Quota, error) {
	rec, err := s.getItem(ctx, tenantPK(tenant), skQuota)
	if err != nil {
		return store.Quota{}, fmt.Errorf("read quota of %s: %w", tenant, mapErr(err))
	}
	q := store.Quota{Tenant: tenant}
	if rec != nil {
		q.MaxRunningJobs, q.MaxRecipientsPerDay, q.UpdatedAt = getN(rec, "maxRun"), getN(rec, "maxRcpt"), fromNanosN(getN(rec, "updated"))
	}
	return q, nil
}

// CountActiveJobs queries the submitted index under ACTIVE#<tenant> with
// Select COUNT, reading at most limit keys.
func (s *Store) CountActiveJobs(ctx context.Context, tenant string, limit int) (int, error) {
	if limit <= 0 {
		return 0, fmt.Errorf("count active jobs: %w: limit must be positive", store.ErrInvalidArgument)
	}
	in := &dynamodb.QueryInput{
		TableName:                 aws.String(s.table),
		IndexName:                 aws.String(indexSubmitted),
		KeyConditionExpression:    aws.String("g4pk = :pk"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": attrS(activePK(tenant))},
		Select:                    types.SelectCount,
		ReturnConsumedCapacity:    s.capacity(),
	}
	n := 0
	for n < limit {
		in.Limit = aws.Int32(int32(limit - n))
		out, err := s.db.Query(ctx, in)
		if err != nil {
			return 0, fmt.Errorf("count active jobs of %s: %w", tenant, mapErr(err))
		}
		s.consumed("Query", out.ConsumedCapacity)
		n += int(out.Count)
		if len(out.LastEvaluatedKey) == 0 {
			break
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
	return min(n, limit), nil
}

// AddRecipients is one UpdateItem ADD on the day's counter, conditional on
// the total staying within Max; a refused add reads the counter.
func (s *Store) AddRecipients(ctx context.Context, p store.AddRecipientsParams) (store.AddRecipientsResult, error) {
	if p.Tenant == "" || p.Day == "" || p.Max < 0 {
		return store.AddRecipientsResult{}, fmt.Errorf("add recipients: %w: tenant, day and a bound of 0 or more are required", store.ErrInvalidArgument)
	}
	in := &dynamodb.UpdateItemInput{
		Key:                       key(tenantPK(p.Tenant), skDailyPfx+p.Day),
		UpdateExpression:          aws.String("ADD n :n"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":n": attrN(p.N)},
	}
	if p.N > 0 && p.Max > 0 {
		if p.N > p.Max {
			return s.refusedAdd(ctx, p)
		}
		// n + N <= Max, written as n <= Max − N.
		in.ConditionExpression = aws.String("attribute_not_exists(n) OR n <= :room")
		in.ExpressionAttributeValues[":room"] = attrN(p.Max - p.N)
	}
	rec, err := s.updateItem(ctx, in)
	if isConditionFailed(err) {
		return s.refusedAdd(ctx, p)
	}
	if err != nil {
		return store.AddRecipientsResult{}, fmt.Errorf("add recipients of %s on %s: %w", p.Tenant, p.Day, mapErr(err))
	}
	return store.AddRecipientsResult{Added: true, Total: max(getN(rec, "n"), 0)}, nil
}

func (s *Store) refusedAdd(ctx context.Context, p store.AddRecipientsParams) (store.AddRecipientsResult, error) {
	rec, err := s.getItem(ctx, tenantPK(p.Tenant), skDailyPfx+p.Day)
	if err != nil {
		return store.AddRecipientsResult{}, fmt.Errorf("read recipients of %s on %s: %w", p.Tenant, p.Day, mapErr(err))
	}
	return store.AddRecipientsResult{Total: getN(rec, "n")}, nil
}

// activeKeys are the submitted-index attributes of an active job record.
func activeKeys(j store.Job) (pk, sk types.AttributeValue) {
	return attrS(activePK(j.Tenant)), attrS(j.ID)
}
