package dynamostore

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/qunfa/qunfa/internal/store"
)

// TTLAttribute is the table's TTL attribute (Unix seconds): DynamoDB
// deletes a record some time after it. template.yaml's
// TimeToLiveSpecification names it.
const TTLAttribute = "expires_at"

// Retention of finished jobs' item data. A job entering a final status
// gets the running index entry g2pk = EXPIRE, g2sk = <finishedAt 20d>#<job>
// (TransitionJob, ReleaseJob); ExpireFinishedItems works through those
// jobs oldest first and stamps TTLAttribute = finishedAt + retention on
// every record of the job but the job record itself and its shard records
// (J, K#…): status pages, member lists, payloads, error details, staged
// parts and chunks. The job's summary and counts stay. Progress is kept on
// the job record (xc: the last sort key stamped) so the work is spread
// over any number of bounded calls, and the entry leaves the index when
// the job is done. A job re-opened (running again) leaves the index; its
// records already stamped keep their expiry.
const expirePK = "EXPIRE"

func expiryIndexKeys(finishedAt time.Time, jobID string) (types.AttributeValue, types.AttributeValue) {
	return attrS(expirePK), attrS(fmt.Sprintf("%020d#%s", nanos(finishedAt), jobID))
}

// keptForever reports whether a record of a job stays after the
// retention: the job record and its shards (summary and counts).
func keptForever(sk string) bool { return sk == skJob || strings.HasPrefix(sk, "K#") }

// ExpireFinishedItems stamps the expiry on at most p.Limit item records of
// finished jobs (see the retention notes above). A job still holding
// pending or submitted items is deferred (its index entry moves an hour
// on, so it does not block the others): such items may still be sent or
// settled, and their data must stay.
func (s *Store) ExpireFinishedItems(ctx context.Context, p store.ExpireItemsParams) (store.ExpireItemsResult, error) {
	var res store.ExpireItemsResult
	if p.Limit <= 0 || p.Retain <= 0 {
		return res, fmt.Errorf("expire finished items: limit %d and retention %s must be positive", p.Limit, p.Retain)
	}
	entries, err := s.query(ctx, &dynamodb.QueryInput{
		IndexName:                 aws.String(indexRunning),
		KeyConditionExpression:    aws.String("g2pk = :pk AND g2sk < :up"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": attrS(expirePK), ":up": attrS(fmt.Sprintf("%020d~", nanos(p.Now)))},
	}, 20)
	if err != nil {
		return res, fmt.Errorf("expire finished items: list jobs: %w", err)
	}
	budget := p.Limit
	for _, e := range entries {
		if budget <= 0 {
			res.More = true
			break
		}
		jobID := strings.TrimPrefix(getS(e, attrPK), "JOB#")
		n, done, deferred, err := s.expireJob(ctx, jobID, p, budget)
		res.Records += n
		budget -= n
		if err != nil {
			return res, err
		}
		switch {
		case deferred:
			res.Deferred++
		case done:
			res.Jobs++
		default:
			res.More = true
		}
	}
	return res, nil
}

// expireJob stamps up to budget records of one finished job, from the
// cursor kept on its job record.
func (s *Store) expireJob(ctx context.Context, jobID string, p store.ExpireItemsParams, budget int) (stamped int, done, deferred bool, err error) {
	rec, err := s.getItem(ctx, jobPK(jobID), skJob)
	if err != nil {
		return 0, false, false, fmt.Errorf("expire items of job %s: %w", jobID, err)
	}
	if rec == nil || getS(rec, "g2pk") != expirePK {
		return 0, true, false, nil // gone, or re-opened since the index was read
	}
	job := jobFrom(rec)
	view, err := s.GetJob(ctx, jobID)
	if err != nil {
		return 0, false, false, fmt.Errorf("expire items of job %s: %w", jobID, err)
	}
	if c := view.Counts(); c.Pending > 0 || c.Submitted > 0 {
		_, sk := expiryIndexKeys(p.Now.Add(time.Hour), jobID)
		err := s.updateJobExpiry(ctx, jobID, job.Status, "SET g2sk = :sk", map[string]types.AttributeValue{":sk": sk})
		return 0, false, true, err
	}
	at := attrN(job.FinishedAt.Add(p.Retain).Unix())
	in := &dynamodb.QueryInput{
		KeyConditionExpression:    aws.String("pk = :pk"),
		ProjectionExpression:      aws.String("pk, sk, #ttl"),
		ExpressionAttributeNames:  map[string]string{"#ttl": TTLAttribute},
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": attrS(jobPK(jobID))},
	}
	if c := getS(rec, "xc"); c != "" {
		in.ExclusiveStartKey = key(jobPK(jobID), c)
	}
	recs, err := s.query(ctx, in, budget+1)
	if err != nil {
		return 0, false, false, fmt.Errorf("expire items of job %s: list records: %w", jobID, err)
	}
	last := ""
	for i, r := range recs {
		if i == budget {
			break
		}
		sk := getS(r, attrSK)
		last = sk
		if keptForever(sk) || getN(r, TTLAttribute) > 0 {
			continue
		}
		_, err := s.updateItem(ctx, &dynamodb.UpdateItemInput{
			Key:                       key(jobPK(jobID), sk),
			UpdateExpression:          aws.String("SET #ttl = :at"),
			ConditionExpression:       aws.String("attribute_exists(pk)"),
			ExpressionAttributeNames:  map[string]string{"#ttl": TTLAttribute},
			ExpressionAttributeValues: map[string]types.AttributeValue{":at": at},
			ReturnValues:              types.ReturnValueNone,
		})
		if err != nil && !isConditionFailed(err) {
			return stamped, false, false, fmt.Errorf("expire items of job %s: record %s: %w", jobID, sk, err)
		}
		stamped++
	}
	if len(recs) <= budget {
		err := s.updateJobExpiry(ctx, jobID, job.Status, "REMOVE g2pk, g2sk, xc", nil)
		return stamped, err == nil, false, err
	}
	err = s.updateJobExpiry(ctx, jobID, job.Status, "SET xc = :c", map[string]types.AttributeValue{":c": attrS(last)})
	return stamped, false, false, err
}

// updateJobExpiry changes the job record's expiry entry if the job is
// still finished in the status read (a re-opened job left the index).
func (s *Store) updateJobExpiry(ctx context.Context, jobID string, status store.JobStatus, expr string, values map[string]types.AttributeValue) error {
	if values == nil {
		values = map[string]types.AttributeValue{}
	}
	values[":st"], values[":xpk"] = attrS(string(status)), attrS(expirePK)
	_, err := s.updateItem(ctx, &dynamodb.UpdateItemInput{
		Key:                       key(jobPK(jobID), skJob),
		UpdateExpression:          aws.String(expr),
		ConditionExpression:       aws.String("#st = :st AND g2pk = :xpk"),
		ExpressionAttributeNames:  map[string]string{"#st": "status"},
		ExpressionAttributeValues: values,
		ReturnValues:              types.ReturnValueNone,
	})
	if err != nil && !isConditionFailed(err) {
		return fmt.Errorf("expire items of job %s: progress: %w", jobID, err)
	}
	return nil
}
