// Command breaker is the breaker Lambda function: one failure-rate check over the accounts with
// running shards per EventBridge schedule event (breakers open, shards pause, alerts go out).
// Wiring only: configuration from the environment, AWS clients, the core
// (internal/awsrun), the handler (internal/handlers).
package main

import (
	"log/slog"

	"github.com/qunfa/qunfa/internal/awsrun"
	"github.com/qunfa/qunfa/internal/handlers"
)

func main() {
	awsrun.Run(awsrun.Breaker, func(core *awsrun.Core, log *slog.Logger) any {
		return handlers.Breaker(core.Breakers, log)
	})
}
