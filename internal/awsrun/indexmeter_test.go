package awsrun_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/qunfa/qunfa/internal/awsemu"
	"github.com/qunfa/qunfa/internal/store/dynamostore"
)

// indexMeter counts the write units a table's global secondary indexes
// consume, which DynamoDB bills and dynalite does not report. As the
// DynamoDB developer guide states it (GSI.html, "Writes to a global
// secondary index"): a write that adds an item with the index's key
// attributes puts one index entry; one that changes an indexed key value
// deletes the old entry and puts the new one (two writes); one that
// removes the key attributes or the item deletes the entry (one write);
// one that changes neither the keys nor a projected attribute writes
// nothing to the index. Each index write costs one unit per KB of the
// entry: every qunfa index projects KEYS_ONLY (table and index keys,
// well under 1 KB), so one unit each.
//
// It reads the written records before and after each write with a client
// of its own (not metered), so it also sees what UpdateItem expressions
// change; concurrent writes of one record between those reads are not
// told apart (the benchmark's writers touch a record one at a time).
type indexMeter struct {
	plain   *dynamodb.Client
	table   string
	indexes map[string][2]string // index name → hash and range attribute

	mu    sync.Mutex
	units map[string]float64 // by index
}

// newIndexMeter reads the table's indexes (DescribeTable).
func newIndexMeter(ctx context.Context, plain *dynamodb.Client, table string) (*indexMeter, error) {
	out, err := plain.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)})
	if err != nil {
		return nil, err
	}
	m := &indexMeter{plain: plain, table: table, indexes: map[string][2]string{}, units: map[string]float64{}}
	for _, g := range out.Table.GlobalSecondaryIndexes {
		if g.Projection == nil || g.Projection.ProjectionType != types.ProjectionTypeKeysOnly {
			return nil, fmt.Errorf("index %s: the meter prices KEYS_ONLY entries only", aws.ToString(g.IndexName))
		}
		var k [2]string
		for _, e := range g.KeySchema {
			if e.KeyType == types.KeyTypeHash {
				k[0] = aws.ToString(e.AttributeName)
			} else {
				k[1] = aws.ToString(e.AttributeName)
			}
		}
		m.indexes[aws.ToString(g.IndexName)] = k
	}
	if len(m.indexes) == 0 {
		return nil, fmt.Errorf("table %s has no global secondary index to meter", table)
	}
	return m, nil
}

// take returns the units counted since the last take, by index.
func (m *indexMeter) take() map[string]float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	u := m.units
	m.units = map[string]float64{}
	return u
}

// entry is a record's key in one index ("" when the record is not in it).
func entry(rec map[string]types.AttributeValue, k [2]string) string {
	h, ok1 := rec[k[0]].(*types.AttributeValueMemberS)
	r, ok2 := rec[k[1]].(*types.AttributeValueMemberS)
	if !ok1 || !ok2 {
		return ""
	}
	return h.Value + "\x00" + r.Value
}

// indexWrites is how many index writes turn record before into after.
func indexWrites(before, after map[string]types.AttributeValue, k [2]string) int {
	b, a := entry(before, k), entry(after, k)
	switch {
	case b == a:
		return 0
	case b == "" || a == "":
		return 1
	default:
		return 2
	}
}

func (m *indexMeter) read(ctx context.Context, keys []map[string]types.AttributeValue) []map[string]types.AttributeValue {
	recs := make([]map[string]types.AttributeValue, len(keys))
	for i, k := range keys {
		out, err := m.plain.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(m.table), Key: k, ConsistentRead: aws.Bool(true)})
		if err == nil {
			recs[i] = out.Item
		}
	}
	return recs
}

func keyOf(item map[string]types.AttributeValue) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": item["pk"], "sk": item["sk"]}
}

// writtenKeys lists the records a write request names.
func writtenKeys(params any) []map[string]types.AttributeValue {
	switch in := params.(type) {
	case *dynamodb.PutItemInput:
		return []map[string]types.AttributeValue{keyOf(in.Item)}
	case *dynamodb.UpdateItemInput:
		return []map[string]types.AttributeValue{in.Key}
	case *dynamodb.DeleteItemInput:
		return []map[string]types.AttributeValue{in.Key}
	case *dynamodb.BatchWriteItemInput:
		var keys []map[string]types.AttributeValue
		for _, reqs := range in.RequestItems {
			for _, r := range reqs {
				switch {
				case r.PutRequest != nil:
					keys = append(keys, keyOf(r.PutRequest.Item))
				case r.DeleteRequest != nil:
					keys = append(keys, r.DeleteRequest.Key)
				}
			}
		}
		return keys
	}
	return nil
}

