package devstack

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/qunfa/qunfa/internal/emulators"
	"github.com/qunfa/qunfa/internal/queue"
	"github.com/qunfa/qunfa/internal/queue/sqsqueue"
	"github.com/qunfa/qunfa/internal/reconcile"
	"github.com/qunfa/qunfa/internal/store/dynamostore"
	"github.com/qunfa/qunfa/internal/store/sqlitestore"
)

// AWSBackend is the DynamoDB table and SQS FIFO work queue the stack runs
// on with `qunfa dev --backend aws`.
type AWSBackend struct {
	// Table is the DynamoDB table (default DefaultTable).
	Table string
	// QueueURL is the SQS FIFO work queue; with Create it may be empty
	// (the queue made is <table>-work.fifo).
	QueueURL string
	// Create creates the table and the queues as template.yaml declares
	// them when they are missing (CreateAWSResources).
	Create bool
	// Emulators starts dynalite and fauxqs from tools/emulators, keeping
	// their data in <data-dir>/emulators, and stops them at Close; implies
	// Create. Otherwise the AWS configuration comes the SDK way: region,
	// AWS_ENDPOINT_URL(_DYNAMODB, _SQS), the default credential chain.
	Emulators bool
	// Visibility is how long a received work message stays invisible; the
	// event source renews it every third of that while an invocation works
	// the message (default DefaultVisibility). A process that dies — even
	// by SIGKILL — leaves its messages to come back within Visibility,
	// where the Lambda event source mapping waits out the queue's 540 s.
	Visibility time.Duration
}

// DefaultTable is the table of `qunfa dev --backend aws` when none is named.
const DefaultTable = "qunfa"

// emulatorRegion is the region the clients sign for with Emulators when
// AWS_REGION is not set.
const emulatorRegion = "us-east-1"

var (
	_ Store = (*sqlitestore.Store)(nil)
	_ Store = (*dynamostore.Store)(nil)
)

// DefaultVisibility is the visibility of the work messages the local stack
// receives from SQS: after a SIGKILL, the shard turns the dead process held
// come back within it.
const DefaultVisibility = 30 * time.Second

// The work queue as template.yaml declares it (WorkQueue, DeadLetterQueue);
// TestTemplateQueuesMatchDevCreate in internal/awsrun holds the two
// together.
const (
	// WorkQueueMaxReceiveCount is the redrive policy's maxReceiveCount.
	WorkQueueMaxReceiveCount = 10
	// WorkQueueSuffix names the work queue after the table:
	// <table>-work.fifo, its dead-letter queue <table>-work-dlq.fifo.
	WorkQueueSuffix = "-work"
)

// WorkQueueAttributes are WorkQueue's attributes in template.yaml beyond
// FIFO, content-based deduplication (off) and the redrive policy, which
// sqsqueue.CreateQueues sets.
var WorkQueueAttributes = map[string]string{
	string(sqstypes.QueueAttributeNameVisibilityTimeout):             "540",
	string(sqstypes.QueueAttributeNameReceiveMessageWaitTimeSeconds): "0",
	string(sqstypes.QueueAttributeNameMessageRetentionPeriod):        "345600",
	string(sqstypes.QueueAttributeNameSqsManagedSseEnabled):          "true",
}

// DeadLetterQueueAttributes are DeadLetterQueue's attributes in
// template.yaml beyond FIFO and deduplication.
var DeadLetterQueueAttributes = map[string]string{
	string(sqstypes.QueueAttributeNameMessageRetentionPeriod): "1209600",
	string(sqstypes.QueueAttributeNameSqsManagedSseEnabled):   "true",
}

// HighThroughputAttributes make both queues high-throughput FIFO queues
// as template.yaml does: deduplication and throughput per message group
// (a shard), not per queue. Each is set on its own, and one the queue
// service does not know (the SQS emulator knows neither) is left out: it
// changes throughput limits, not what is delivered.
var HighThroughputAttributes = map[string]string{
	string(sqstypes.QueueAttributeNameDeduplicationScope):  "messageGroup",
	string(sqstypes.QueueAttributeNameFifoThroughputLimit): "perMessageGroupId",
}

