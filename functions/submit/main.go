// Command submit is the submit Lambda function: POST /v1/jobs from API Gateway and the firings
// of scheduled campaigns (their EventBridge rules) become jobs.
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
	cfg, cfgErr := awsrun.Load(awsrun.Submit, os.Getenv)
	log := awsrun.NewLogger(os.Stdout, cfg.LogLevel, awsrun.Submit)
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
	lambda.StartWithOptions(handlers.Submit(core.API, core.Campaigns, log), awsrun.StartOptions(log)...)
}