// meter makes a copy of a DynamoDB client whose writes are metered.
func (m *indexMeter) meter(cl *dynamodb.Client) *dynamodb.Client {
	return dynamodb.New(cl.Options(), func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, func(st *middleware.Stack) error {
			return st.Initialize.Add(middleware.InitializeMiddlewareFunc("qunfaIndexWrites",
				func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
					keys := writtenKeys(in.Parameters)
					if len(keys) == 0 {
						return next.HandleInitialize(ctx, in)
					}
					before := m.read(ctx, keys)
					out, md, err := next.HandleInitialize(ctx, in)
					after := m.read(ctx, keys)
					m.mu.Lock()
					for name, k := range m.indexes {
						for i := range keys {
							m.units[name] += float64(indexWrites(before[i], after[i], k))
						}
					}
					m.mu.Unlock()
					return out, md, err
				}), middleware.After)
		})
	})
}

// TestIndexWrites: the index writes a table write costs, as the DynamoDB
// guide counts them.
func TestIndexWrites(t *testing.T) {
	k := [2]string{"g3pk", "g3sk"}
	rec := func(kv ...string) map[string]types.AttributeValue {
		m := map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "JOB#j"}, "sk": &types.AttributeValueMemberS{Value: "P#0"}}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = &types.AttributeValueMemberS{Value: kv[i+1]}
		}
		return m
	}
	for _, c := range []struct {
		name          string
		before, after map[string]types.AttributeValue
		want          int
	}{
		{"new item with the keys", nil, rec("g3pk", "a", "g3sk", "1"), 1},
		{"new item without them", nil, rec("st", "x"), 0},
		{"other attributes change", rec("g3pk", "a", "g3sk", "1", "st", "x"), rec("g3pk", "a", "g3sk", "1", "st", "y"), 0},
		{"range key changes", rec("g3pk", "a", "g3sk", "1"), rec("g3pk", "a", "g3sk", "2"), 2},
		{"hash key changes", rec("g3pk", "a", "g3sk", "1"), rec("g3pk", "b", "g3sk", "1"), 2},
		{"keys removed", rec("g3pk", "a", "g3sk", "1"), rec("st", "x"), 1},
		{"item deleted", rec("g3pk", "a", "g3sk", "1"), nil, 1},
		{"only the hash key present: not in the index", nil, rec("g3pk", "a"), 0},
	} {
		if got := indexWrites(c.before, c.after, k); got != c.want {
			t.Errorf("%s: %d index writes, want %d", c.name, got, c.want)
		}
	}
}

// TestIndexMeterCountsWrites drives the meter through a client on
// dynalite: a put into the due index, an update moving the entry, an
// update of other attributes, a delete.
func TestIndexMeterCountsWrites(t *testing.T) {
	ctx := context.Background()
	db, table := emulatedTable(t, "qunfa-index-meter")
	m, err := newIndexMeter(ctx, db, table)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.indexes) != 4 {
		t.Fatalf("indexes %v, want the table's four", m.indexes)
	}
	cl := m.meter(db)
	s := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	k := map[string]types.AttributeValue{"pk": s("JOB#j"), "sk": s("P#000000#0000000000")}
	steps := []struct {
		name string
		do   func() error
		want float64
	}{
		{"put with due keys", func() error {
			_, err := cl.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: map[string]types.AttributeValue{
				"pk": k["pk"], "sk": k["sk"], "g3pk": s("DUE#j"), "g3sk": s("1"), "st": s("p")}})
			return err
		}, 1},
		{"update moving the due entry", func() error {
			_, err := cl.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(table), Key: k,
				UpdateExpression: aws.String("SET g3sk = :v"), ExpressionAttributeValues: map[string]types.AttributeValue{":v": s("2")}})
			return err
		}, 2},
		{"update of the status only", func() error {
			_, err := cl.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(table), Key: k,
				UpdateExpression: aws.String("SET st = :v"), ExpressionAttributeValues: map[string]types.AttributeValue{":v": s("s")}})
			return err
		}, 0},
		{"batch delete", func() error {
			_, err := cl.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: map[string][]types.WriteRequest{
				table: {{DeleteRequest: &types.DeleteRequest{Key: k}}}}})
			return err
		}, 1},
	}
	for _, st := range steps {
		if err := st.do(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if got := m.take()["due"]; got != st.want {
			t.Errorf("%s: %v index units on due, want %v", st.name, got, st.want)
		}
	}
}

// emulatedTable is a client of the DynamoDB emulator and a new qunfa
// table on it named prefix-<unix nanos>.
func emulatedTable(tb testing.TB, prefix string) (*dynamodb.Client, string) {
	tb.Helper()
	db := dynamodb.New(dynamodb.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(awsemu.DynamoDB(tb)),
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
	})
	table := fmt.Sprintf("%s-%d", prefix, time.Now().UnixNano())
	if err := dynamostore.CreateTable(context.Background(), db, table); err != nil {
		tb.Fatal(err)
	}
	return db, table
}
