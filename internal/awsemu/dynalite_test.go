package awsemu

import (
	"net"
	"net/url"
	"os"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	code := m.Run()
	StopAll()
	os.Exit(code)
}

func TestDynamoDBStartsOnceAndListens(t *testing.T) {
	first := DynamoDB(t)
	second := DynamoDB(t)
	if first != second {
		t.Fatalf("DynamoDB started twice: %q then %q", first, second)
	}
	u, err := url.Parse(first)
	if err != nil {
		t.Fatalf("endpoint %q: %v", first, err)
	}
	if os.Getenv("QUNFA_TEST_DYNAMODB_ENDPOINT") == "" && u.Hostname() != "127.0.0.1" {
		t.Fatalf("emulator listens on %q, want 127.0.0.1", u.Hostname())
	}
	c, err := net.DialTimeout("tcp", u.Host, 2*time.Second)
	if err != nil {
		t.Fatalf("endpoint %s does not accept connections: %v", first, err)
	}
	c.Close()
}
