package awsemu

import (
	"context"
	"crypto/rand"
	"errors"
	"net"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
)

func TestSQSStartsOnceAndListensLocally(t *testing.T) {
	first := SQS(t)
	second := SQS(t)
	if first != second {
		t.Fatalf("SQS started twice: %q then %q", first, second)
	}
	u, err := url.Parse(first)
	if err != nil {
		t.Fatalf("endpoint %q: %v", first, err)
	}
	if os.Getenv(SQSEndpointEnv) == "" && u.Hostname() != "127.0.0.1" {
		t.Fatalf("emulator listens on %q, want 127.0.0.1", u.Hostname())
	}
	c, err := net.DialTimeout("tcp", u.Host, 2*time.Second)
	if err != nil {
		t.Fatalf("endpoint %s does not accept connections: %v", first, err)
	}
	c.Close()
	if _, err := SQSClient(first).ListQueues(context.Background(), &sqs.ListQueuesInput{}); err != nil {
		t.Fatalf("ListQueues: %v", err)
	}
}

// TestSQSDeleteAnswersLikeFIFO checks the DeleteMessage answers the fauxqs
// launcher adds (and real SQS FIFO gives): a handle never issued is
// ReceiptHandleIsInvalid, an expired one InvalidParameterValue, a live one
// deletes, and repeating that delete is accepted.
func TestSQSDeleteAnswersLikeFIFO(t *testing.T) {
	if SQSBackend() == SQSBackendFauxqs && os.Getenv(FauxqsNoShimEnv) == "1" {
		t.Skip("fauxqs runs without the receipt-handle shim: its DeleteMessage accepts any handle")
	}
	client := SQSClient(SQS(t))
	ctx := context.Background()
	created, err := client.CreateQueue(ctx, &sqs.CreateQueueInput{
		QueueName:  aws.String("awsemu-delete-" + rand.Text() + ".fifo"),
		Attributes: map[string]string{"FifoQueue": "true"},
	})
	if err != nil {
		t.Fatalf("CreateQueue: %v", err)
	}
	qurl := created.QueueUrl
	t.Cleanup(func() { _, _ = client.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: qurl}) })
	del := func(handle string) error {
		_, err := client.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: qurl, ReceiptHandle: aws.String(handle)})
		return err
	}
	receive := func() types.Message {
		t.Helper()
		out, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: qurl, MaxNumberOfMessages: 1, VisibilityTimeout: 60})
		if err != nil || len(out.Messages) != 1 {
			t.Fatalf("ReceiveMessage: %d messages, %v", len(out.Messages), err)
		}
		return out.Messages[0]
	}

	var invalid *types.ReceiptHandleIsInvalid
	if err := del("never-issued"); !errors.As(err, &invalid) {
		t.Errorf("delete with a handle never issued: %v, want ReceiptHandleIsInvalid", err)
	}

	for _, id := range []string{"1", "2"} {
		if _, err := client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: qurl, MessageBody: aws.String("m" + id),
			MessageGroupId: aws.String("g"), MessageDeduplicationId: aws.String(id)}); err != nil {
			t.Fatalf("SendMessage: %v", err)
		}
	}
	stale := receive()
	if _, err := client.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: qurl, ReceiptHandle: stale.ReceiptHandle, VisibilityTimeout: 0}); err != nil {
		t.Fatalf("ChangeMessageVisibility: %v", err)
	}
	var api smithy.APIError
	if err := del(aws.ToString(stale.ReceiptHandle)); !errors.As(err, &api) || !strings.HasSuffix(api.ErrorCode(), "InvalidParameterValue") || !strings.Contains(api.ErrorMessage(), "expired") {
		t.Errorf("delete with an expired handle: %v, want InvalidParameterValue (expired)", err)
	}

	live := receive()
	if aws.ToString(live.Body) != "m1" {
		t.Fatalf("after the expired delete got %q, want m1 again (it must not have been deleted)", aws.ToString(live.Body))
	}
	if err := del(aws.ToString(live.ReceiptHandle)); err != nil {
		t.Fatalf("delete with a live handle: %v", err)
	}
	if err := del(aws.ToString(live.ReceiptHandle)); err != nil {
		t.Errorf("repeated delete with the same handle: %v, want accepted", err)
	}
	if next := receive(); aws.ToString(next.Body) != "m2" {
		t.Errorf("after deleting m1 got %q, want m2", aws.ToString(next.Body))
	}
}
