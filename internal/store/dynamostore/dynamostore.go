package dynamostore

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/qunfa/qunfa/internal/store"
)

var _ store.Store = (*Store)(nil)

// Options tunes a Store.
type Options struct {
	// OnCapacity, when set, receives the capacity consumed by every request
	// (the requests then ask for ReturnConsumedCapacity TOTAL). op names
	// the DynamoDB operation. Used by the cost benchmark and for metrics.
	OnCapacity func(op string, c types.ConsumedCapacity)
	// Logger receives adapter warnings; nil means slog.Default().
	Logger *slog.Logger
	// MaxRetries bounds the optimistic retries of one read-modify-write
	// (token buckets, status pages, job counters) before ErrConflict.
	// 0 means 50.
	MaxRetries int
}

// Store is the DynamoDB adapter of store.Store. It is safe for concurrent
// use. Its caches save reads, never decide writes: member lists (which
// never change once a job runs) and the records of recordCache (cache.go).
type Store struct {
	db    *dynamodb.Client
	table string
	opts  Options
	log   *slog.Logger

	membersMu sync.Mutex
	members   map[string]*members // key: pk + member sk

	cache recordCache
}

// New returns a Store on table (created with CreateTable or template.yaml).
func New(client *dynamodb.Client, table string, opts Options) *Store {
	if opts.MaxRetries <= 0 {
		opts.MaxRetries = 50
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Store{db: client, table: table, opts: opts, log: log, members: map[string]*members{}}
}

// maxCachedMembers bounds the member-list cache.
const maxCachedMembers = 4096

// Key layout (see the package doc).
func jobPK(id string) string                  { return "JOB#" + id }
func bucketPK(name string) string             { return "BUCKET#" + name }
func tenantPK(tenant string) string           { return "TENANT#" + tenant }
func tokenPK(hash string) string              { return "TOKEN#" + hash }
func idemPK(tenant, key string) string        { return "IDEM#" + strconv.Quote(tenant) + "#" + key }
func skShard(index int) string                { return fmt.Sprintf("K#%06d", index) }
func skPage(index int, block int64) string    { return fmt.Sprintf("P#%06d#%010d", index, block) }
func skMembers(index int, block int64) string { return fmt.Sprintf("M#%06d#%010d", index, block) }
func skData(dblock int64) string              { return fmt.Sprintf("D#%010d", dblock) }
func skErr(index int, seq int64) string       { return fmt.Sprintf("E#%06d#%012d", index, seq) }
func suppPK(tenant string) string             { return "SUPP#" + tenant }

// skSupp is the sort key of a suppression entry: the account in hex, a dot,
// the recipient. Hex keeps the byte order of accounts and never contains
// the dot, which sorts before every hex digit, so the keys sort by account,
// then recipient, whatever characters the account holds.
func skSupp(account, to string) string { return hex.EncodeToString([]byte(account)) + "." + to }

const (
	skJob      = "J"
	skSingle   = "_" // sort key of single-record partitions
	skAccount  = "ACCOUNT#"
	skBreaker  = "BREAKER#"
	skCampaign = "CAMPAIGN#"
)

func key(pk, sk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrPK: attrS(pk), attrSK: attrS(sk)}
}

func attrS(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
func attrN(v int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
}
func attrF(v float64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatFloat(v, 'g', -1, 64)}
}
func attrBool(v bool) types.AttributeValue { return &types.AttributeValueMemberBOOL{Value: v} }

