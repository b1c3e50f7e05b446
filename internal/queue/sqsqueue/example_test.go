package sqsqueue_test

import (
	"context"
	"log"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/qunfa/qunfa/internal/queue"
	"github.com/qunfa/qunfa/internal/queue/sqsqueue"
)

// A shard's first turn goes on the FIFO queue with the shard as the
// message group, so the shard's turns are handled one at a time, in order.
// (Compiled, not run: it needs AWS credentials.)
func Example() {
	ctx := context.Background()
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		log.Fatal(err)
	}
	client := sqs.NewFromConfig(cfg)
	url, _, err := sqsqueue.CreateQueues(ctx, client, "qunfa-shards", 5)
	if err != nil {
		log.Fatal(err)
	}
	q := sqsqueue.New(client, url)
	if _, err := q.Send(ctx, queue.SendParams{
		Group:   "acct-a#0",
		DedupID: "job-1/0/turn-0",
		Body:    []byte(`{"job":"job-1","shard":0}`),
	}); err != nil {
		log.Fatal(err)
	}
}
