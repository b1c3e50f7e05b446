package dynamostore

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/qunfa/qunfa/internal/store"
)

var _ store.AuditStore = (*Store)(nil)

// The audit log: AUDIT#<tenant> / <at, 20 digits>#<id>, and for a call
// that touched a job a copy under AUDITJOB#<tenant>#<job>, so both
// listings are one Query newest first, at one or two writes per
// state-changing call.
func auditPK(tenant string) string         { return "AUDIT#" + tenant }
func auditJobPK(tenant, job string) string { return "AUDITJOB#" + tenant + "#" + job }
func auditSK(e store.AuditEntry) string    { return fmt.Sprintf("%020d#%s", nanos(e.At), e.ID) }
func auditRecord(pk string, e store.AuditEntry) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		attrPK: attrS(pk), attrSK: attrS(auditSK(e)),
		"tenant": attrS(e.Tenant), "id": attrS(e.ID), "at": attrN(nanos(e.At)),
		"tokenId": attrS(e.TokenID), "tokenName": attrS(e.TokenName), "role": attrS(string(e.Role)),
		"method": attrS(e.Method), "route": attrS(e.Route), "path": attrS(e.Path), "status": attrN(int64(e.Status)),
		"job": attrS(e.JobID), "account": attrS(e.Account),
	}
}

// AppendAudit writes the entry (and its copy under the job).
func (s *Store) AppendAudit(ctx context.Context, e store.AuditEntry) error {
	if e.Tenant == "" || e.ID == "" {
		return fmt.Errorf("append audit: %w: tenant and id are required", store.ErrInvalidArgument)
	}
	if err := s.putItem(ctx, auditRecord(auditPK(e.Tenant), e), "", nil, nil); err != nil {
		return fmt.Errorf("append audit of %s: %w", e.Tenant, err)
	}
	if e.JobID != "" {
		if err := s.putItem(ctx, auditRecord(auditJobPK(e.Tenant, e.JobID), e), "", nil, nil); err != nil {
			return fmt.Errorf("append audit of job %s: %w", e.JobID, err)
		}
	}
	return nil
}

// ListAudit queries the tenant's (or the job's) entries newest first.
func (s *Store) ListAudit(ctx context.Context, p store.ListAuditParams) (store.ListAuditResult, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = 50
	}
	pk := auditPK(p.Tenant)
	if p.JobID != "" {
		pk = auditJobPK(p.Tenant, p.JobID)
	}
	in := &dynamodb.QueryInput{
		KeyConditionExpression:    aws.String("pk = :pk"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": attrS(pk)},
		ScanIndexForward:          aws.Bool(false),
	}
	if p.Cursor != "" {
		var c keyCursor
		if err := decodeCursor(p.Cursor, &c); err != nil {
			return store.ListAuditResult{}, err
		}
		if c["pk"] != pk {
			return store.ListAuditResult{}, fmt.Errorf("%w: bad cursor", store.ErrInvalidArgument)
		}
		in.ExclusiveStartKey = c.key()
	}
	recs, err := s.query(ctx, in, limit+1)
	if err != nil {
		return store.ListAuditResult{}, fmt.Errorf("list audit of %s: %w", p.Tenant, err)
	}
	var res store.ListAuditResult
	if len(recs) > limit {
		recs = recs[:limit]
		last := recs[limit-1]
		if res.NextCursor, err = encodeCursor(keyCursor{"pk": getS(last, attrPK), "sk": getS(last, attrSK)}); err != nil {
			return store.ListAuditResult{}, err
		}
	}
	for _, r := range recs {
		res.Entries = append(res.Entries, store.AuditEntry{
			Tenant: getS(r, "tenant"), ID: getS(r, "id"), At: fromNanosN(getN(r, "at")),
			TokenID: getS(r, "tokenId"), TokenName: getS(r, "tokenName"), Role: store.Role(getS(r, "role")),
			Method: getS(r, "method"), Route: getS(r, "route"), Path: getS(r, "path"), Status: int(getN(r, "status")),
			JobID: getS(r, "job"), Account: getS(r, "account"),
		})
	}
	return res, nil
}
