// Command sender is the sender Lambda function: works shard turns from the SQS FIFO work queue
// (partial batch failures, the invocation deadline bounds each turn).
// Wiring only: configuration from the environment, AWS clients, the core
// (internal/awsrun), the handler (internal/handlers).
package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/qunfa/qunfa/internal/awsrun"
	"github.com/qunfa/qunfa/internal/handlers"
	"github.com/qunfa/qunfa/internal/metrics"
)

func main() {
	ctx := context.Background()
	cfg, cfgErr := awsrun.Load(awsrun.Sender, os.Getenv)
	log := awsrun.NewLogger(os.Stdout, cfg.LogLevel, awsrun.Sender)
	if cfgErr != nil {
		log.Error("invalid configuration", slog.Any("err", cfgErr))
		os.Exit(1)
	}
	clients, err := awsrun.NewClients(ctx)
	if err != nil {
		log.Error("AWS clients", slog.Any("err", err))
		os.Exit(1)
	}
	core, err := awsrun.Build(cfg, clients, log)
	if err != nil {
		log.Error("build core", slog.Any("err", err))
		os.Exit(1)
	}
	log.Info("ready", slog.Any("config", cfg))
	lambda.StartWithOptions(metrics.FlushAfter(core.Metrics, log, handlers.Sender(core.Sender, log)), awsrun.StartOptions(log)...)
}
