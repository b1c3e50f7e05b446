package awsrun

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"sync/atomic"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/scheduler"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/qunfa/qunfa/internal/alert"
	ebalert "github.com/qunfa/qunfa/internal/alert/eventbridge"
	"github.com/qunfa/qunfa/internal/api"
	"github.com/qunfa/qunfa/internal/breaker"
	"github.com/qunfa/qunfa/internal/campaign"
	"github.com/qunfa/qunfa/internal/campaign/awsscheduler"
	"github.com/qunfa/qunfa/internal/campaign/ebscheduler"
	"github.com/qunfa/qunfa/internal/campaign/httpsource"
	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/control"
	"github.com/qunfa/qunfa/internal/metrics"
	"github.com/qunfa/qunfa/internal/provider"
	"github.com/qunfa/qunfa/internal/provider/accesstoken"
	"github.com/qunfa/qunfa/internal/provider/accountroute"
	"github.com/qunfa/qunfa/internal/provider/credcache"
	"github.com/qunfa/qunfa/internal/provider/httpcall"
	"github.com/qunfa/qunfa/internal/provider/httpprovider"
	"github.com/qunfa/qunfa/internal/provider/smcreds"
	"github.com/qunfa/qunfa/internal/provider/wechatmp"
	"github.com/qunfa/qunfa/internal/provider/wecomapi"
	"github.com/qunfa/qunfa/internal/provider/wecomapp"
	"github.com/qunfa/qunfa/internal/queue/queuecap"
	"github.com/qunfa/qunfa/internal/queue/sqsqueue"
	"github.com/qunfa/qunfa/internal/reconcile"
	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/store/dynamostore"
	"github.com/qunfa/qunfa/internal/store/storeseries"
	"github.com/qunfa/qunfa/internal/submit"
	"github.com/qunfa/qunfa/internal/webhook"
	"github.com/qunfa/qunfa/internal/webhook/httppost"
)

// NewLogger returns the functions' logger: JSON lines on w (stdout in
// Lambda, which CloudWatch Logs collects), tagged with the function name.
// It writes each record straight through, so nothing is left to flush when
// the runtime shuts down.
func NewLogger(w io.Writer, level slog.Level, fn Function) *slog.Logger {
	log, _ := newInvocationLogger(w, level, fn)
	return log
}

// newInvocationLogger is NewLogger whose lines carry the request and trace
// ids of the invocation current holds (see requestid.go).
func newInvocationLogger(w io.Writer, level slog.Level, fn Function) (*slog.Logger, *atomic.Pointer[invocation]) {
	current := &atomic.Pointer[invocation]{}
	h := invocationIDs{next: slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level}), current: current}
	return slog.New(h).With(slog.String("function", fn.Name)), current
}

// Clients are the AWS SDK clients a function uses.
type Clients struct {
	DynamoDB    *dynamodb.Client
	SQS         *sqs.Client
	EventBridge *eventbridge.Client
	// SecretsManager reads the provider secrets (sender, reconciler).
	SecretsManager *secretsmanager.Client
	// Scheduler keeps the campaigns' schedules (api).
	Scheduler *scheduler.Client
	// Tracing, when set, wraps the provider HTTP clients for X-Ray (the
	// AWS clients get it through their configuration: Tracing.AWSOption).
	Tracing *Tracing
}

// NewClients loads the AWS configuration the SDK way (the Lambda role's
// credentials and region from the environment) and makes the clients. The
// SDK itself honours AWS_ENDPOINT_URL, AWS_ENDPOINT_URL_DYNAMODB,
// AWS_ENDPOINT_URL_SQS, AWS_ENDPOINT_URL_EVENTBRIDGE and
// AWS_ENDPOINT_URL_SECRETS_MANAGER, which point the
// functions at LocalStack or the emulators; opts are for tests.
func NewClients(ctx context.Context, opts ...func(*config.LoadOptions) error) (Clients, error) {
	cfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return Clients{}, fmt.Errorf("load AWS configuration: %w", err)
	}
	return Clients{DynamoDB: dynamodb.NewFromConfig(cfg), SQS: sqs.NewFromConfig(cfg), EventBridge: eventbridge.NewFromConfig(cfg),
		SecretsManager: secretsmanager.NewFromConfig(cfg), Scheduler: scheduler.NewFromConfig(cfg)}, nil
}