func getS(m map[string]types.AttributeValue, name string) string {
	if v, ok := m[name].(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}

func getN(m map[string]types.AttributeValue, name string) int64 {
	if v, ok := m[name].(*types.AttributeValueMemberN); ok {
		n, err := strconv.ParseInt(v.Value, 10, 64)
		if err == nil {
			return n
		}
		f, _ := strconv.ParseFloat(v.Value, 64)
		return int64(f)
	}
	return 0
}

func getF(m map[string]types.AttributeValue, name string) float64 {
	if v, ok := m[name].(*types.AttributeValueMemberN); ok {
		f, _ := strconv.ParseFloat(v.Value, 64)
		return f
	}
	return 0
}

func getBool(m map[string]types.AttributeValue, name string) bool {
	if v, ok := m[name].(*types.AttributeValueMemberBOOL); ok {
		return v.Value
	}
	return false
}

// capacity asks for consumed capacity only when someone listens.
func (s *Store) capacity() types.ReturnConsumedCapacity {
	if s.opts.OnCapacity != nil {
		return types.ReturnConsumedCapacityTotal
	}
	return types.ReturnConsumedCapacityNone
}

func (s *Store) consumed(op string, cs ...*types.ConsumedCapacity) {
	if s.opts.OnCapacity == nil {
		return
	}
	for _, c := range cs {
		if c != nil {
			s.opts.OnCapacity(op, *c)
		}
	}
}

func (s *Store) consumedList(op string, cs []types.ConsumedCapacity) {
	if s.opts.OnCapacity == nil {
		return
	}
	for _, c := range cs {
		s.opts.OnCapacity(op, c)
	}
}

// isConditionFailed reports whether err is a lost conditional write.
func isConditionFailed(err error) bool {
	var e *types.ConditionalCheckFailedException
	return errors.As(err, &e)
}

// mapErr translates backend errors that have a port meaning.
func mapErr(err error) error {
	if err == nil {
		return nil
	}
	if isConditionFailed(err) {
		return fmt.Errorf("%w: %v", store.ErrConflict, err)
	}
	return err
}

func (s *Store) getItem(ctx context.Context, pk, sk string) (map[string]types.AttributeValue, error) {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:              aws.String(s.table),
		Key:                    key(pk, sk),
		ConsistentRead:         aws.Bool(true),
		ReturnConsumedCapacity: s.capacity(),
	})
	if err != nil {
		return nil, err
	}
	s.consumed("GetItem", out.ConsumedCapacity)
	return out.Item, nil
}

func (s *Store) putItem(ctx context.Context, item map[string]types.AttributeValue, cond string, names map[string]string, values map[string]types.AttributeValue) error {
	in := &dynamodb.PutItemInput{
		TableName:              aws.String(s.table),
		Item:                   item,
		ReturnConsumedCapacity: s.capacity(),
	}
	if cond != "" {
		in.ConditionExpression = aws.String(cond)
	}
	if len(names) > 0 {
		in.ExpressionAttributeNames = names
	}
	if len(values) > 0 {
		in.ExpressionAttributeValues = values
	}
	out, err := s.db.PutItem(ctx, in)
	if err != nil {
		return err
	}
	s.consumed("PutItem", out.ConsumedCapacity)
	return nil
}

// deleteItem deletes one record, on condition cond when it is not empty.
func (s *Store) deleteItem(ctx context.Context, pk, sk, cond string) error {
	in := &dynamodb.DeleteItemInput{
		TableName:              aws.String(s.table),
		Key:                    key(pk, sk),
		ReturnConsumedCapacity: s.capacity(),
	}
	if cond != "" {
		in.ConditionExpression = aws.String(cond)
	}
	out, err := s.db.DeleteItem(ctx, in)
	if err != nil {
		return err
	}
	s.consumed("DeleteItem", out.ConsumedCapacity)
	return nil
}

// queryKeys runs a query on a KEYS_ONLY index to its end and reads the
// records it names with BatchGetItem, in index order; records deleted
// since the index saw them are left out.
func (s *Store) queryKeys(ctx context.Context, in *dynamodb.QueryInput) ([]map[string]types.AttributeValue, error) {
	idx, err := s.query(ctx, in, 0)
	if err != nil {
		return nil, err
	}
	keys := make([]map[string]types.AttributeValue, len(idx))
	for i, k := range idx {
		keys[i] = key(getS(k, attrPK), getS(k, attrSK))
	}
	recs, err := s.batchGet(ctx, keys, true)
	if err != nil {
		return nil, err
	}
	out := make([]map[string]types.AttributeValue, 0, len(keys))
	for _, k := range keys {
		if r, ok := recs[recordID(k)]; ok {
			out = append(out, r)
		}
	}
	return out, nil
}

func (s *Store) updateItem(ctx context.Context, in *dynamodb.UpdateItemInput) (map[string]types.AttributeValue, error) {
	in.TableName = aws.String(s.table)
	in.ReturnConsumedCapacity = s.capacity()
	if in.ReturnValues == "" {
		in.ReturnValues = types.ReturnValueAllNew
	}
	out, err := s.db.UpdateItem(ctx, in)
	if err != nil {
		return nil, err
	}
	s.consumed("UpdateItem", out.ConsumedCapacity)
	return out.Attributes, nil
}

