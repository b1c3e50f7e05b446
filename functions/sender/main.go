// Command sender is the sender Lambda function: works shard turns (and the planning steps of staged jobs) from the SQS FIFO work queue
// (partial batch failures, the invocation deadline bounds each turn).
// Wiring only: configuration from the environment, AWS clients, the core
// (internal/awsrun), the handler (internal/handlers).
package main

import (
	"log/slog"

	"github.com/qunfa/qunfa/internal/awsrun"
	"github.com/qunfa/qunfa/internal/handlers"
	"github.com/qunfa/qunfa/internal/metrics"
	"github.com/qunfa/qunfa/internal/store/storeseries"
)

func main() {
	awsrun.Run(awsrun.Sender, func(core *awsrun.Core, log *slog.Logger) any {
		return storeseries.FlushAfter(core.Series, log, metrics.FlushAfter(core.Metrics, log, handlers.Work(core.Sender, core.Submitter, log)))
	})
}
