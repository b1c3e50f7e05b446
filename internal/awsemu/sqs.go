package awsemu

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// SQSEndpointEnv names the variable that points the SQS tests at an existing
// endpoint (LocalStack, real AWS) instead of a started emulator.
const SQSEndpointEnv = "QUNFA_TEST_SQS_ENDPOINT"

// FauxqsNoShimEnv, set to 1, runs fauxqs without the receipt-handle shim
// (see fauxqsLauncher), to measure the emulator's own gaps.
const FauxqsNoShimEnv = "QUNFA_FAUXQS_NO_SHIM"

// SQSBackendFauxqs and SQSBackendExternal are the values SQSBackend reports.
const (
	// SQSBackendFauxqs: the fauxqs emulator, started by SQS.
	SQSBackendFauxqs = "fauxqs"
	// SQSBackendExternal: an endpoint given in QUNFA_TEST_SQS_ENDPOINT,
	// assumed to behave like real SQS.
	SQSBackendExternal = "external"
)

// sqsRegion is the AWS region the SQS test clients sign for.
const sqsRegion = "us-east-1"

var sqsEmu struct {
	once sync.Once
	proc *Process
	err  error
}

// SQSBackend says what SQS returns an endpoint of, so tests can declare the
// emulator's known gaps as capabilities.
func SQSBackend() string {
	if os.Getenv(SQSEndpointEnv) != "" {
		return SQSBackendExternal
	}
	return SQSBackendFauxqs
}

// SQS returns an SQS endpoint for tests: QUNFA_TEST_SQS_ENDPOINT when set,
// else the fauxqs emulator, started once per test process on 127.0.0.1
// (StopAll from TestMain stops it). If it cannot start, tb is skipped
// (or failed, see Unavailable).
func SQS(tb testing.TB) string {
	tb.Helper()
	if ep := os.Getenv(SQSEndpointEnv); ep != "" {
		return ep
	}
	sqsEmu.once.Do(func() {
		sqsEmu.proc, sqsEmu.err = startFauxqs()
	})
	if sqsEmu.err != nil {
		Unavailable(tb, "fauxqs (SQS)", sqsEmu.err)
	}
	return sqsEmu.proc.Endpoint
}

// startFauxqs runs fauxqs through node with a small launcher: its own CLI
// listens on every interface, and tests must listen on 127.0.0.1 only.
func startFauxqs() (*Process, error) {
	tools, err := ToolsDir()
	if err != nil {
		return nil, err
	}
	dist := filepath.Join(tools, "node_modules", "fauxqs", "dist")
	if _, err := os.Stat(filepath.Join(dist, "app.js")); err != nil {
		return nil, fmt.Errorf("fauxqs not installed in %s: %w", tools, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return Start(ctx, "node", []string{"NODE_NO_WARNINGS=1"}, func(port int) []string {
		return []string{"--input-type=module", "-e", fauxqsLauncher(dist, port, os.Getenv(FauxqsNoShimEnv) != "1")}
	})
}

// fauxqsLauncher is the node program that serves fauxqs on 127.0.0.1:port.
//
// It also corrects one known fauxqs gap, so the queue conformance suite
// checks what real SQS FIFO does. fauxqs answers every DeleteMessage with
// success and expires receipt handles only lazily (on the next receive);
// SQS FIFO refuses a delete with a handle it never issued
// (ReceiptHandleIsInvalid) and with one whose visibility has expired
// (InvalidParameterValue "The receipt handle has expired", see the AWS
// SDK and LocalStack issues on FIFO deletes). The shim expires handles
// before DeleteMessage and ChangeMessageVisibility, and answers those two
// errors for FIFO queues; a second delete with the handle of a message
// already deleted keeps succeeding. Nothing else is changed.
//
// With shim false (QUNFA_FAUXQS_NO_SHIM=1) fauxqs runs unchanged, to see its
// own gaps.
func fauxqsLauncher(dist string, port int, shim bool) string {
	mod := func(rel string) string { return strconv.Quote("file://" + filepath.Join(dist, rel)) }
	serve := fmt.Sprintf(`
const app = buildApp({ logger: false });
await app.listen({ port: %d, host: "127.0.0.1" });
`, port)
	if !shim {
		return fmt.Sprintf("import { buildApp } from %s;\n", mod("app.js")) + serve
	}
	return fmt.Sprintf(`
import { buildApp } from %s;
import { SqsRouter } from %s;
import { SqsQueue } from %s;
import { SqsError } from %s;

const issued = new Set();
const deleted = new Set();
const dequeueFifo = SqsQueue.prototype.dequeueFifo;
SqsQueue.prototype.dequeueFifo = function (...args) {
  const msgs = dequeueFifo.apply(this, args);
  for (const m of msgs) issued.add(m.ReceiptHandle);
  return msgs;
};
const register = SqsRouter.prototype.register;
SqsRouter.prototype.register = function (action, handler) {
  if (action === "DeleteMessage" || action === "ChangeMessageVisibility") {
    const inner = handler;
    handler = (body, store, req) => {
      const q = body.QueueUrl ? store.getQueue(body.QueueUrl) : undefined;
      const h = body.ReceiptHandle;
      if (q && h) q.processTimers();
      if (action === "DeleteMessage" && q && q.isFifo() && h && !q.inflightMessages.has(h) && !deleted.has(h)) {
        if (issued.has(h)) {
          throw new SqsError("InvalidParameterValue", "Value " + h + " for parameter ReceiptHandle is invalid. Reason: The receipt handle has expired.");
        }
        throw new SqsError("ReceiptHandleIsInvalid", "The input receipt handle \"" + h + "\" is not a valid receipt handle.");
      }
      const out = inner(body, store, req);
      if (action === "DeleteMessage" && h) deleted.add(h);
      return out;
    };
  }
  return register.call(this, action, handler);
};
`, mod("app.js"), mod("sqs/sqsRouter.js"), mod("sqs/sqsStore.js"), mod("common/errors.js")) + serve
}

// SQSClient returns an SQS client for endpoint with static test credentials.
func SQSClient(endpoint string) *sqs.Client {
	return sqs.New(sqs.Options{
		Region:       sqsRegion,
		BaseEndpoint: aws.String(endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
	})
}
