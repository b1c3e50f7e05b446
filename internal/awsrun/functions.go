// Package awsrun is the AWS wiring shared by the Lambda functions
// (functions/*): it reads a function's configuration from the environment,
// makes the AWS SDK clients (which honour the AWS_ENDPOINT_URL_DYNAMODB,
// AWS_ENDPOINT_URL_SQS and AWS_ENDPOINT_URL_EVENTBRIDGE overrides natively,
// for LocalStack or emulators), and assembles the core on the AWS adapters
// — dynamostore, sqsqueue, wecomapi, EventBridge for alerts and campaign
// rules — as devstack assembles it on the embedded ones.
//
// It also declares, per function, the environment variables the function
// reads and the AWS actions its code calls (Function). template.yaml must
// set exactly those variables and grant exactly those actions; the tests
// compare the template with these declarations and, against the
// emulators, check that the calls the handlers make stay inside them.
package awsrun

// Environment variables read by the functions. Durations use Go syntax
// ("10s", "2m").
const (
	// EnvTable names the DynamoDB table (dynamostore's single table).
	EnvTable = "QUNFA_TABLE"
	// EnvQueueURL is the URL of the SQS FIFO work queue.
	EnvQueueURL = "QUNFA_QUEUE_URL"
	// EnvLogLevel is debug, info (default), warn or error.
	EnvLogLevel = "QUNFA_LOG_LEVEL"
	// EnvProviderURL is the base URL of the wecomapi provider.
	EnvProviderURL = "QUNFA_PROVIDER_URL"
	// EnvProviderSecret names the Secrets Manager secret holding the
	// deployment's default provider credential ({"token": "..."}): its
	// name, never its value. It is read at run time (smcreds, cached by
	// credcache), so a rotation needs no redeploy.
	EnvProviderSecret = "QUNFA_PROVIDER_SECRET"
	// EnvTenantSecretPrefix starts the names of the tenants' own provider
	// secrets, <prefix><tenant>/provider (template: <stack>/tenants/); a
	// tenant without one uses the default secret.
	EnvTenantSecretPrefix = "QUNFA_PROVIDER_TENANT_SECRET_PREFIX"
	// EnvProviderConnectTimeout bounds dialing the provider (default 3s).
	EnvProviderConnectTimeout = "QUNFA_PROVIDER_CONNECT_TIMEOUT"
	// EnvProviderTimeout bounds waiting for the provider's answer (default 10s).
	EnvProviderTimeout = "QUNFA_PROVIDER_TIMEOUT"
	// EnvClaimBatch is the most items the sender claims per batch (default 10).
	EnvClaimBatch = "QUNFA_SENDER_CLAIM_BATCH"
	// EnvConcurrency is the most provider calls in flight per turn (default 16).
	EnvConcurrency = "QUNFA_SENDER_CONCURRENCY"
	// EnvTurnDuration bounds one shard turn (default 60s).
	EnvTurnDuration = "QUNFA_SENDER_TURN_DURATION"
	// EnvMaxWait is the longest a turn waits in the invocation for tokens;
	// longer waits hand the shard back to the queue (default 300ms). The
	// shards of a batch wait side by side, so a wait costs the invocation's
	// time, not one per shard.
	EnvMaxWait = "QUNFA_SENDER_MAX_WAIT"
	// EnvDeadlineMargin: the sender starts no batch later than this before
	// the invocation deadline. It must cover the longest provider call
	// (connect + 2 × response timeout) so a batch never outlives the
	// invocation (default: that longest call + 5s).
	EnvDeadlineMargin = "QUNFA_SENDER_DEADLINE_MARGIN"
	// EnvStaleAfter: the reconciler re-drives a running shard without
	// progress for this long (default 2m).
	EnvStaleAfter = "QUNFA_STALE_AFTER"
	// EnvSettleAfter: the reconciler looks up items submitted this long ago;
	// it must exceed the longest provider call (default: that call + 5s).
	EnvSettleAfter = "QUNFA_SETTLE_AFTER"
	// EnvAlertBus names the EventBridge bus every function puts its alerts
	// on (internal/alert/eventbridge).
	EnvAlertBus = "QUNFA_ALERT_BUS"
	// EnvCampaignRulePrefix starts the names of the campaigns' EventBridge
	// rules (api function); its policy allows rule actions on such names
	// only.
	EnvCampaignRulePrefix = "QUNFA_CAMPAIGN_RULE_PREFIX"
	// EnvPlatformTokenHash is the hex SHA-256 of the platform operator's
	// token (api function): a hash, not a secret.
	EnvPlatformTokenHash = "QUNFA_PLATFORM_TOKEN_SHA256"
	// EnvCampaignTarget is the ARN of the submit function, the target of
	// every campaign rule (api function).
	EnvCampaignTarget = "QUNFA_CAMPAIGN_TARGET_ARN"
	// EnvCampaignDeadLetter is the ARN of the SQS queue of campaign
	// firings EventBridge could not deliver (api function; optional).
	EnvCampaignDeadLetter = "QUNFA_CAMPAIGN_DEAD_LETTER_ARN"
	// EnvCampaignScheduleGroup is the stack's EventBridge Scheduler group
	// the campaigns' schedules are made in (api function).
	EnvCampaignScheduleGroup = "QUNFA_CAMPAIGN_SCHEDULE_GROUP"
	// EnvSchedulerRole is the ARN of the role the scheduler
	// invokes the submit function with (api function; passed, not
	// assumed).
	EnvSchedulerRole = "QUNFA_CAMPAIGN_SCHEDULER_ROLE_ARN"
	// EnvCampaignTimeZone is the IANA time zone of the campaigns' cron
	// expressions (api function; default UTC).
	EnvCampaignTimeZone = "QUNFA_CAMPAIGN_TIME_ZONE"
	// EnvItemRetention: the reconciler stamps expires_at (DynamoDB TTL) on
	// a finished job's item records this long after it finished, in days
	// ("30d") or a Go duration (default 30d); the job and its shards stay.
	EnvItemRetention = "QUNFA_ITEM_RETENTION"
)

