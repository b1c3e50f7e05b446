// Command webhooks is the webhooks Lambda function: alerts from the alert
// bus (an EventBridge rule) become stored deliveries to tenants' webhooks,
// and due deliveries are posted, signed, on every event and on a schedule
// (retries). Wiring only: configuration from the environment, AWS clients,
// the core (internal/awsrun), the handler (internal/handlers).
package main

import (
	"log/slog"

	"github.com/qunfa/qunfa/internal/awsrun"
	"github.com/qunfa/qunfa/internal/handlers"
)

func main() {
	awsrun.Run(awsrun.Webhooks, func(core *awsrun.Core, log *slog.Logger) any {
		return handlers.Webhooks(core.WebhookPublisher, core.WebhookDeliverer, log)
	})
}
