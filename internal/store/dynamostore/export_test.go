package dynamostore

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// PutIdempotencyRecordForTest writes only the idempotency record of a job,
// as a CreateJob that crashed right after its first write leaves it.
func (s *Store) PutIdempotencyRecordForTest(ctx context.Context, tenant, key, jobID, hash string) error {
	return s.putItem(ctx, map[string]types.AttributeValue{
		attrPK: attrS(idemPK(tenant, key)), attrSK: attrS(skSingle),
		"job": attrS(jobID), "hash": attrS(hash),
	}, "", nil, nil)
}