// EventBridge actions, as IAM names them (events:<action>).
const (
	EventsPutEvents     = "PutEvents"
	EventsPutRule       = "PutRule"
	EventsPutTargets    = "PutTargets"
	EventsRemoveTargets = "RemoveTargets"
	EventsDeleteRule    = "DeleteRule"
)

// DynamoDB actions, as IAM names them (dynamodb:<action>).
const (
	DynamoGetItem        = "GetItem"
	DynamoPutItem        = "PutItem"
	DynamoUpdateItem     = "UpdateItem"
	DynamoQuery          = "Query"
	DynamoBatchGetItem   = "BatchGetItem"
	DynamoBatchWriteItem = "BatchWriteItem"
	DynamoDeleteItem     = "DeleteItem"
)

// EventBridge Scheduler actions, as IAM names them (scheduler:<action>).
const (
	SchedulerCreateSchedule = "CreateSchedule"
	SchedulerUpdateSchedule = "UpdateSchedule"
	SchedulerDeleteSchedule = "DeleteSchedule"
)

// SQS actions, as IAM names them (sqs:<action>).
const (
	SQSSendMessage             = "SendMessage"
	SQSReceiveMessage          = "ReceiveMessage"
	SQSDeleteMessage           = "DeleteMessage"
	SQSChangeMessageVisibility = "ChangeMessageVisibility"
	SQSGetQueueAttributes      = "GetQueueAttributes"
)

// Secrets Manager actions, as IAM names them (secretsmanager:<action>).
const (
	SecretsGetSecretValue = "GetSecretValue"
)

// Global secondary indexes of the table (see dynamostore's package doc).
const (
	IndexTenantJobs = "tenantJobs"
	IndexRunning    = "running"
	IndexDue        = "due"
	IndexSubmitted  = "submitted"
)