// CreateAWSResources creates, as template.yaml declares them, the table
// (dynamostore.CreateTable) and the FIFO work queue <table>-work.fifo with
// its dead-letter queue, and returns the work queue's URL. Resources that
// already exist are kept (their attributes set again), so it is safe to
// run at every start.
func CreateAWSResources(ctx context.Context, db *dynamodb.Client, sq *sqs.Client, table string) (string, error) {
	if err := dynamostore.CreateTable(ctx, db, table); err != nil {
		return "", err
	}
	queueURL, dlqURL, err := sqsqueue.CreateQueues(ctx, sq, table+WorkQueueSuffix, WorkQueueMaxReceiveCount)
	if err != nil {
		return "", err
	}
	for url, attrs := range map[string]map[string]string{queueURL: WorkQueueAttributes, dlqURL: DeadLetterQueueAttributes} {
		if _, err := sq.SetQueueAttributes(ctx, &sqs.SetQueueAttributesInput{QueueUrl: aws.String(url), Attributes: attrs}); err != nil {
			return "", fmt.Errorf("set the attributes of %s: %w", url, err)
		}
		for k, v := range HighThroughputAttributes {
			_, err := sq.SetQueueAttributes(ctx, &sqs.SetQueueAttributesInput{QueueUrl: aws.String(url), Attributes: map[string]string{k: v}})
			var ae smithy.APIError
			if err != nil && !(errors.As(err, &ae) && strings.Contains(ae.ErrorCode(), "InvalidAttributeName")) {
				return "", fmt.Errorf("set %s of %s: %w", k, url, err)
			}
		}
	}
	return queueURL, nil
}

// openAWS builds the DynamoDB store and the SQS queue of cfg.AWS,
// starting the emulators and creating the resources first when asked.
func (s *Stack) openAWS(ctx context.Context) (Store, queue.Queue, error) {
	b := *s.Config.AWS
	if b.Table == "" {
		b.Table = DefaultTable
	}
	if b.Visibility <= 0 {
		b.Visibility = DefaultVisibility
	}
	if b.Visibility < 3*time.Second {
		return nil, nil, fmt.Errorf("aws backend: visibility %v is too short to renew (at least 3s)", b.Visibility)
	}
	if b.QueueURL == "" && !b.Create && !b.Emulators {
		return nil, nil, errors.New("aws backend: give the work queue's URL, or create the resources")
	}
	db, sq, err := s.awsClients(ctx, b.Emulators)
	if err != nil {
		return nil, nil, err
	}
	if b.Create || b.Emulators {
		url, err := CreateAWSResources(ctx, db, sq, b.Table)
		if err != nil {
			return nil, nil, fmt.Errorf("create the table and queues: %w", err)
		}
		if b.QueueURL == "" {
			b.QueueURL = url
		}
	}
	if b.Emulators {
		// fauxqs keeps a queue's URL as made, with the port of the life
		// that made it; the emulators start on new ports after a restart.
		// fauxqs finds queues by name whatever the host, so the URL is
		// told on the endpoint in use.
		if b.QueueURL, err = onEndpoint(b.QueueURL, s.SQSEndpoint); err != nil {
			return nil, nil, err
		}
	}
	s.Config.AWS = &b
	capacity := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "qunfa_dynamodb_capacity_units_total",
		Help: "DynamoDB capacity units consumed by the store, by kind (read, write).",
	}, []string{"kind"})
	s.capacity = capacity
	st := dynamostore.New(db, b.Table, dynamostore.Options{Logger: s.Log, OnCapacity: func(op string, c ddbtypes.ConsumedCapacity) {
		if c.CapacityUnits == nil {
			return
		}
		kind := "read"
		switch op {
		case "PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem":
			kind = "write"
		}
		capacity.WithLabelValues(kind).Add(*c.CapacityUnits)
	}})
	// Fail early and clearly when the table or the queue is not there.
	if _, err := db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(b.Table)}); err != nil {
		return nil, nil, fmt.Errorf("DynamoDB table %q: %w (create it with --create, or deploy the stack)", b.Table, err)
	}
	q := sqsqueue.New(sq, b.QueueURL)
	if _, _, err := q.Depth(ctx); err != nil {
		return nil, nil, fmt.Errorf("SQS queue %s: %w (create it with --create, or deploy the stack)", b.QueueURL, err)
	}
	// This process owns the data directory alone (the lock): a lease held
	// by a pass of its previous life was abandoned by a crash. Free it now
	// instead of waiting out LeaseFor; another process's lease stays.
	if ok, err := st.ReleaseLeaseOfHolders(ctx, reconcile.LeaseName, reconcilerHolder(s.Config.DataDir)+"-"); err != nil {
		return nil, nil, fmt.Errorf("release the reconciler lease held before a restart: %w", err)
	} else if ok {
		s.Log.Info("released the reconciler lease held before the restart")
	}
	s.queueDepth = q.Depth
	s.held = NewHeldMessages(q)
	s.Log.Info("running on DynamoDB and SQS", slog.String("table", b.Table), slog.String("queue_url", b.QueueURL),
		slog.Duration("visibility", b.Visibility))
	return st, q, nil
}

