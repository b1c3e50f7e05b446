// Command reconciler is the reconciler Lambda function: one reconciliation pass per EventBridge
// schedule event.
// Wiring only: configuration from the environment, AWS clients, the core
// (internal/awsrun), the handler (internal/handlers).
package main

import (
	"log/slog"

	"github.com/qunfa/qunfa/internal/awsrun"
	"github.com/qunfa/qunfa/internal/handlers"
	"github.com/qunfa/qunfa/internal/store/storeseries"
)

func main() {
	awsrun.Run(awsrun.Reconciler, func(core *awsrun.Core, log *slog.Logger) any {
		return storeseries.FlushAfterErr(core.Series, log, handlers.Reconciler(core.Reconciler, log))
	})
}
