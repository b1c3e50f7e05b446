package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/qunfa/qunfa/internal/api"
	"github.com/qunfa/qunfa/internal/devstack"
	"github.com/qunfa/qunfa/internal/mockprovider"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/submit"
)

// runDev runs the whole stack locally: `qunfa dev`. record sees its flag
// set (shell completion lists the flags from it).
func runDev(ctx context.Context, args []string, record func(*flag.FlagSet)) error {
	fs := flag.NewFlagSet("dev", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	record(fs)
	var cfg devstack.Config
	fs.StringVar(&cfg.Addr, "addr", "127.0.0.1:8080", "API listen address")
	fs.StringVar(&cfg.DataDir, "data-dir", ".qunfa", "data directory (store, queue, mock delivery log)")
	fs.StringVar(&cfg.ProviderURL, "provider-url", "", "wecomapi provider base URL (default: start the mock provider)")
	fs.StringVar(&cfg.MockAddr, "mock-addr", "127.0.0.1:8081", "mock provider listen address")
	fs.IntVar(&cfg.Workers, "workers", devstack.DefaultInvocations, "sender invocations in hand at once (each works up to 10 shards; a waiting shard holds no CPU)")
	fs.DurationVar(&cfg.ReconcileEvery, "reconcile-every", time.Minute, "reconciler schedule")
	fs.DurationVar(&cfg.BreakerEvery, "breaker-every", time.Minute, "breaker failure-rate check schedule")
	fs.DurationVar(&cfg.StaleAfter, "stale-after", 2*time.Minute, "re-drive shards without progress for this long")
	fs.DurationVar(&cfg.ProviderTimeout, "provider-timeout", 10*time.Second, "provider response timeout")
	fs.BoolVar(&cfg.AllowPrivateURLs, "allow-private-urls", false, "let webhook URLs reach loopback and private addresses (local testing only)")
	fs.DurationVar(&cfg.WebhookRetryBase, "webhook-retry-base", 30*time.Second, "first retry wait of a failed webhook delivery (doubles per attempt)")
	backend := fs.String("backend", "sqlite", "store and queue: sqlite (embedded, in the data directory) or aws (DynamoDB and SQS FIFO)")
	var awsb devstack.AWSBackend
	fs.StringVar(&awsb.Table, "table", devstack.DefaultTable, "--backend aws: the DynamoDB table")
	fs.StringVar(&awsb.QueueURL, "queue-url", "", "--backend aws: the SQS FIFO work queue's URL (--create makes and uses <table>-work.fifo instead)")
	fs.BoolVar(&awsb.Create, "create", false, "--backend aws: create the table and the FIFO queue + dead-letter queue as template.yaml declares them, if missing")
	fs.BoolVar(&awsb.Emulators, "emulators", false, "--backend aws: start dynalite and fauxqs from tools/emulators (data in <data-dir>/emulators) instead of reaching AWS; implies --create")
	fs.DurationVar(&awsb.Visibility, "visibility", devstack.DefaultVisibility, "--backend aws: visibility of received work messages, renewed while worked (after a SIGKILL they return within it)")
	grantOnPut := fs.Bool("grant-on-put", true, "grant a provider account nobody owns to the tenant that first PUTs it (local convenience; production grants through the platform token)")
	demo := fs.Bool("demo", false, "configure demo accounts and submit a demo campaign")
	logFormat := fs.String("log-format", "text", "log format: text or json")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn, error")
	pprofFlag := fs.String("pprof", "", "serve runtime profiles (/debug/pprof/) on this loopback address, e.g. 127.0.0.1:6060 (debugging; also QUNFA_PPROF; off by default)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return usagef("%s", flagUsage(fs))
		}
		return usagef("%v\n%s", err, flagUsage(fs))
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	switch *backend {
	case "sqlite":
		for _, name := range []string{"table", "queue-url", "create", "emulators", "visibility"} {
			if set[name] {
				return usagef("--%s needs --backend aws", name)
			}
		}
	case "aws":
		if awsb.QueueURL == "" && !awsb.Create && !awsb.Emulators {
			return usagef("--backend aws needs --queue-url URL (the SQS FIFO work queue), --create or --emulators")
		}
		if awsb.QueueURL != "" && awsb.Emulators {
			return usagef("--queue-url and --emulators exclude each other: the emulators' queue is created on them")
		}
		if awsb.QueueURL != "" && awsb.Create {
			return usagef("--queue-url and --create exclude each other: --create makes and uses <table>-work.fifo")
		}
		if awsb.Visibility < 3*time.Second {
			return usagef("--visibility must be at least 3s (it is renewed every third of it)")
		}
		cfg.AWS = &awsb
	default:
		return usagef("--backend must be sqlite or aws, not %q", *backend)
	}
	tuneGC()
	if *demo {
		// The demo's flaky account loses an answer now and then; a short
		// timeout keeps its shard from stalling on each, so the demo shows
		// the whole cycle (lost answer → reconciled) in well under a minute.
		if !set["provider-timeout"] {
			cfg.ProviderTimeout = 2 * time.Second
		}
		if !set["reconcile-every"] {
			cfg.ReconcileEvery = 5 * time.Second
		}
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return usagef("--log-level: %v", err)
	}
	var h slog.Handler
	switch *logFormat {
	case "text":
		h = slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})
	case "json":
		h = slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level})
	default:
		return usagef("--log-format must be text or json, not %q", *logFormat)
	}
	log := slog.New(h)
	slog.SetDefault(log)
	if addr := pprofAddr(*pprofFlag); addr != "" {
		at, err := startPprof(addr, log)
		if err != nil {
			return usagef("%v", err)
		}
		fmt.Fprintf(os.Stderr, "  pprof:      http://%s/debug/pprof/\n", at)
	}
	cfg.Token = os.Getenv("QUNFA_API_TOKEN")
	cfg.AdminToken = os.Getenv("QUNFA_ADMIN_TOKEN")
	cfg.ProviderToken = os.Getenv("QUNFA_PROVIDER_TOKEN")

	stack, err := devstack.Open(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer stack.Close()
	handler := api.New(api.Deps{Store: stack.Store, Submitter: stack.Submitter, Control: stack.Control, Logger: log,
		AllowPrivateURLs: cfg.AllowPrivateURLs, PlatformTokenHash: api.HashToken(stack.AdminToken), GrantOnPut: *grantOnPut,
		Events: stack.Reconciler, WechatCallbacks: stack.WechatCallbacks, WecomCallbacks: stack.WecomCallbacks})

	served := make(chan error, 1)
	go func() { served <- stack.Serve(ctx, handler) }()

	fmt.Fprintf(os.Stderr, "\nqunfa dev is running\n  API:        %s\n  dashboard:  %s/ui/\n  metrics:    %s/metrics\n", stack.APIURL, stack.APIURL, stack.APIURL)
	if b := stack.Config.AWS; b != nil {
		fmt.Fprintf(os.Stderr, "  table:      %s\n  queue:      %s\n", b.Table, b.QueueURL)
	}
	if stack.DynamoDBEndpoint != "" {
		fmt.Fprintf(os.Stderr, "  dynamodb:   %s (emulator)\n  sqs:        %s (emulator)\n", stack.DynamoDBEndpoint, stack.SQSEndpoint)
	}
	if stack.MockURL != "" {
		fmt.Fprintf(os.Stderr, "  mock:       %s (deliveries: %s/mock-deliveries.jsonl)\n", stack.MockURL, stack.Config.DataDir)
	}
	if stack.TokenGenerated {
		fmt.Fprintf(os.Stderr, "  token:      %s   (admin of tenant %q, kept in %s; set QUNFA_API_TOKEN to choose your own)\n",
			stack.Token, devstack.DefaultTenant, stack.Config.DataDir)
	} else {
		fmt.Fprintf(os.Stderr, "  token:      from QUNFA_API_TOKEN (admin of tenant %q)\n", devstack.DefaultTenant)
	}
	if cfg.AdminToken == "" {
		fmt.Fprintf(os.Stderr, "  platform:   %s   (grants accounts, creates tenants' tokens; set QUNFA_ADMIN_TOKEN to choose your own)\n", stack.AdminToken)
	} else {
		fmt.Fprintf(os.Stderr, "  platform:   from QUNFA_ADMIN_TOKEN\n")
	}
	if *demo {
		jobID, err := startDemo(ctx, stack)
		if err != nil {
			return fmt.Errorf("demo: %w", err)
		}
		fmt.Fprintf(os.Stderr, "\nDemo campaign %s submitted. Follow it with:\n\n  QUNFA_URL=%s QUNFA_API_TOKEN=%s go run ./cmd/qunfa watch %s\n\n",
			jobID, stack.APIURL, stack.Token, jobID)
	}
	return <-served
}

