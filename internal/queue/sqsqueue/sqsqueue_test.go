package sqsqueue

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/qunfa/qunfa/internal/awsemu"
	"github.com/qunfa/qunfa/internal/queue/queuetest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	awsemu.StopAll()
	os.Exit(code)
}

// sqsCapabilities is what SQS FIFO does. It may return several messages
// of one group in one receive, and may return fewer than asked for even
// when more are available. Nor does it say when a send was a duplicate.
var sqsCapabilities = queuetest.Capabilities{
	MinVisibility:        time.Second,
	ReceivesManyPerGroup: true,
}

// emulatorClient returns a client for the SQS test endpoint (fauxqs, or
// QUNFA_TEST_SQS_ENDPOINT).
func emulatorClient(t *testing.T) *sqs.Client {
	t.Helper()
	return awsemu.SQSClient(awsemu.SQS(t))
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9_-]+`)

// uniqueName derives a fresh, legal queue name from the test's name.
func uniqueName(t *testing.T) string {
	t.Helper()
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	base := unsafeName.ReplaceAllString(t.Name(), "-")
	base = strings.Trim(base, "-")
	if len(base) > 50 {
		base = base[len(base)-50:]
	}
	return "qt-" + base + "-" + hex.EncodeToString(b[:])
}

// newFixture creates a fresh FIFO queue and DLQ for one subtest and
// deletes both when it ends.
func newFixture(t *testing.T, client *sqs.Client, opts queuetest.Options) queuetest.Fixture {
	t.Helper()
	ctx := context.Background()
	url, dlqURL, err := CreateQueues(ctx, client, uniqueName(t), opts.MaxReceiveCount)
	if err != nil {
		t.Fatalf("CreateQueues: %v", err)
	}
	t.Cleanup(func() {
		for _, u := range []string{url, dlqURL} {
			if _, err := client.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: &u}); err != nil {
				t.Logf("delete queue %s: %v", u, err)
			}
		}
	})
	return queuetest.Fixture{Queue: New(client, url), DLQ: New(client, dlqURL)}
}

func TestConformance(t *testing.T) {
	client := emulatorClient(t)
	queuetest.Run(t, func(t *testing.T, opts queuetest.Options) queuetest.Fixture {
		return newFixture(t, client, opts)
	}, sqsCapabilities)
}
