// Command submit is the submit Lambda function: POST /v1/jobs from API Gateway and the firings
// of scheduled campaigns (their EventBridge rules) become jobs.
// Wiring only: configuration from the environment, AWS clients, the core
// (internal/awsrun), the handler (internal/handlers).
package main

import (
	"log/slog"

	"github.com/qunfa/qunfa/internal/awsrun"
	"github.com/qunfa/qunfa/internal/handlers"
)

func main() {
	awsrun.Run(awsrun.Submit, func(core *awsrun.Core, log *slog.Logger) any {
		return handlers.Submit(core.API, core.Campaigns, log)
	})
}