func flagUsage(fs *flag.FlagSet) string {
	var b strings.Builder
	fs.SetOutput(&b)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
	return "usage: qunfa dev [flags]\n" + b.String()
}

// demoAccount is one account of the demo: its limits in qunfa and how the
// mock provider treats it.
type demoAccount struct {
	account    store.Account
	behaviour  mockprovider.Behaviour
	recipients int
}

func demoAccounts() []demoAccount {
	return []demoAccount{
		{
			account:    store.Account{ID: "acct-fast", RatePerSec: 200, Burst: 20, OnlineReservePerSec: 20, MaxRecipientsPerCall: 1},
			behaviour:  mockprovider.Behaviour{RatePerSec: 200, Burst: 20},
			recipients: 1800,
		},
		{
			account:    store.Account{ID: "acct-mid", RatePerSec: 50, Burst: 10, OnlineReservePerSec: 5, MaxRecipientsPerCall: 1},
			behaviour:  mockprovider.Behaviour{RatePerSec: 50, Burst: 10},
			recipients: 900,
		},
		{
			// A realistic fault mix: busy answers, unreachable recipients, a
			// little latency and the odd answer lost after delivery.
			account: store.Account{ID: "acct-flaky", RatePerSec: 20, Burst: 5, OnlineReservePerSec: 2, MaxRecipientsPerCall: 1},
			behaviour: mockprovider.Behaviour{RatePerSec: 20, Burst: 5, LatencyMS: 30, TimeoutRatio: 0.01,
				Errors: []mockprovider.InjectedError{{Errcode: mockprovider.CodeSystemBusy, Ratio: 0.05}, {Errcode: mockprovider.CodeRecipientInvalid, Ratio: 0.02}}},
			recipients: 300,
		},
	}
}

// startDemo configures the demo accounts and submits the demo campaign. It
// is idempotent: a restart on the same data directory finds the same job.
func startDemo(ctx context.Context, s *devstack.Stack) (string, error) {
	var rcs []submit.Recipient
	for _, d := range demoAccounts() {
		if err := s.EnsureAccount(ctx, d.account); err != nil {
			return "", err
		}
		if s.Mock != nil {
			if err := s.Mock.SetBehaviour(d.account.ID, d.behaviour); err != nil {
				return "", err
			}
		}
		for i := range d.recipients {
			rcs = append(rcs, submit.Recipient{
				Account: d.account.ID, To: fmt.Sprintf("%s-user-%04d", d.account.ID, i),
				Vars: map[string]string{"name": fmt.Sprintf("客户%04d", i)},
			})
		}
	}
	res, err := s.Submitter.Submit(ctx, submit.Params{
		Tenant: devstack.DefaultTenant, CreatedBy: "demo", IdempotencyKey: "demo-campaign-1",
		Request: submit.Request{Name: "Demo campaign", Template: "{{name}}，您好！双十二活动已开始，回复 TD 退订。", Recipients: rcs},
	})
	if err != nil {
		return "", err
	}
	return res.Job.Job.ID, nil
}