// Core is the core of qunfa assembled on the AWS adapters.
type Core struct {
	Store     *dynamostore.Store
	Queue     *sqsqueue.Queue
	Submitter *submit.Submitter
	Control   *control.Controller
	// API is the HTTP API v1 handler (submit and api functions).
	API http.Handler
	// Campaigns fires scheduled campaigns (submit function).
	Campaigns *campaign.Campaigns
	// Breakers is the circuit breaker core (breaker function; the sender's
	// fast path).
	Breakers *breaker.Breakers
	// Alerts publishes to the log and the alert bus.
	Alerts alert.Publisher
	// Sender and Reconciler are set for functions that call the provider.
	Sender     *sender.Sender
	Reconciler *reconcile.Reconciler
	// WebhookPublisher and WebhookDeliverer store and post webhook
	// deliveries (webhooks function).
	WebhookPublisher *webhook.Publisher
	WebhookDeliverer *webhook.Deliverer
	// Series records the sender's and reconciler's folds as per-minute
	// counters (GET /v1/jobs/{id}/series, /v1/accounts/{account}/series);
	// flush it at the end of every invocation (storeseries.FlushAfter).
	Series *storeseries.Store
	// Metrics writes CloudWatch Embedded Metric Format to stdout; flush it
	// at the end of every invocation (metrics.FlushAfter).
	Metrics *metrics.EMF
}

