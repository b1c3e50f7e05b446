package dynamostore

import (
	"crypto/rand"
	"encoding/base64"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Additive updates (AdvanceShard, AddShardCounts, ReserveBudget) run under
// the SDK's automatic retries: an UpdateItem that DynamoDB applied but whose
// answer was lost (connection reset, timeout) is sent again. An ADD applied
// twice would corrupt the counts for good, so each such update is a
// compare-and-swap on the record's version that also records a request id
// in the record's short list of recent ids (attrRequests). A retry of an
// applied update then fails its condition; the adapter reads the record
// again, finds its id there and returns success instead of applying it
// again. The list keeps the last keptRequests ids: far more than the writes
// a record takes within one SDK retry window.
const (
	attrRequests = "rq"
	keptRequests = 8
)

// newRequestID returns a random id for one logical update (12 bytes of
// randomness, 16 characters).
func newRequestID() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b) // crypto/rand never fails on supported platforms
	return base64.RawURLEncoding.EncodeToString(b)
}

// requestsOf returns the request ids recorded on rec, oldest first.
func requestsOf(rec map[string]types.AttributeValue) []string {
	l, ok := rec[attrRequests].(*types.AttributeValueMemberL)
	if !ok {
		return nil
	}
	out := make([]string, 0, len(l.Value))
	for _, v := range l.Value {
		if s, ok := v.(*types.AttributeValueMemberS); ok {
			out = append(out, s.Value)
		}
	}
	return out
}

// applied reports whether the update with request id rid is part of rec.
func applied(rec map[string]types.AttributeValue, rid string) bool {
	for _, id := range requestsOf(rec) {
		if id == rid {
			return true
		}
	}
	return false
}

// requestList returns the list attribute recording rid after the ids of
// rec, keeping the last keptRequests.
func requestList(rec map[string]types.AttributeValue, rid string) types.AttributeValue {
	ids := append(requestsOf(rec), rid)
	if len(ids) > keptRequests {
		ids = ids[len(ids)-keptRequests:]
	}
	l := make([]types.AttributeValue, len(ids))
	for i, id := range ids {
		l[i] = attrS(id)
	}
	return &types.AttributeValueMemberL{Value: l}
}

// recordRequest sets the request list of rec with rid added.
func (u *updateBuilder) recordRequest(rec map[string]types.AttributeValue, rid string) {
	u.Set(attrRequests, requestList(rec, rid))
}
