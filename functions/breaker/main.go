// Command breaker is the breaker Lambda function: one failure-rate check over the accounts with
// running shards per EventBridge schedule event (breakers open, shards pause, alerts go out).
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
)

func main() {
	ctx := context.Background()
	cfg, cfgErr := awsrun.Load(awsrun.Breaker, os.Getenv)
	log := awsrun.NewLogger(os.Stdout, cfg.LogLevel, awsrun.Breaker)
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
	lambda.StartWithOptions(handlers.Breaker(core.Breakers, log), awsrun.StartOptions(log)...)
}