// Build assembles the core for cfg's function, as devstack.Open does for
// the local stack, on the DynamoDB table and SQS queue of cfg.
func Build(cfg Config, c Clients, log *slog.Logger) (*Core, error) {
	if c.DynamoDB == nil || c.SQS == nil || c.EventBridge == nil {
		return nil, fmt.Errorf("build core: missing AWS clients")
	}
	clk := clock.System{}
	st := dynamostore.New(c.DynamoDB, cfg.Table, dynamostore.Options{Logger: log})
	q := sqsqueue.New(c.SQS, cfg.QueueURL)
	alerts := alert.Multi{alert.NewLog(log), ebalert.New(c.EventBridge, cfg.AlertBus)}
	core := &Core{
		Store:     st,
		Queue:     q,
		Alerts:    alerts,
		Submitter: &submit.Submitter{Store: st, Queue: q, Clock: clk, Alerts: alerts, Log: log},
		Control:   &control.Controller{Store: st, Queue: q, Clock: clk, Alerts: alerts, Log: log},
		Breakers:  &breaker.Breakers{Store: st, Clock: clk, Alerts: alerts, Log: log},
	}
	core.Campaigns = &campaign.Campaigns{Store: st, Submitter: core.Submitter, Source: httpsource.New(httpsource.Config{WrapHTTP: c.Tracing.HTTPClient}),
		Clock: clk, Alerts: alerts, Log: log}
	deps := api.Deps{Store: st, Submitter: core.Submitter, Control: core.Control, Clock: clk, Logger: log,
		PlatformTokenHash: cfg.PlatformTokenHash,
		// Provider events settle items (store, queue and clock only).
		Events: &reconcile.Reconciler{Store: st, MsgCalls: st, Queue: q, Clock: clk, Log: log, Alerts: alerts,
			Outcomes: ebalert.New(c.EventBridge, cfg.AlertBus), Items: st}}
	if cfg.fn.reads(EnvTenantSecretPrefix) && cfg.TenantSecretPrefix != "" && !cfg.fn.Provider && c.SecretsManager != nil {
		// Callback secrets: <prefix>wechat-mp-callback/ and
		// <prefix>wecom-app-callback/ hold the tokens, <tenant>/provider or
		// an account's own accounts/<account>/provider; their aes/ the
		// EncodingAESKeys alike.
		deps.WechatCallbacks = smCallbackSecrets(c.SecretsManager, cfg.TenantSecretPrefix+"wechat-mp-callback/", clk, log)
		deps.WecomCallbacks = smCallbackSecrets(c.SecretsManager, cfg.TenantSecretPrefix+"wecom-app-callback/", clk, log)
	}
	if cfg.fn.reads(EnvCampaignRulePrefix) {
		rules, err := ebscheduler.New(c.EventBridge, ebscheduler.Config{RulePrefix: cfg.CampaignRulePrefix, TargetARN: cfg.CampaignTarget,
			DeadLetterARN: cfg.CampaignDeadLetter})
		if err != nil {
			return nil, err
		}
		if c.Scheduler == nil {
			return nil, fmt.Errorf("build core: missing the EventBridge Scheduler client")
		}
		sc := cfg.scheduleConfig()
		sc.Legacy = rules
		sched, err := awsscheduler.New(c.Scheduler, sc)
		if err != nil {
			return nil, err
		}
		deps.Scheduler = sched
		// The next firings the API shows count in the stack's zone too.
		if deps.CampaignZone, err = campaign.LoadZone(cfg.CampaignTimeZone, nil); err != nil {
			return nil, fmt.Errorf("%s: %w", EnvCampaignTimeZone, err)
		}
	}
	core.API = api.New(deps)
	core.WebhookPublisher = &webhook.Publisher{Store: st, Clock: clk, Log: log}
	core.WebhookDeliverer = &webhook.Deliverer{Store: st, Clock: clk, Log: log, Poster: httppost.New(httppost.Config{WrapHTTP: c.Tracing.HTTPClient})}
	if !cfg.fn.Provider {
		return core, nil
	}
	if c.SecretsManager == nil {
		return nil, fmt.Errorf("build core: missing the Secrets Manager client")
	}
	if cfg.ProviderSecret == "" && cfg.TenantSecretPrefix == "" {
		log.Warn("no provider secret configured; calls go out without credentials", slog.String("env", EnvProviderSecret))
	}
	// The provider token of the tenant owning each call's account, read
	// from Secrets Manager at run time and cached for a few minutes.
	creds := credcache.New(smcreds.New(c.SecretsManager, smcreds.Config{
		DefaultSecret: cfg.ProviderSecret, TenantPrefix: cfg.TenantSecretPrefix,
	}), credcache.Options{Clock: clk, Log: log})
	wrap := c.Tracing.HTTPClient
	wecom, err := wecomapi.New(wecomapi.Config{
		BaseURL: cfg.ProviderURL, Credentials: creds, Owners: st, Clock: clk,
		ConnectTimeout: cfg.ProviderConnectTimeout, ResponseTimeout: cfg.ProviderTimeout, Logger: log, WrapHTTP: wrap,
	})
	if err != nil {
		return nil, fmt.Errorf("provider: %w", err)
	}
	adapters := map[provider.Kind]provider.Provider{provider.KindWecomAPI: wecom}
	var httpCreds provider.Credentials
	if cfg.TenantSecretPrefix != "" {
		// A generic HTTP provider's {{secret}}: <prefix>http/<tenant>.
		httpCreds = credcache.New(smcreds.New(c.SecretsManager, smcreds.Config{
			TenantPrefix: cfg.TenantSecretPrefix + string(provider.KindHTTP) + "/",
		}), credcache.Options{Clock: clk, Log: log})
	}
	// Tenant-given URLs: public addresses only.
	adapters[provider.KindHTTP] = httpprovider.New(httpprovider.Config{Credentials: httpCreds, Logger: log, WrapHTTP: wrap,
		Timeouts: httpcall.Timeouts{Connect: cfg.ProviderConnectTimeout, Response: cfg.ProviderTimeout}})
	if cfg.TenantSecretPrefix != "" {
		// WeCom application accounts: each tenant's application secret
		// is <prefix>wecom-app/<tenant>/provider.
		appCreds := credcache.New(smcreds.New(c.SecretsManager, smcreds.Config{
			TenantPrefix: cfg.TenantSecretPrefix + string(provider.KindWecomApp) + "/",
		}), credcache.Options{Clock: clk, Log: log})
		// An application's own secret, when it has one, goes first:
		// <prefix>wecom-app/accounts/<corpid>.<agentid>/provider.
		appAccountCreds := credcache.New(smcreds.New(c.SecretsManager, smcreds.Config{
			TenantPrefix: cfg.TenantSecretPrefix + string(provider.KindWecomApp) + "/accounts/",
		}), credcache.Options{Clock: clk, Log: log})
		app, err := wecomapp.New(wecomapp.Config{AccountCredentials: appAccountCreds, Credentials: appCreds, Owners: st, Clock: clk, Logger: log, WrapHTTP: wrap,
			Timeouts: httpcall.Timeouts{Connect: cfg.ProviderConnectTimeout, Response: cfg.ProviderTimeout}})
		if err != nil {
			return nil, fmt.Errorf("provider: %w", err)
		}
		adapters[provider.KindWecomApp] = app
		// Official Account template messages: <prefix>wechat-mp/<tenant>.
		mpCreds := credcache.New(smcreds.New(c.SecretsManager, smcreds.Config{
			TenantPrefix: cfg.TenantSecretPrefix + "wechat-mp/",
		}), credcache.Options{Clock: clk, Log: log})
		tmpl, err := wechatmp.NewTemplate(wechatmp.Config{Credentials: mpCreds, Owners: st, Clock: clk, Logger: log, WrapHTTP: wrap,
			Timeouts: httpcall.Timeouts{Connect: cfg.ProviderConnectTimeout, Response: cfg.ProviderTimeout}})
		if err != nil {
			return nil, fmt.Errorf("provider: %w", err)
		}
		adapters[provider.KindWechatMPTemplate] = tmpl
		// Official Account mass send: the same AppSecrets; the account is the appid.
		mass, err := wechatmp.NewMass(wechatmp.Config{Credentials: mpCreds, Owners: st, Clock: clk, Logger: log, WrapHTTP: wrap,
			Timeouts: httpcall.Timeouts{Connect: cfg.ProviderConnectTimeout, Response: cfg.ProviderTimeout}})
		if err != nil {
			return nil, fmt.Errorf("provider: %w", err)
		}
		adapters[provider.KindWechatMPMass] = mass
	}
	// Each call goes through the adapter of the provider its account names.
	prov, err := accountroute.New(accountroute.Config{Accounts: st, Clock: clk, Logger: log, Adapters: adapters})
	if err != nil {
		return nil, fmt.Errorf("provider: %w", err)
	}
	core.Metrics = metrics.NewEMF(os.Stdout, metrics.EMFOptions{Dimensions: map[string]string{"function": cfg.fn.Name}})
	core.Series = storeseries.Wrap(st, st, storeseries.Options{Clock: clk, Log: log})
	core.Sender = &sender.Sender{Store: core.Series, Queue: queuecap.New(q, queuecap.DefaultMax), Provider: metrics.Provider(prov, core.Metrics), Clock: clk, Log: log,
		Config: cfg.Sender, Alerts: alerts, Metrics: core.Metrics, Breakers: core.Breakers, MsgCalls: st,
		Sizers: &sender.Sizers{}, Accounts: &sender.AccountReads{},
		// Per-batch outcomes go to the bus only (the webhooks function's
		// rule picks them up), not to the alert log.
		Outcomes: ebalert.New(c.EventBridge, cfg.AlertBus)}
	core.Reconciler = &reconcile.Reconciler{
		Store: core.Series, MsgCalls: st, Queue: q, Provider: prov, Clock: clk, Log: log, Alerts: alerts, Gauges: core.Metrics,
		StaleAfter: cfg.StaleAfter, SettleAfter: cfg.SettleAfter, Plans: core.Submitter,
		// Items a look-up settles: their outcomes go to the bus, as the sender's.
		Outcomes: ebalert.New(c.EventBridge, cfg.AlertBus), Items: st,
		// Finished jobs' item records get their expiry (the table's TTL).
		Expirer: st, Retention: cfg.ItemRetention,
	}
	return core, nil
}

