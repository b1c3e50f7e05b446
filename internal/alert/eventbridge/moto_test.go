package eventbridge_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	sdkeventbridge "github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/qunfa/qunfa/internal/alert"
	"github.com/qunfa/qunfa/internal/alert/eventbridge"
	"github.com/qunfa/qunfa/internal/awsemu"
)

// delivered is the EventBridge envelope an SQS target receives.
type delivered struct {
	Version    string          `json:"version"`
	Source     string          `json:"source"`
	DetailType string          `json:"detail-type"`
	Time       time.Time       `json:"time"`
	Detail     json.RawMessage `json:"detail"`
}

// TestPublishReachesRuleTarget publishes through the real SDK client to
// moto's EventBridge and proves, through a rule {"source":["qunfa"]} with
// an SQS target, that every event arrives on the bus with source qunfa,
// its type as detail-type and the detail plus tenant as detail — across
// more than one PutEvents batch.
func TestPublishReachesRuleTarget(t *testing.T) {
	endpoint := awsemu.Moto(t)
	ctx := t.Context()
	eb := sdkeventbridge.New(sdkeventbridge.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
	})
	sq := awsemu.SQSClient(endpoint)
	suffix := strings.ToLower(rand.Text()[:10])
	bus := "qunfa-alerts-" + suffix

	if _, err := eb.CreateEventBus(ctx, &sdkeventbridge.CreateEventBusInput{Name: aws.String(bus)}); err != nil {
		t.Fatalf("CreateEventBus: %v", err)
	}
	t.Cleanup(func() {
		_, _ = eb.DeleteEventBus(context.Background(), &sdkeventbridge.DeleteEventBusInput{Name: aws.String(bus)})
	})
	queue, err := sq.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("qunfa-alerts-" + suffix)})
	if err != nil {
		t.Fatalf("CreateQueue: %v", err)
	}
	t.Cleanup(func() { _, _ = sq.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: queue.QueueUrl}) })
	attrs, err := sq.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: queue.QueueUrl,
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn}})
	if err != nil {
		t.Fatalf("GetQueueAttributes: %v", err)
	}
	if _, err := eb.PutRule(ctx, &sdkeventbridge.PutRuleInput{Name: aws.String("qunfa-all"), EventBusName: aws.String(bus),
		EventPattern: aws.String(`{"source":["qunfa"]}`)}); err != nil {
		t.Fatalf("PutRule: %v", err)
	}
	if out, err := eb.PutTargets(ctx, &sdkeventbridge.PutTargetsInput{Rule: aws.String("qunfa-all"), EventBusName: aws.String(bus),
		Targets: []ebtypes.Target{{Id: aws.String("queue"), Arn: aws.String(attrs.Attributes[string(sqstypes.QueueAttributeNameQueueArn)])}}}); err != nil || out.FailedEntryCount != 0 {
		t.Fatalf("PutTargets: %v %+v", err, out)
	}

	at := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	var events []alert.Event
	want := map[string]alert.Event{} // by job_id
	for i := range 12 {
		e := alert.Event{Type: alert.JobStarted, Tenant: "acme", Time: at,
			Detail: alert.JobStartedDetail{JobID: fmt.Sprintf("job-%02d", i), Name: "spring sale", Total: int64(1000 + i), Shards: 4}}
		events = append(events, e)
		want[fmt.Sprintf("job-%02d", i)] = e
	}
	breaker := alert.Event{Type: alert.BreakerOpened, Tenant: "globex", Time: at,
		Detail: alert.BreakerDetail{Account: "acc-1", Reason: "error rate", Until: at.Add(5 * time.Minute), Opens: 2}}
	events = append(events, breaker)

	if err := eventbridge.New(eb, bus).Publish(ctx, events...); err != nil {
		t.Fatalf("Publish: %v", err)
	}

	var got []delivered
	for len(got) < len(events) {
		out, err := sq.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: queue.QueueUrl, MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
		if err != nil {
			t.Fatalf("ReceiveMessage: %v", err)
		}
		if len(out.Messages) == 0 {
			break
		}
		for _, m := range out.Messages {
			var d delivered
			if err := json.Unmarshal([]byte(aws.ToString(m.Body)), &d); err != nil {
				t.Fatalf("target message %q: %v", aws.ToString(m.Body), err)
			}
			got = append(got, d)
		}
	}
	if len(got) != len(events) {
		t.Fatalf("rule target received %d events, want %d", len(got), len(events))
	}

	seen := map[string]bool{}
	for _, d := range got {
		if d.Source != alert.Source {
			t.Errorf("source %q, want %q", d.Source, alert.Source)
		}
		if !d.Time.Equal(at) {
			t.Errorf("time %v, want %v", d.Time, at)
		}
		switch alert.Type(d.DetailType) {
		case alert.JobStarted:
			var detail struct {
				Tenant string `json:"tenant"`
				alert.JobStartedDetail
			}
			if err := json.Unmarshal(d.Detail, &detail); err != nil {
				t.Fatalf("JobStarted detail %s: %v", d.Detail, err)
			}
			w, ok := want[detail.JobID]
			if !ok || seen[detail.JobID] {
				t.Errorf("unexpected or repeated JobStarted detail %s", d.Detail)
				continue
			}
			seen[detail.JobID] = true
			if detail.Tenant != w.Tenant || detail.JobStartedDetail != w.Detail.(alert.JobStartedDetail) {
				t.Errorf("JobStarted detail %s, want tenant %q and %+v", d.Detail, w.Tenant, w.Detail)
			}
		case alert.BreakerOpened:
			var detail struct {
				Tenant string `json:"tenant"`
				alert.BreakerDetail
			}
			if err := json.Unmarshal(d.Detail, &detail); err != nil {
				t.Fatalf("BreakerOpened detail %s: %v", d.Detail, err)
			}
			w := breaker.Detail.(alert.BreakerDetail)
			if detail.Tenant != "globex" || detail.Account != w.Account || detail.Reason != w.Reason || !detail.Until.Equal(w.Until) || detail.Opens != w.Opens {
				t.Errorf("BreakerOpened detail %s, want tenant globex and %+v", d.Detail, w)
			}
			seen["breaker"] = true
		default:
			t.Errorf("unexpected detail-type %q", d.DetailType)
		}
	}
	if len(seen) != len(events) {
		t.Errorf("saw %d distinct events, want %d", len(seen), len(events))
	}
}
