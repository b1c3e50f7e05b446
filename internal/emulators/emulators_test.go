package emulators_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/qunfa/qunfa/internal/awsemu"
	"github.com/qunfa/qunfa/internal/emulators"
	"github.com/qunfa/qunfa/internal/queue"
	"github.com/qunfa/qunfa/internal/queue/sqsqueue"
)

// TestFauxqsKeepsMessagesAcrossRestarts: with a data directory, a message
// sent before fauxqs is killed is there after it starts again on that
// directory — `qunfa dev --backend aws --emulators` relies on it after a
// SIGKILL (the emulators die with the process). Without the wiring of
// fauxqs's persistence, the queue came back empty and a starting job's
// planning message was lost.
func TestFauxqsKeepsMessagesAcrossRestarts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	start := func() (*emulators.Process, *sqs.Client) {
		p, err := emulators.StartFauxqs(ctx, emulators.FauxqsOptions{DataDir: dir})
		if err != nil {
			awsemu.Unavailable(t, "fauxqs", err)
		}
		t.Cleanup(p.Stop)
		return p, awsemu.SQSClient(p.Endpoint)
	}
	p, client := start()
	url, _, err := sqsqueue.CreateQueues(ctx, client, "restart", 10)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sqsqueue.New(client, url).Send(ctx, queue.SendParams{Group: "g", DedupID: "d1", Body: []byte(`{"turn":1}`)}); err != nil {
		t.Fatal(err)
	}
	p.Stop() // SIGKILL

	_, client = start()
	out, err := client.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String("restart.fifo")})
	if err != nil {
		t.Fatalf("the queue is gone after a restart: %v", err)
	}
	msgs, err := sqsqueue.New(client, aws.ToString(out.QueueUrl)).Receive(ctx, queue.ReceiveParams{Max: 10, VisibilityTimeout: time.Minute, Wait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 1 || string(msgs[0].Body) != `{"turn":1}` {
		t.Fatalf("after a restart the queue holds %+v, want the message sent before", msgs)
	}
}
