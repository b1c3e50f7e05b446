package dynamostore_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/store/dynamostore"
)

// TestFinishedJobsItemsExpire: once a job has finished, bounded calls of
// ExpireFinishedItems give every item record of it (status pages, member
// lists, payloads, error details) the TTL attribute finishedAt +
// retention, and none to the job and shard records, which keep the
// summary and counts; a running job, and a finished one whose items may
// still be sent, keep all their data.
func TestFinishedJobsItemsExpire(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := client(t)
	table := newTable(t, c)
	s := dynamostore.New(c, table, dynamostore.Options{})
	const n = 600 // three status pages, ten payload records
	oneShardJob(t, s, "done", n)
	oneShardJob(t, s, "open", 10)
	oneShardJob(t, s, "stopped", 10) // cancelled with its items still pending

	var ups []store.ItemUpdate
	for seq := range int64(n) {
		ups = append(ups, store.ItemUpdate{Seq: seq, From: store.ItemPending, To: store.ItemAbandoned,
			Error: &store.ItemError{Category: store.CategoryCancelled, Message: "cancelled by the test"}})
	}
	res, err := s.UpdateItems(ctx, store.UpdateItemsParams{JobID: "done", Index: 0, Updates: ups, At: t0})
	if err != nil {
		t.Fatal(err)
	}
	sh, err := s.GetShard(ctx, "done", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.AddShardCounts(ctx, store.AddShardCountsParams{JobID: "done", Index: 0, Epoch: sh.Epoch, Delta: res.Delta, FailuresDelta: res.FailuresDelta}); err != nil {
		t.Fatal(err)
	}
	finished := t0.Add(time.Hour)
	for _, id := range []string{"done", "stopped"} {
		if _, err := s.TransitionJob(ctx, store.TransitionJobParams{JobID: id, To: store.JobCancelled, At: finished}); err != nil {
			t.Fatal(err)
		}
	}

	const retain = 30 * 24 * time.Hour
	var total store.ExpireItemsResult
	for calls := 0; ; calls++ {
		if calls > 200 {
			t.Fatal("ExpireFinishedItems never finished")
		}
		r, err := s.ExpireFinishedItems(ctx, store.ExpireItemsParams{Now: finished.Add(time.Minute), Retain: retain, Limit: 7})
		if err != nil {
			t.Fatal(err)
		}
		if r.Records > 7 {
			t.Fatalf("one call stamped %d records, over its limit of 7", r.Records)
		}
		total.Records += r.Records
		total.Jobs += r.Jobs
		total.Deferred += r.Deferred
		if !r.More {
			break
		}
	}
	if total.Jobs != 1 || total.Deferred != 1 {
		t.Errorf("jobs done %d, deferred %d; want 1 and 1 (the cancelled job with pending items)", total.Jobs, total.Deferred)
	}

	want := finished.Add(retain).Unix()
	records := func(job string) map[string]types.AttributeValue {
		out, err := c.Query(ctx, &dynamodb.QueryInput{
			TableName:                 aws.String(table),
			KeyConditionExpression:    aws.String("pk = :pk"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":pk": &types.AttributeValueMemberS{Value: "JOB#" + job}},
		})
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]types.AttributeValue{}
		for _, it := range out.Items {
			sk := it["sk"].(*types.AttributeValueMemberS).Value
			m[sk] = it[dynamostore.TTLAttribute]
		}
		return m
	}
	stamped := 0
	for sk, ttl := range records("done") {
		kept := sk == "J" || strings.HasPrefix(sk, "K#")
		switch {
		case kept && ttl != nil:
			t.Errorf("record %s (the job's summary) got an expiry", sk)
		case !kept && ttl == nil:
			t.Errorf("item record %s has no expiry", sk)
		case !kept:
			if v := ttl.(*types.AttributeValueMemberN).Value; v != strconv.FormatInt(want, 10) {
				t.Errorf("record %s expires at %s, want %d (finished + 30 days)", sk, v, want)
			}
			stamped++
		}
	}
	if stamped == 0 || stamped != total.Records {
		t.Errorf("%d records carry an expiry, %d reported stamped", stamped, total.Records)
	}
	for _, job := range []string{"open", "stopped"} {
		for sk, ttl := range records(job) {
			if ttl != nil {
				t.Errorf("job %s: record %s got an expiry", job, sk)
			}
		}
	}
	view, err := s.GetJob(ctx, "done")
	if err != nil || view.Counts().Abandoned != n || view.Job.Status != store.JobCancelled {
		t.Errorf("the finished job's summary: %+v %v", view.Counts(), err)
	}
	// Done: nothing more to stamp, the job left the expiry index.
	if r, err := s.ExpireFinishedItems(ctx, store.ExpireItemsParams{Now: finished.Add(2 * time.Minute), Retain: retain, Limit: 7}); err != nil || r.Records != 0 || r.Jobs != 0 {
		t.Errorf("a second round: %+v %v", r, err)
	}
}