// awsClients makes the DynamoDB and SQS clients: on the emulators it
// starts (data in <data-dir>/emulators, stopped at Close), or configured
// the SDK way.
func (s *Stack) awsClients(ctx context.Context, emulate bool) (*dynamodb.Client, *sqs.Client, error) {
	if !emulate {
		cfg, err := config.LoadDefaultConfig(ctx)
		if err != nil {
			return nil, nil, fmt.Errorf("load the AWS configuration: %w", err)
		}
		if cfg.Region == "" {
			return nil, nil, errors.New("no AWS region: set AWS_REGION (or a profile's region)")
		}
		return dynamodb.NewFromConfig(cfg), sqs.NewFromConfig(cfg), nil
	}
	dir := filepath.Join(s.Config.DataDir, "emulators")
	dyn, err := emulators.StartDynalite(ctx, emulators.DynaliteOptions{DataDir: filepath.Join(dir, "dynamodb")})
	if err != nil {
		return nil, nil, fmt.Errorf("start dynalite: %w", err)
	}
	s.closers = append(s.closers, func() error { dyn.Stop(); return nil })
	fq, err := emulators.StartFauxqs(ctx, emulators.FauxqsOptions{DataDir: filepath.Join(dir, "sqs")})
	if err != nil {
		return nil, nil, fmt.Errorf("start fauxqs: %w", err)
	}
	s.closers = append(s.closers, func() error { fq.Stop(); return nil })
	s.DynamoDBEndpoint, s.SQSEndpoint = dyn.Endpoint, fq.Endpoint
	s.Log.Info("started the AWS emulators", slog.String("dynamodb", dyn.Endpoint), slog.String("sqs", fq.Endpoint), slog.String("data", dir))
	region := cmp.Or(os.Getenv("AWS_REGION"), emulatorRegion)
	creds := credentials.NewStaticCredentialsProvider("local", "local", "")
	db := dynamodb.New(dynamodb.Options{Region: region, BaseEndpoint: aws.String(dyn.Endpoint), Credentials: creds})
	sq := sqs.New(sqs.Options{Region: region, BaseEndpoint: aws.String(fq.Endpoint), Credentials: creds})
	return db, sq, nil
}

// onEndpoint is queueURL with the scheme and host of endpoint.
func onEndpoint(queueURL, endpoint string) (string, error) {
	q, err := url.Parse(queueURL)
	if err != nil {
		return "", fmt.Errorf("queue URL %q: %w", queueURL, err)
	}
	e, err := url.Parse(endpoint)
	if err != nil {
		return "", fmt.Errorf("SQS endpoint %q: %w", endpoint, err)
	}
	q.Scheme, q.Host = e.Scheme, e.Host
	return q.String(), nil
}

// observeCapacity serves the DynamoDB capacity the store consumed at
// /metrics (aws backend only).
func (s *Stack) observeCapacity() {
	if s.capacity != nil {
		s.Metrics.Registry().MustRegister(s.capacity)
	}
}
