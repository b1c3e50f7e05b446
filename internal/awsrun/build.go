package awsrun

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/qunfa/qunfa/internal/api"
	"github.com/qunfa/qunfa/internal/breaker"
	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/control"
	"github.com/qunfa/qunfa/internal/metrics"
	"github.com/qunfa/qunfa/internal/provider/wecomapi"
	"github.com/qunfa/qunfa/internal/queue/sqsqueue"
	"github.com/qunfa/qunfa/internal/reconcile"
	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/store/dynamostore"
	"github.com/qunfa/qunfa/internal/submit"
)

// NewLogger returns the functions' logger: JSON lines on w (stdout in
// Lambda, which CloudWatch Logs collects), tagged with the function name.
// It writes each record straight through, so nothing is left to flush when
// the runtime shuts down.
func NewLogger(w io.Writer, level slog.Level, fn Function) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level})).With(slog.String("function", fn.Name))
}

// Clients are the AWS SDK clients a function uses.
type Clients struct {
	DynamoDB *dynamodb.Client
	SQS      *sqs.Client
}

// NewClients loads the AWS configuration the SDK way (the Lambda role's
// credentials and region from the environment) and makes the clients. The
// SDK itself honours AWS_ENDPOINT_URL, AWS_ENDPOINT_URL_DYNAMODB and
// AWS_ENDPOINT_URL_SQS, which point the functions at LocalStack or the
// emulators; opts are for tests.
func NewClients(ctx context.Context, opts ...func(*config.LoadOptions) error) (Clients, error) {
	cfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return Clients{}, fmt.Errorf("load AWS configuration: %w", err)
	}
	return Clients{DynamoDB: dynamodb.NewFromConfig(cfg), SQS: sqs.NewFromConfig(cfg)}, nil
}

// Core is the core of qunfa assembled on the AWS adapters.
type Core struct {
	Store     *dynamostore.Store
	Queue     *sqsqueue.Queue
	Submitter *submit.Submitter
	Control   *control.Controller
	// API is the HTTP API v1 handler (submit and api functions).
	API http.Handler
	// Sender and Reconciler are set for functions that call the provider.
	Sender     *sender.Sender
	Reconciler *reconcile.Reconciler
	// Metrics writes CloudWatch Embedded Metric Format to stdout; flush it
	// at the end of every invocation (metrics.FlushAfter).
	Metrics *metrics.EMF
}

// Build assembles the core for cfg's function, as devstack.Open does for
// the local stack, on the DynamoDB table and SQS queue of cfg.
func Build(cfg Config, c Clients, log *slog.Logger) (*Core, error) {
	if c.DynamoDB == nil || c.SQS == nil {
		return nil, fmt.Errorf("build core: missing AWS clients")
	}
	clk := clock.System{}
	st := dynamostore.New(c.DynamoDB, cfg.Table, dynamostore.Options{Logger: log})
	q := sqsqueue.New(c.SQS, cfg.QueueURL)
	core := &Core{
		Store:     st,
		Queue:     q,
		Submitter: &submit.Submitter{Store: st, Queue: q, Clock: clk},
		Control:   &control.Controller{Store: st, Queue: q, Clock: clk},
	}
	core.API = api.New(api.Deps{Store: st, Submitter: core.Submitter, Control: core.Control, Clock: clk, Logger: log})
	if !cfg.fn.Provider {
		return core, nil
	}
	if cfg.ProviderToken == "" {
		log.Warn("no provider token configured; calls go out without credentials", slog.String("env", EnvProviderToken))
	}
	prov, err := wecomapi.New(wecomapi.Config{
		BaseURL: cfg.ProviderURL, Token: cfg.ProviderToken,
		ConnectTimeout: cfg.ProviderConnectTimeout, ResponseTimeout: cfg.ProviderTimeout, Logger: log,
	})
	if err != nil {
		return nil, fmt.Errorf("provider: %w", err)
	}
	core.Metrics = metrics.NewEMF(os.Stdout, metrics.EMFOptions{Dimensions: map[string]string{"function": cfg.fn.Name}})
	core.Sender = &sender.Sender{Store: st, Queue: q, Provider: metrics.Provider(prov, core.Metrics), Clock: clk, Log: log,
		Config: cfg.Sender, Metrics: core.Metrics, Breakers: &breaker.Breakers{Store: st, Clock: clk, Log: log}}
	core.Reconciler = &reconcile.Reconciler{
		Store: st, Queue: q, Provider: prov, Clock: clk, Log: log,
		StaleAfter: cfg.StaleAfter, SettleAfter: cfg.SettleAfter,
	}
	return core, nil
}

// StartOptions are the lambda.StartWithOptions options every function
// uses: on SIGTERM (sent at shutdown when an extension is registered) the
// function logs that it stops; records are already written, the logger
// does not buffer.
func StartOptions(log *slog.Logger) []lambda.Option {
	return []lambda.Option{lambda.WithEnableSIGTERM(func() {
		log.Info("runtime shutting down")
	})}
}