// Function describes one Lambda function: where its code is, what it reads
// from the environment and which AWS actions its code calls. The IAM policy
// of its role in template.yaml grants exactly these, on the table (and the
// listed indexes) and the work queue only.
type Function struct {
	// Name is the directory under functions/.
	Name string
	// LogicalID is its AWS::Serverless::Function in template.yaml; its role
	// is LogicalID with "Function" replaced by "Role".
	LogicalID string
	// Env lists every environment variable the function reads.
	Env []string
	// DynamoDB lists the dynamodb actions it calls.
	DynamoDB []string
	// Indexes lists the global secondary indexes it queries.
	Indexes []string
	// SQS lists the sqs actions on the work queue, including those the
	// Lambda event source mapping makes with the function's role.
	SQS []string
	// Provider: the function calls the provider (sends, status look-ups).
	Provider bool
	// Secrets lists the secretsmanager actions on the provider secrets
	// (the default one and the tenants' ones under the prefix).
	Secrets []string
	// CallbackSecrets lists the secretsmanager actions on the callback
	// secrets only: <prefix>wechat-mp-callback/ and
	// <prefix>wecom-app-callback/, each …/provider.
	CallbackSecrets []string
	// Events lists the events actions on the alert bus (PutEvents).
	Events []string
	// CampaignRules lists the events actions on the campaign rules (names
	// starting with the rule prefix, on the default bus): campaigns made
	// before schedules moved to EventBridge Scheduler keep their rule
	// until they are changed or deleted.
	CampaignRules []string
	// CampaignSchedules lists the scheduler actions on the campaigns'
	// schedules (the stack's schedule group, names starting "c-"); with
	// them the function may pass the campaign scheduler role (iam:PassRole).
	CampaignSchedules []string
	// Async: the function is invoked asynchronously (schedules, rules);
	// invocations that fail every retry go to the failed-invocations
	// queue, its OnFailure destination, with the function's role
	// (sqs:SendMessage there).
	Async bool
	// Tracing is the default of the function's X-Ray tracing mode in
	// template.yaml (parameter <LogicalID without Function>Tracing):
	// Active samples the invocations Lambda starts untraced (1 a second
	// and 5 % of the rest), PassThrough traces only those whose trigger
	// carries a sampled trace header. A function invoked per batch of
	// messages sent is PassThrough, so its traces are bounded per job,
	// not per second.
	Tracing string
	// EndsTraces: the function's AWS requests carry no trace header
	// (Tracing.ClientOptions), so the messages and events it sends start
	// no traced invocation.
	EndsTraces bool
}

// X-Ray tracing modes of a function (template.yaml).
const (
	TracingActive      = "Active"
	TracingPassThrough = "PassThrough"
)

var (
	baseEnv     = []string{EnvTable, EnvQueueURL, EnvLogLevel, EnvAlertBus}
	alerts      = []string{EventsPutEvents}
	providerEnv = []string{EnvProviderURL, EnvProviderSecret, EnvTenantSecretPrefix, EnvProviderConnectTimeout, EnvProviderTimeout}
	secrets     = []string{SecretsGetSecretValue}
)

func concat(lists ...[]string) []string {
	var out []string
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}

