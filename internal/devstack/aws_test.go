package devstack_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/qunfa/qunfa/internal/awsemu"
	"github.com/qunfa/qunfa/internal/devstack"
	"github.com/qunfa/qunfa/internal/emulators"
)

// TestEmulatorQueueURLAfterARestart: a stack on the AWS emulators tells
// the work queue's URL on the SQS emulator it started, also
// after a restart, when the emulators listen on new ports while fauxqs
// keeps the queue's URL as it was made.
func TestEmulatorQueueURLAfterARestart(t *testing.T) {
	for _, name := range []string{"dynalite", "fauxqs"} {
		if _, err := emulators.Bin(name); err != nil {
			awsemu.Unavailable(t, "the AWS emulators", err)
		}
	}
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	var seen []string
	for life := range 2 {
		cfg := devstack.Config{DataDir: dir, ProviderURL: "http://127.0.0.1:1", Token: "t", AWS: &devstack.AWSBackend{Emulators: true}}
		s, err := devstack.Open(context.Background(), cfg, log)
		if err != nil {
			t.Fatalf("life %d: %v", life, err)
		}
		url := s.Config.AWS.QueueURL
		if s.SQSEndpoint == "" || s.DynamoDBEndpoint == "" || !strings.HasPrefix(url, s.SQSEndpoint+"/") || !strings.HasSuffix(url, "/qunfa-work.fifo") {
			s.Close()
			t.Fatalf("life %d: queue %s, emulators dynamodb %q sqs %q; want the queue on the SQS emulator in use", life, url, s.DynamoDBEndpoint, s.SQSEndpoint)
		}
		seen = append(seen, s.SQSEndpoint)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if seen[0] == seen[1] {
		t.Logf("the SQS emulator came back on the same endpoint %s: the restart did not move it", seen[0])
	}
}
