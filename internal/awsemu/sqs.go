package awsemu

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/qunfa/qunfa/internal/emulators"
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

// startFauxqs starts fauxqs in memory (emulators.StartFauxqs), with the
// receipt-handle shim unless FauxqsNoShimEnv is 1, and registers it for
// StopAll.
func startFauxqs() (*Process, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := emulators.StartFauxqs(ctx, emulators.FauxqsOptions{NoShim: os.Getenv(FauxqsNoShimEnv) == "1"})
	if err != nil {
		return nil, err
	}
	register(p)
	return p, nil
}

// SQSClient returns an SQS client for endpoint with static test credentials.
func SQSClient(endpoint string) *sqs.Client {
	return sqs.New(sqs.Options{
		Region:       sqsRegion,
		BaseEndpoint: aws.String(endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
	})
}
