// Command api is the api Lambda function: every HTTP API v1 route but POST /v1/jobs, behind
// API Gateway (HTTP API, payload 2.0).
// Wiring only: configuration from the environment, AWS clients, the core
// (internal/awsrun), the handler (internal/handlers).
package main

import (
	"log/slog"
	// The zone database in the binary: campaigns name IANA time zones, and
	// the provided.al2023 runtime has no guaranteed /usr/share/zoneinfo.
	_ "time/tzdata"

	"github.com/qunfa/qunfa/internal/awsrun"
	"github.com/qunfa/qunfa/internal/handlers"
)

func main() {
	awsrun.Run(awsrun.API, func(core *awsrun.Core, _ *slog.Logger) any {
		return handlers.API(core.API)
	})
}
