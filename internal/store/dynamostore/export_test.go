package dynamostore

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/qunfa/qunfa/internal/store"
)

// PutIdempotencyRecordForTest writes only the idempotency record of a job,
// as a CreateJob that crashed right after its first write leaves it.
func (s *Store) PutIdempotencyRecordForTest(ctx context.Context, tenant, key, jobID, hash string) error {
	return s.putItem(ctx, map[string]types.AttributeValue{
		attrPK: attrS(idemPK(tenant, key)), attrSK: attrS(skSingle),
		"job": attrS(jobID), "hash": attrS(hash),
	}, "", nil, nil)
}

// RemoveShardEpochForTest removes the epoch attribute of a shard record, as
// records written before count epochs existed lack it.
func (s *Store) RemoveShardEpochForTest(ctx context.Context, jobID string, index int) error {
	u := newUpdate()
	u.Remove("epoch")
	in := u.input(jobID, index, "attribute_exists(pk)")
	in.ExpressionAttributeValues = nil
	_, err := s.updateItem(ctx, in)
	s.cache.dropShard(jobID, index) // written behind the version's back
	return err
}

// PutShardForTest writes one shard record, as a CreateJob that crashed
// after writing some of its shards leaves it.
func (s *Store) PutShardForTest(ctx context.Context, sh store.Shard) error {
	s.cache.dropShard(sh.JobID, sh.Index)
	return s.putItem(ctx, shardItem(sh), "", nil, nil)
}

// FrequencyExpiresAtForTest reads the TTL attribute (expires_at, Unix
// seconds) of a recipient's frequency record; 0 when absent.
func (s *Store) FrequencyExpiresAtForTest(ctx context.Context, tenant, account, to string) (int64, error) {
	rec, err := s.getItem(ctx, freqPK(tenant, account, to), skSingle)
	if err != nil {
		return 0, err
	}
	return getN(rec, attrExpiresAt), nil
}

// ShardRecordForTest reads a shard record's version (sv) and running-index
// partition (g2pk) as they are in the table.
func (s *Store) ShardRecordForTest(ctx context.Context, jobID string, index int) (version int64, indexPK string, err error) {
	rec, err := s.getItem(ctx, jobPK(jobID), skShard(index))
	return getN(rec, "sv"), getS(rec, "g2pk"), err
}

// PutLegacyBreakerForTest writes a breaker record and its transitions as
// versions before the history moved into the record left them: the
// record without "h" (nor the swept mark) and one BRKHIST# record per
// transition in the ring slot of its sequence number.
func (s *Store) PutLegacyBreakerForTest(ctx context.Context, b store.Breaker, hist []store.BreakerTransition) error {
	b.Transitions = int64(len(hist))
	if err := s.putItem(ctx, breakerItem(b), "", nil, nil); err != nil {
		return err
	}
	for i, tr := range hist {
		tr.Seq = int64(i + 1)
		m := map[string]types.AttributeValue{
			attrPK: attrS(tenantPK(b.Tenant)), attrSK: attrS(fmt.Sprintf("%s%s#%03d", skBreakerHist, b.Account, (tr.Seq-1)%store.MaxBreakerHistory)),
			"account": attrS(b.Account), "seq": attrN(tr.Seq), "from": attrS(string(tr.From)), "to": attrS(string(tr.To)),
			"at": attrN(nanos(tr.At)), "rate": attrF(tr.FailureRate), "att": attrN(tr.Attempts),
			"streak": attrN(int64(tr.ConsecutiveFailures)), "opens": attrN(int64(tr.Opens)), "reason": attrS(tr.Reason),
		}
		if err := s.putItem(ctx, m, "", nil, nil); err != nil {
			return err
		}
	}
	return nil
}

// LegacyBreakerHistoryForTest counts the BRKHIST# records of an account
// left in the table.
func (s *Store) LegacyBreakerHistoryForTest(ctx context.Context, tenant, account string) (int, error) {
	hist, err := s.legacyBreakerHistory(ctx, tenant, account)
	return len(hist), err
}

// RefHashForTest is where a reference's items go in a hashed look-up
// record: its bucket and its tag.
func RefHashForTest(ref string) (bucket int, tag uint32) {
	h := refHash(ref)
	return hashedRefBucket(h), refTag(h)
}

// MakeRefFormatOldForTest removes the job record's rf, as jobs created
// before hashed look-up records lack it: their references go to R#
// records.
func (s *Store) MakeRefFormatOldForTest(ctx context.Context, jobID string) error {
	_, err := s.updateItem(ctx, &dynamodb.UpdateItemInput{
		Key: key(jobPK(jobID), skJob), UpdateExpression: aws.String("REMOVE rf"),
	})
	return err
}

// CountRecordsForTest counts a job's records whose sort key begins with
// prefix.
func (s *Store) CountRecordsForTest(ctx context.Context, jobID, prefix string) (int, error) {
	recs, err := s.query(ctx, &dynamodb.QueryInput{
		KeyConditionExpression: aws.String("pk = :pk AND begins_with(sk, :p)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":pk": attrS(jobPK(jobID)), ":p": attrS(prefix),
		},
	}, 0)
	return len(recs), err
}

// RemoveJobDataWidthForTest removes the payload width attribute of a job
// record, as jobs created before payload records were sized by bytes
// lack it.
func (s *Store) RemoveJobDataWidthForTest(ctx context.Context, jobID string) error {
	_, err := s.updateItem(ctx, &dynamodb.UpdateItemInput{
		Key: key(jobPK(jobID), skJob), UpdateExpression: aws.String("REMOVE " + attrDataWidth),
	})
	return err
}

// PayloadRecordsForTest lists the sizes of a job's payload records (D#),
// as recordSize counts them, and the job's payload width.
func (s *Store) PayloadRecordsForTest(ctx context.Context, jobID string) (sizes []int, width int64, err error) {
	recs, err := s.query(ctx, &dynamodb.QueryInput{
		KeyConditionExpression: aws.String("pk = :pk AND begins_with(sk, :d)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":pk": attrS(jobPK(jobID)), ":d": attrS("D#"),
		},
	}, 0)
	if err != nil {
		return nil, 0, err
	}
	for _, r := range recs {
		sizes = append(sizes, recordSize(r))
	}
	_, l, err := s.getJobLayout(ctx, jobID)
	return sizes, l.dataWidth, err
}