// query runs a query to its end or until limit records (0 = no limit).
func (s *Store) query(ctx context.Context, in *dynamodb.QueryInput, limit int) ([]map[string]types.AttributeValue, error) {
	in.TableName = aws.String(s.table)
	in.ReturnConsumedCapacity = s.capacity()
	var items []map[string]types.AttributeValue
	for {
		if limit > 0 {
			in.Limit = aws.Int32(int32(limit - len(items)))
		}
		out, err := s.db.Query(ctx, in)
		if err != nil {
			return nil, err
		}
		s.consumed("Query", out.ConsumedCapacity)
		items = append(items, out.Items...)
		if len(out.LastEvaluatedKey) == 0 || (limit > 0 && len(items) >= limit) {
			return items, nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}

// batchGet reads records by key, in chunks of 100, retrying unprocessed
// keys; consistent asks for strongly consistent reads (twice the read
// units). Missing records are absent from the result, which is keyed by
// pk + "\x00" + sk.
func (s *Store) batchGet(ctx context.Context, keys []map[string]types.AttributeValue, consistent bool) (map[string]map[string]types.AttributeValue, error) {
	res := map[string]map[string]types.AttributeValue{}
	seen := map[string]bool{}
	var uniq []map[string]types.AttributeValue
	for _, k := range keys {
		id := getS(k, attrPK) + "\x00" + getS(k, attrSK)
		if !seen[id] {
			seen[id] = true
			uniq = append(uniq, k)
		}
	}
	for start := 0; start < len(uniq); start += 100 {
		end := min(start+100, len(uniq))
		pending := map[string]types.KeysAndAttributes{
			s.table: {Keys: uniq[start:end], ConsistentRead: aws.Bool(consistent)},
		}
		for attempt := 0; len(pending) > 0; attempt++ {
			if attempt > 0 {
				if err := backoff(ctx, attempt); err != nil {
					return nil, err
				}
			}
			out, err := s.db.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{
				RequestItems:           pending,
				ReturnConsumedCapacity: s.capacity(),
			})
			if err != nil {
				return nil, err
			}
			s.consumedList("BatchGetItem", out.ConsumedCapacity)
			for _, it := range out.Responses[s.table] {
				res[getS(it, attrPK)+"\x00"+getS(it, attrSK)] = it
			}
			pending = out.UnprocessedKeys
		}
	}
	return res, nil
}

// batchWrite writes records unconditionally in chunks of 25, retrying
// unprocessed ones.
func (s *Store) batchWrite(ctx context.Context, reqs []types.WriteRequest) error {
	for start := 0; start < len(reqs); start += 25 {
		end := min(start+25, len(reqs))
		pending := map[string][]types.WriteRequest{s.table: reqs[start:end]}
		for attempt := 0; len(pending) > 0; attempt++ {
			if attempt > 0 {
				if err := backoff(ctx, attempt); err != nil {
					return err
				}
			}
			out, err := s.db.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{
				RequestItems:           pending,
				ReturnConsumedCapacity: s.capacity(),
			})
			if err != nil {
				return err
			}
			s.consumedList("BatchWriteItem", out.ConsumedCapacity)
			pending = out.UnprocessedItems
		}
	}
	return nil
}

// backoff waits before retrying throttled batch work (I/O retry inside the
// adapter, bounded by ctx).
func backoff(ctx context.Context, attempt int) error {
	d := time.Duration(min(attempt, 8)) * 20 * time.Millisecond
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// contendedBackoff waits before retrying a conditional write lost to a
// concurrent writer of the same record: a random ("full jitter") wait of up
// to 2 ms × 2^attempt, at most 100 ms, so that contenders spread out
// instead of colliding again in lockstep.
func contendedBackoff(ctx context.Context, attempt int) error {
	ceiling := min(2*time.Millisecond<<min(attempt, 6), 100*time.Millisecond)
	t := time.NewTimer(rand.N(ceiling) + time.Millisecond/2)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func recordID(item map[string]types.AttributeValue) string {
	return getS(item, attrPK) + "\x00" + getS(item, attrSK)
}

// encodeCursor turns a record key into an opaque page cursor.
func encodeCursor(v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

func decodeCursor(cursor string, v any) error {
	b, err := base64.RawURLEncoding.DecodeString(cursor)
	if err == nil {
		err = json.Unmarshal(b, v)
	}
	if err != nil {
		return fmt.Errorf("%w: bad cursor", store.ErrInvalidArgument)
	}
	return nil
}

// keyCursor is the JSON form of an ExclusiveStartKey made of string
// attributes only.
type keyCursor map[string]string

func toKeyCursor(k map[string]types.AttributeValue) keyCursor {
	c := keyCursor{}
	for n, v := range k {
		if sv, ok := v.(*types.AttributeValueMemberS); ok {
			c[n] = sv.Value
		}
	}
	return c
}

func (c keyCursor) key() map[string]types.AttributeValue {
	k := map[string]types.AttributeValue{}
	for n, v := range c {
		k[n] = attrS(v)
	}
	return k
}
