package dynamostore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/qunfa/qunfa/internal/awsemu"
	"github.com/qunfa/qunfa/internal/store"
)

// TestClaimSkipsAPageTheIndexStillNames: the due index lags behind the
// pages on AWS, so it may name a status page that no longer exists (or
// not yet). A claim given such a candidate before a page with due items
// skips it and claims from the next one: it neither crashes nor stops
// with items due.
func TestClaimSkipsAPageTheIndexStillNames(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := dynamodb.New(dynamodb.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(awsemu.DynamoDB(t)),
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
	})
	table := fmt.Sprintf("qunfa-lag-%d", time.Now().UnixNano())
	if err := CreateTable(ctx, c, table); err != nil {
		t.Fatalf("CreateTable: %v", err)
	}
	t.Cleanup(func() {
		_, _ = c.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(table)})
	})
	s := New(c, table, Options{})
	t0 := time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, err := s.CreateJob(ctx, store.CreateJobParams{
		Job:    store.Job{ID: "lag", Tenant: "t", Total: 3, ShardCount: 1, CreatedAt: t0},
		Shards: []store.Shard{{Index: 0, Account: "a", Size: 3, SlowFactor: 1}},
	}); err != nil {
		t.Fatal(err)
	}
	items := []store.Item{{JobID: "lag", Seq: 0, Account: "a", To: "u0"}, {JobID: "lag", Seq: 1, Account: "a", To: "u1"}, {JobID: "lag", Seq: 2, Account: "a", To: "u2"}}
	if err := s.PutItems(ctx, store.PutItemsParams{JobID: "lag", Items: items}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.TransitionJob(ctx, store.TransitionJobParams{JobID: "lag", To: store.JobRunning, At: t0}); err != nil {
		t.Fatal(err)
	}
	cand := func(block int64) map[string]types.AttributeValue {
		return map[string]types.AttributeValue{"g3sk": attrS(fmt.Sprintf(pageKeyFmt+"#%010d", 0, block))}
	}
	p := store.ClaimItemsParams{JobID: "lag", Index: 0, Max: 2, Now: t0, ClaimID: "c1"}
	// Alone, the missing page gives an empty claim, no error.
	if res, done, err := s.claimFrom(ctx, p, nanos(t0), []map[string]types.AttributeValue{cand(7)}); err != nil || !done || len(res.Items) != 0 {
		t.Fatalf("claim from a missing page = %d items, done %v, %v; want none, done", len(res.Items), done, err)
	}
	res, done, err := s.claimFrom(ctx, p, nanos(t0), []map[string]types.AttributeValue{cand(7), cand(0)})
	if err != nil || !done || len(res.Items) != 2 || res.Items[0].Seq != 0 || res.Items[1].Seq != 1 {
		t.Fatalf("claim past a missing page = %+v, done %v, %v; want items 0 and 1", res.Items, done, err)
	}
}
