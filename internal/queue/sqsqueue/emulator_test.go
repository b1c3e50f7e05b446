package sqsqueue

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/qunfa/qunfa/internal/awsemu"
	"github.com/qunfa/qunfa/internal/queue"
	"github.com/qunfa/qunfa/internal/queue/queuetest"
)

// Adapter tests against the SQS endpoint (fauxqs or QUNFA_TEST_SQS_ENDPOINT)
// for what the conformance suite does not look at: the queues CreateQueues
// builds, zero-visibility receives, and text bodies.

func TestCreateQueuesOnEndpoint(t *testing.T) {
	t.Parallel()
	client := emulatorClient(t)
	ctx := context.Background()
	name := uniqueName(t)
	url, dlqURL, err := CreateQueues(ctx, client, name, 3)
	if err != nil {
		t.Fatalf("CreateQueues: %v", err)
	}
	t.Cleanup(func() {
		for _, u := range []string{url, dlqURL} {
			_, _ = client.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: aws.String(u)})
		}
	})
	attrs := func(u string) map[string]string {
		out, err := client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
			QueueUrl: aws.String(u), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll},
		})
		if err != nil {
			t.Fatalf("GetQueueAttributes(%s): %v", u, err)
		}
		return out.Attributes
	}
	main, dlq := attrs(url), attrs(dlqURL)
	for which, a := range map[string]map[string]string{"queue": main, "dlq": dlq} {
		if a["FifoQueue"] != "true" {
			t.Errorf("%s FifoQueue = %q, want true", which, a["FifoQueue"])
		}
		if a["ContentBasedDeduplication"] != "false" {
			t.Errorf("%s ContentBasedDeduplication = %q, want false", which, a["ContentBasedDeduplication"])
		}
	}
	var policy struct {
		DeadLetterTargetArn string          `json:"deadLetterTargetArn"`
		MaxReceiveCount     json.RawMessage `json:"maxReceiveCount"`
	}
	if err := json.Unmarshal([]byte(main["RedrivePolicy"]), &policy); err != nil {
		t.Fatalf("RedrivePolicy %q: %v", main["RedrivePolicy"], err)
	}
	if policy.DeadLetterTargetArn != dlq["QueueArn"] {
		t.Errorf("redrive target %q, want the DLQ %q", policy.DeadLetterTargetArn, dlq["QueueArn"])
	}
	if s := string(policy.MaxReceiveCount); s != `"3"` && s != `3` {
		t.Errorf("maxReceiveCount = %s, want 3", s)
	}
	if dlq["MessageRetentionPeriod"] != "1209600" {
		t.Errorf("DLQ MessageRetentionPeriod = %q, want 1209600", dlq["MessageRetentionPeriod"])
	}
	if _, ok := dlq["RedrivePolicy"]; ok {
		t.Errorf("the DLQ has a redrive policy of its own: %q", dlq["RedrivePolicy"])
	}

	// Creating the same queues again is idempotent.
	url2, dlq2, err := CreateQueues(ctx, client, name, 3)
	if err != nil {
		t.Fatalf("CreateQueues again: %v", err)
	}
	if url2 != url || dlq2 != dlqURL {
		t.Errorf("second CreateQueues gave %s, %s; want %s, %s", url2, dlq2, url, dlqURL)
	}
}