// The functions. Every one but webhooks publishes alerts on the alert bus.
var (
	// Submit serves POST /v1/jobs (API Gateway) and campaign firings
	// (the campaigns' EventBridge rules): authenticate, validate, write
	// the job and its snapshot, enqueue the first turn of every shard.
	Submit = Function{
		Name: "submit", LogicalID: "SubmitFunction",
		Env:      baseEnv,
		DynamoDB: []string{DynamoGetItem, DynamoPutItem, DynamoUpdateItem, DynamoQuery, DynamoBatchGetItem},
		SQS:      []string{SQSSendMessage},
		Events:   alerts,
		Async:    true, // campaign firings
		Tracing:  TracingActive,
	}
	// API serves every other route of the HTTP API v1. Redrive and resolve
	// record the items' error details (BatchWriteItem of E# records);
	// deleting a campaign or a suppression deletes its record; the
	// campaign routes keep the campaigns' EventBridge rules.
	API = Function{
		Name: "api", LogicalID: "ApiFunction",
		Env: concat(baseEnv, []string{EnvCampaignRulePrefix, EnvCampaignTarget, EnvCampaignDeadLetter, EnvPlatformTokenHash,
			EnvCampaignScheduleGroup, EnvSchedulerRole, EnvCampaignTimeZone, EnvTenantSecretPrefix}),
		DynamoDB: []string{DynamoGetItem, DynamoPutItem, DynamoUpdateItem, DynamoQuery, DynamoBatchGetItem,
			DynamoBatchWriteItem, DynamoDeleteItem},
		Indexes:           []string{IndexTenantJobs},
		SQS:               []string{SQSSendMessage},
		Events:            alerts,
		CampaignRules:     []string{EventsRemoveTargets, EventsDeleteRule},
		CampaignSchedules: []string{SchedulerCreateSchedule, SchedulerUpdateSchedule, SchedulerDeleteSchedule},
		// Provider callbacks (/v1/callbacks/wechat-mp/{account},
		// /v1/callbacks/wecom-app/{account}) verify and open events with
		// the account's or its tenant's callback token and EncodingAESKey.
		CallbackSecrets: secrets,
		Tracing:         TracingActive,
	}
	// Sender works shard turns from the FIFO work queue.
	Sender = Function{
		Name: "sender", LogicalID: "SenderFunction",
		Env: concat(baseEnv, providerEnv, []string{EnvClaimBatch, EnvConcurrency, EnvTurnDuration, EnvMaxWait, EnvDeadlineMargin}),
		DynamoDB: []string{DynamoGetItem, DynamoPutItem, DynamoUpdateItem, DynamoQuery, DynamoBatchGetItem,
			DynamoBatchWriteItem},
		Indexes: []string{IndexDue},
		SQS: []string{SQSSendMessage, SQSChangeMessageVisibility,
			SQSReceiveMessage, SQSDeleteMessage, SQSGetQueueAttributes}, // the last three: event source mapping
		Provider:   true,
		Secrets:    secrets,
		Events:     alerts,
		Tracing:    TracingPassThrough,
		EndsTraces: true,
	}
	// Reconciler runs one reconciliation pass per scheduled event.
	Reconciler = Function{
		Name: "reconciler", LogicalID: "ReconcilerFunction",
		Env: concat(baseEnv, providerEnv, []string{EnvStaleAfter, EnvSettleAfter, EnvItemRetention}),
		DynamoDB: []string{DynamoGetItem, DynamoPutItem, DynamoUpdateItem, DynamoQuery, DynamoBatchGetItem,
			DynamoBatchWriteItem},
		Indexes:  []string{IndexRunning, IndexSubmitted},
		SQS:      []string{SQSSendMessage},
		Provider: true,
		Secrets:  secrets,
		Events:   alerts,
		Async:    true,
		Tracing:  TracingActive,
	}
	// Breaker runs one failure-rate check over the accounts with running
	// shards per scheduled event (breaker.Breakers.Check), holding the
	// store lease "breaker" (UpdateItem) so checks never overlap.
	Breaker = Function{
		Name: "breaker", LogicalID: "BreakerFunction",
		Env:      baseEnv,
		DynamoDB: []string{DynamoGetItem, DynamoPutItem, DynamoUpdateItem, DynamoQuery, DynamoBatchGetItem},
		Indexes:  []string{IndexRunning},
		Events:   alerts,
		Async:    true,
		Tracing:  TracingActive,
	}
	// Webhooks stores deliveries of the alerts its EventBridge rule sends
	// from the alert bus and posts due deliveries (on every event and on
	// a schedule, for retries). It publishes nothing and uses no queue
	// (it reads the common variables all the same).
	Webhooks = Function{
		Name: "webhooks", LogicalID: "WebhooksFunction",
		Env:      baseEnv,
		DynamoDB: []string{DynamoGetItem, DynamoPutItem, DynamoUpdateItem, DynamoQuery, DynamoBatchGetItem},
		Indexes:  []string{IndexRunning},
		Async:    true,
		Tracing:  TracingPassThrough,
	}
)

// Functions lists every function deployed by template.yaml.
func Functions() []Function { return []Function{Submit, API, Sender, Reconciler, Breaker, Webhooks} }

// reads reports whether the function reads the variable.
func (f Function) reads(name string) bool {
	for _, e := range f.Env {
		if e == name {
			return true
		}
	}
	return false
}