// StartOptions are the lambda.StartWithOptions options every function
// uses: on SIGTERM (sent at shutdown when an extension is registered) the
// function logs that it stops; records are already written, the logger
// does not buffer.
func StartOptions(log *slog.Logger) []lambda.Option {
	return []lambda.Option{lambda.WithEnableSIGTERM(func() {
		log.Info("runtime shutting down")
	})}
}

// handler is the Lambda handler of h (a handler function as lambda.Start
// takes it) with the start options, whose invocations set the ids the
// logs of current carry.
func handler(h any, current *atomic.Pointer[invocation], log *slog.Logger) lambda.Handler {
	return trackInvocations(lambda.NewHandlerWithOptions(h, StartOptions(log)...), current)
}

// Run is the whole of a function's main: it loads fn's configuration from
// the environment, builds the AWS clients and the core, and starts the
// Lambda runtime with the handler handlerFor returns. A configuration or
// start-up error is logged and exits the process (the runtime reports the
// failed init).
func Run(fn Function, handlerFor func(core *Core, log *slog.Logger) any) {
	ctx := context.Background()
	cfg, cfgErr := Load(fn, os.Getenv)
	log, current := newInvocationLogger(os.Stdout, cfg.LogLevel, fn)
	fail := func(what string, err error) {
		log.Error(what, slog.Any("err", err))
		os.Exit(1)
	}
	if cfgErr != nil {
		fail("invalid configuration", cfgErr)
	}
	// Under Lambda, the AWS and provider calls are X-Ray sub-segments of
	// the invocation's trace (tracing.go); a function that cannot trace
	// still works.
	var tracing *Tracing
	if TracingEnabled(os.Getenv) {
		t, err := StartTracing(log)
		if err != nil {
			log.Warn("tracing off", slog.Any("err", err))
		}
		tracing = t
	}
	clients, err := NewClients(ctx, tracing.ClientOptions(fn)...)
	if err != nil {
		fail("AWS clients", err)
	}
	clients.Tracing = tracing
	core, err := Build(cfg, clients, log)
	if err != nil {
		fail("build core", err)
	}
	log.Info("ready", slog.Any("config", cfg), slog.Bool("tracing", tracing != nil))
	lambda.Start(handler(handlerFor(core, log), current, log))
}

// smCallbackSecrets reads one provider's callback secrets from Secrets
// Manager under prefix (see api.CallbackSecrets).
func smCallbackSecrets(sm smcreds.API, prefix string, clk clock.Clock, log *slog.Logger) api.CallbackSecrets {
	secrets := func(p string) provider.Credentials {
		return credcache.New(smcreds.New(sm, smcreds.Config{TenantPrefix: p}), credcache.Options{Clock: clk, Log: log})
	}
	return api.CallbackSecrets{
		Token:  accesstoken.Lookup{Accounts: secrets(prefix + "accounts/"), Tenants: secrets(prefix)},
		AESKey: accesstoken.Lookup{Accounts: secrets(prefix + "aes/accounts/"), Tenants: secrets(prefix + "aes/")},
	}
}
