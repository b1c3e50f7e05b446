package dynamostore

import (
	"context"
	"fmt"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/qunfa/qunfa/internal/store"
)

var _ store.MsgCallStore = (*Store)(nil)

// A MsgCall is two records with the same attributes: one keyed by the
// provider's message id (pk MSGCALL#"account"#msgid, sk MSGCALL), read by
// a provider event with one GetItem, and one in its job's partition of
// calls (pk MSGJOB#job, sk "account"#msgid), read by the reconciler with
// one Query. Seqs are store.EncodeSeqs runs: a call of 10,000 items of a
// shard is a few bytes.
const (
	msgCallPKHead = "MSGCALL#"
	msgCallSK     = "MSGCALL"
	msgJobPKHead  = "MSGJOB#"
)

func msgCallID(account, msgID string) string { return strconv.Quote(account) + "#" + msgID }

func msgCallItem(pk, sk string, c store.MsgCall) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		attrPK: attrS(pk), attrSK: attrS(sk),
		"account": attrS(c.Account), "msgId": attrS(c.MsgID), "jobId": attrS(c.JobID),
		"shard": attrN(int64(c.Shard)), "claimId": attrS(c.ClaimID), "seqs": attrS(store.EncodeSeqs(c.Seqs)),
		"at": attrN(nanos(c.At)),
	}
}

func msgCallFrom(m map[string]types.AttributeValue) (store.MsgCall, error) {
	c := store.MsgCall{Account: getS(m, "account"), MsgID: getS(m, "msgId"), JobID: getS(m, "jobId"),
		Shard: int(getN(m, "shard")), ClaimID: getS(m, "claimId"), At: fromNanos(getN(m, "at"))}
	var err error
	c.Seqs, err = store.DecodeSeqs(getS(m, "seqs"))
	return c, err
}

// PutMsgCall stores c: its job's record first, so a call an event can
// find is always one the reconciler can find.
func (s *Store) PutMsgCall(ctx context.Context, c store.MsgCall) error {
	if !store.ValidMsgCall(c) {
		return fmt.Errorf("put msg call: %w: empty id or 0 or over %d seqs", store.ErrInvalidArgument, store.MaxMsgCallSeqs)
	}
	id := msgCallID(c.Account, c.MsgID)
	if err := s.putItem(ctx, msgCallItem(msgJobPKHead+c.JobID, id, c), "", nil, nil); err != nil {
		return fmt.Errorf("put msg call %s of job %s: %w", id, c.JobID, mapErr(err))
	}
	if err := s.putItem(ctx, msgCallItem(msgCallPKHead+id, msgCallSK, c), "", nil, nil); err != nil {
		return fmt.Errorf("put msg call %s: %w", id, mapErr(err))
	}
	return nil
}

// GetMsgCall reads the call of account's message id.
func (s *Store) GetMsgCall(ctx context.Context, account, msgID string) (store.MsgCall, error) {
	id := msgCallID(account, msgID)
	rec, err := s.getItem(ctx, msgCallPKHead+id, msgCallSK)
	if err != nil {
		return store.MsgCall{}, fmt.Errorf("get msg call %s: %w", id, err)
	}
	if rec == nil {
		return store.MsgCall{}, fmt.Errorf("msg call %s: %w", id, store.ErrNotFound)
	}
	return msgCallFrom(rec)
}

// ListMsgCalls lists a job's calls.
func (s *Store) ListMsgCalls(ctx context.Context, jobID string) ([]store.MsgCall, error) {
	recs, err := s.query(ctx, &dynamodb.QueryInput{
		KeyConditionExpression:    aws.String("pk = :pk"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": attrS(msgJobPKHead + jobID)},
		ConsistentRead:            aws.Bool(true),
	}, 0)
	if err != nil {
		return nil, fmt.Errorf("list msg calls of %s: %w", jobID, err)
	}
	out := make([]store.MsgCall, 0, len(recs))
	for _, r := range recs {
		c, err := msgCallFrom(r)
		if err != nil {
			return nil, fmt.Errorf("list msg calls of %s: %w", jobID, err)
		}
		out = append(out, c)
	}
	return out, nil
}