func TestReceiveZeroVisibilityOnEndpoint(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, emulatorClient(t), queuetest.Options{MaxReceiveCount: 10})
	ctx := context.Background()
	if _, err := fx.Queue.Send(ctx, queue.SendParams{Group: "g", DedupID: "d", Body: []byte("peek")}); err != nil {
		t.Fatalf("Send: %v", err)
	}
	first, err := fx.Queue.Receive(ctx, queue.ReceiveParams{Max: 1, Wait: time.Second})
	if err != nil || len(first) != 1 {
		t.Fatalf("Receive with zero visibility: %d messages, %v", len(first), err)
	}
	// Visible again at once: no wait for a queue-default timeout.
	again, err := fx.Queue.Receive(ctx, queue.ReceiveParams{Max: 1, VisibilityTimeout: time.Minute})
	if err != nil || len(again) != 1 {
		t.Fatalf("second Receive: %d messages, %v (a zero-visibility receive must not hold the message)", len(again), err)
	}
	if again[0].ID != first[0].ID || again[0].ReceiveCount != 2 {
		t.Errorf("second receive = %s count %d, want %s count 2", again[0].ID, again[0].ReceiveCount, first[0].ID)
	}
	if err := fx.Queue.Delete(ctx, again[0].ReceiptHandle); err != nil {
		t.Fatalf("Delete: %v", err)
	}
}

func TestTextBodiesRoundTrip(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, emulatorClient(t), queuetest.Options{MaxReceiveCount: 10})
	ctx := context.Background()
	bodies := []string{
		`{"job":"j-1","shard":0,"cursor":42}`,
		"tab\there, newline\nand CR\r",
		"中文 群发 \uE000 \uFFFD <xml&amp;> \"quotes\"",
	}
	// Real SQS takes #x10000-#x10FFFF (emoji); fauxqs 2.4.1 wrongly refuses
	// them (its check works on UTF-16 code units). The adapter's side is
	// covered by TestSendAcceptsSQSCharacterSet.
	if awsemu.SQSBackend() != awsemu.SQSBackendFauxqs {
		bodies = append(bodies, "emoji 😀 𠀀")
	}
	for i, b := range bodies {
		if _, err := fx.Queue.Send(ctx, queue.SendParams{Group: "text", DedupID: string(rune('a' + i)), Body: []byte(b)}); err != nil {
			t.Fatalf("Send %q: %v", b, err)
		}
	}
	for _, want := range bodies {
		msgs, err := fx.Queue.Receive(ctx, queue.ReceiveParams{Max: 1, VisibilityTimeout: time.Minute, Wait: time.Second})
		if err != nil || len(msgs) != 1 {
			t.Fatalf("Receive: %d messages, %v", len(msgs), err)
		}
		if got := string(msgs[0].Body); got != want {
			t.Errorf("body %q, want %q", got, want)
		}
		if err := fx.Queue.Delete(ctx, msgs[0].ReceiptHandle); err != nil {
			t.Fatalf("Delete: %v", err)
		}
	}
}

func TestMissingQueueIsNoSentinel(t *testing.T) {
	t.Parallel()
	client := emulatorClient(t)
	q := New(client, missingQueueURL(t, client))
	_, err := q.Send(context.Background(), queue.SendParams{Group: "g", DedupID: "d", Body: []byte("b")})
	if err == nil {
		t.Fatal("Send to a missing queue succeeded")
	}
	if errors.Is(err, queue.ErrNotFound) || errors.Is(err, queue.ErrInvalidArgument) {
		t.Errorf("missing queue mapped to a port sentinel: %v", err)
	}
	var gone *types.QueueDoesNotExist
	if !errors.As(err, &gone) {
		t.Errorf("err = %v, want the SQS QueueDoesNotExist error kept in the chain", err)
	}
}

// missingQueueURL returns the URL of a queue that was created and
// deleted, so it is sure not to exist.
func missingQueueURL(t *testing.T, client *sqs.Client) string {
	t.Helper()
	ctx := context.Background()
	out, err := client.CreateQueue(ctx, &sqs.CreateQueueInput{
		QueueName:  aws.String(uniqueName(t) + ".fifo"),
		Attributes: map[string]string{"FifoQueue": "true"},
	})
	if err != nil {
		t.Fatalf("CreateQueue: %v", err)
	}
	if _, err := client.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: out.QueueUrl}); err != nil {
		t.Fatalf("DeleteQueue: %v", err)
	}
	return aws.ToString(out.QueueUrl)
}
