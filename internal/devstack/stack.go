package devstack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/qunfa/qunfa/internal/alert"
	"github.com/qunfa/qunfa/internal/api"
	"github.com/qunfa/qunfa/internal/breaker"
	"github.com/qunfa/qunfa/internal/campaign"
	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/control"
	"github.com/qunfa/qunfa/internal/handlers"
	"github.com/qunfa/qunfa/internal/metrics"
	"github.com/qunfa/qunfa/internal/metrics/prom"
	"github.com/qunfa/qunfa/internal/mockprovider"
	"github.com/qunfa/qunfa/internal/provider"
	"github.com/qunfa/qunfa/internal/provider/accesstoken"
	"github.com/qunfa/qunfa/internal/provider/accountroute"
	"github.com/qunfa/qunfa/internal/provider/credcache"
	"github.com/qunfa/qunfa/internal/provider/filecreds"
	"github.com/qunfa/qunfa/internal/provider/httpcall"
	"github.com/qunfa/qunfa/internal/provider/httpprovider"
	"github.com/qunfa/qunfa/internal/provider/wechatmp"
	"github.com/qunfa/qunfa/internal/provider/wecomapi"
	"github.com/qunfa/qunfa/internal/provider/wecomapp"
	"github.com/qunfa/qunfa/internal/queue"
	"github.com/qunfa/qunfa/internal/queue/queuecap"
	"github.com/qunfa/qunfa/internal/queue/sqlitequeue"
	"github.com/qunfa/qunfa/internal/reconcile"
	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/store/sqlitestore"
	"github.com/qunfa/qunfa/internal/store/storeseries"
	"github.com/qunfa/qunfa/internal/submit"
	"github.com/qunfa/qunfa/internal/webhook"
)

// Config configures the local stack (`qunfa dev`).
type Config struct {
	Addr            string        // API address (default 127.0.0.1:8080)
	DataDir         string        // default .qunfa
	ProviderURL     string        // empty: start the mock provider at MockAddr
	MockAddr        string        // default 127.0.0.1:8081
	Workers         int           // sender invocations in hand at once (default DefaultInvocations)
	ReconcileEvery  time.Duration // default 1 min
	BreakerEvery    time.Duration // breaker failure-rate check (default 1 min)
	StaleAfter      time.Duration // default 2 min
	ProviderTimeout time.Duration // provider response timeout (default 10 s)
	// Token is the admin API token of the default tenant; empty = the one
	// kept in the data directory (made up at the first start).
	Token string
	// AdminToken is the platform operator's token (grants accounts,
	// creates tenants' first tokens); empty = the one kept in the data
	// directory.
	AdminToken string
	// ProviderToken is the default provider credential (from
	// QUNFA_PROVIDER_TOKEN) when <data-dir>/provider-credentials/default
	// is absent; a tenant's own is <data-dir>/provider-credentials/tenants/<tenant>.
	// Both are read at run time. Never logged.
	ProviderToken string
	Sender        sender.Config
	Limits        submit.Limits

	// AllowPrivateURLs lets webhooks reach loopback and private addresses
	// (local testing only).
	AllowPrivateURLs bool
	// WebhookRetryBase is the first retry wait of a failed webhook
	// delivery (default webhook.DefaultRetry.Base).
	WebhookRetryBase time.Duration

	// AWS, when set, runs the stack on the production adapters — a
	// DynamoDB table and an SQS FIFO queue — instead of the embedded
	// SQLite store and queue (`qunfa dev --backend aws`, aws.go).
	AWS *AWSBackend
}

func (c Config) withDefaults() Config {
	if c.Addr == "" {
		c.Addr = "127.0.0.1:8080"
	}
	if c.DataDir == "" {
		c.DataDir = ".qunfa"
	}
	if c.MockAddr == "" {
		c.MockAddr = "127.0.0.1:8081"
	}
	if c.Workers <= 0 {
		c.Workers = DefaultInvocations
	}
	if c.ReconcileEvery <= 0 {
		c.ReconcileEvery = time.Minute
	}
	if c.BreakerEvery <= 0 {
		c.BreakerEvery = time.Minute
	}
	if c.StaleAfter <= 0 {
		c.StaleAfter = 2 * time.Minute
	}
	if c.ProviderTimeout <= 0 {
		c.ProviderTimeout = 10 * time.Second
	}
	if c.Sender.ClaimBatch <= 0 {
		c.Sender.ClaimBatch = 50
	}
	if c.Sender.Concurrency <= 0 {
		c.Sender.Concurrency = 64
	}
	if c.Sender.TurnDuration <= 0 {
		c.Sender.TurnDuration = 20 * time.Second
	}
	if c.Sender.MaxWait <= 0 {
		// A waiting turn is a parked goroutine here, cheaper than a trip
		// through the queue: an account at 1/s keeps its turn between sends.
		c.Sender.MaxWait = 2 * time.Second
	}
	return c
}

// maxIdleProviderConns bounds the keep-alive connections kept to the
// provider.
const maxIdleProviderConns = 1024

// ProviderCredentialsDir, in the data directory, holds the provider
// tokens: default, and tenants/<tenant> for a tenant's own (each JSON
// {"token": "..."} or the bare token).
const ProviderCredentialsDir = "provider-credentials"

// WechatCallbackDir and WecomCallbackDir, in ProviderCredentialsDir, hold
// the callback tokens of WeChat (Official Accounts) and of WeCom
// applications: an account's own accounts/<account> (":" spelled "."),
// else its tenant's tenants/<tenant>, else default; their aes
// subdirectory holds the EncodingAESKeys the same way.
const (
	WechatCallbackDir = "wechat-mp-callback"
	WecomCallbackDir  = "wecom-app-callback"
)

// callbackSecrets reads one provider's callback secrets from dir.
func callbackSecrets(dir string, clk clock.Clock, log *slog.Logger) api.CallbackSecrets {
	files := func(d string, accounts bool) provider.Credentials {
		return credcache.New(filecreds.New(filecreds.Config{Dir: d, Accounts: accounts}), credcache.Options{TTL: 30 * time.Second, Clock: clk, Log: log})
	}
	aes := filepath.Join(dir, "aes")
	return api.CallbackSecrets{
		Token:  accesstoken.Lookup{Accounts: files(dir, true), Tenants: files(dir, false)},
		AESKey: accesstoken.Lookup{Accounts: files(aes, true), Tenants: files(aes, false)},
	}
}

// SeriesFlush is how often the local stack writes the per-minute series
// (the dashboard's charts lag the work by at most this).
const SeriesFlush = time.Second

// flushSeries writes the series' pending counts at every tick and once
// more when ctx ends.
func (s *Stack) flushSeries(ctx context.Context, tick <-chan time.Time) {
	for {
		select {
		case <-ctx.Done():
			if err := s.Series.Flush(context.WithoutCancel(ctx)); err != nil {
				s.Log.Warn("series flush failed", slog.Any("err", err))
			}
			return
		case <-tick:
			if err := s.Series.Flush(ctx); err != nil {
				s.Log.Warn("series flush failed", slog.Any("err", err))
			}
		}
	}
}

// DefaultTenant owns the locally generated API token.
const DefaultTenant = "default"

// Stack is a started local stack.
type Stack struct {
	Config Config
	// Store is the SQLite store, or the DynamoDB one with --backend aws.
	Store Store
	// Queue is the work queue: SQLite, or SQS FIFO with --backend aws.
	Queue      queue.Queue
	Mock       *mockprovider.Mock // nil with an external provider
	Submitter  *submit.Submitter
	Control    *control.Controller
	Sender     *sender.Sender
	Reconciler *reconcile.Reconciler
	// WechatCallbacks and WecomCallbacks are the callback secrets of the
	// accounts (WechatCallbackDir, WecomCallbackDir): the callback routes
	// verify and open events with them.
	WechatCallbacks, WecomCallbacks api.CallbackSecrets
	// Campaigns fires due scheduled campaigns (campaigns.go).
	Campaigns *campaign.Campaigns
	// Feed keeps the latest alerts for the dashboard; alerts also go to
	// the log.
	Feed *alert.Feed
	// Series records the sender's and reconciler's folds as per-minute
	// counters for the dashboard's charts (flushed every SeriesFlush).
	Series *storeseries.Store
	// Webhooks works due webhook deliveries (webhooks.go).
	Webhooks *webhook.Deliverer
	// Metrics is served at /metrics in Prometheus text format.
	Metrics *prom.Recorder
	Log     *slog.Logger
	APIURL  string
	MockURL string
	Token   string
	// TokenGenerated is true when Token did not come from the
	// configuration (it is kept in the data directory).
	TokenGenerated bool
	// AdminToken is the platform token, kept like Token.
	AdminToken string
	// DynamoDBEndpoint and SQSEndpoint are the endpoints of the AWS
	// emulators the stack started (AWSBackend.Emulators; empty otherwise).
	DynamoDBEndpoint, SQSEndpoint string

	closers []func() error
	// held renews the visibility of the messages invocations work (SQS:
	// a restarted process cannot release what its previous life held, so
	// visibility is kept short; nil on SQLite).
	held *HeldMessages
	// queueDepth reads the work queue's visible and in-flight messages.
	queueDepth func(context.Context) (int, int, error)
	// capacity counts the DynamoDB units consumed (aws backend; nil on
	// SQLite).
	capacity *prometheus.CounterVec
}

// Store is what the local stack needs of its store: the port itself, the
// per-minute series and the API tokens. The SQLite and DynamoDB adapters
// both provide it.
type Store interface {
	store.Store
	store.SeriesStore
	store.TenantStore
	store.WebhookStore
	store.MsgCallStore
	store.ItemGetter
}

// Open opens the data directory and builds every component, without
// starting to serve. Close releases what Open acquired.
func Open(ctx context.Context, cfg Config, log *slog.Logger) (*Stack, error) {
	cfg = cfg.withDefaults()
	s := &Stack{Config: cfg, Log: log}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("data directory: %w", err)
	}
	unlock, err := lockDataDir(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	s.closers = append(s.closers, unlock)
	var st Store
	var q queue.Queue
	if cfg.AWS != nil {
		st, q, err = s.openAWS(ctx)
	} else {
		st, q, err = s.openSQLite(ctx)
	}
	if err != nil {
		s.Close()
		return nil, err
	}
	s.Store, s.Queue = st, q

	s.Token, s.TokenGenerated = cfg.Token, cfg.Token == ""
	if s.Token == "" {
		if s.Token, err = keptToken(cfg.DataDir, "api-token"); err != nil {
			s.Close()
			return nil, err
		}
	}
	if s.AdminToken = cfg.AdminToken; s.AdminToken == "" {
		if s.AdminToken, err = keptToken(cfg.DataDir, "admin-token"); err != nil {
			s.Close()
			return nil, err
		}
	}
	if err := st.PutToken(ctx, api.HashToken(s.Token), DefaultTenant); err != nil {
		s.Close()
		return nil, fmt.Errorf("register API token: %w", err)
	}

	providerURL := cfg.ProviderURL
	if providerURL == "" {
		// The stack's own mock speaks every protocol an account may name.
		m, err := mockprovider.New(mockprovider.Config{LogPath: filepath.Join(cfg.DataDir, "mock-deliveries.jsonl"),
			Protocol: mockprovider.ProtocolAll, MemberLimitPerMin: mockprovider.WecomAppMemberLimitPerMin})
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("mock provider: %w", err)
		}
		s.Mock = m
		s.closers = append(s.closers, m.Close)
		s.MockURL = "http://" + cfg.MockAddr
		providerURL = s.MockURL
	}
	clk := clock.System{}
	// Each call's token is its account owner's, read from the data
	// directory (or the environment) and cached briefly.
	creds := credcache.New(filecreds.New(filecreds.Config{Dir: filepath.Join(cfg.DataDir, ProviderCredentialsDir), Default: cfg.ProviderToken}),
		credcache.Options{TTL: 30 * time.Second, Clock: clk, Log: log})
	// Keep-alive connections for every call the senders may have in flight
	// (Workers turns at once, each up to ClaimBatch calls): with fewer, a
	// burst of single-recipient calls dials connections only to close
	// them after, a sixth of qunfa dev's CPU at 1,000,000 messages.
	wecom, err := wecomapi.New(wecomapi.Config{
		BaseURL:             providerURL,
		ResponseTimeout:     cfg.ProviderTimeout,
		MaxIdleConnsPerHost: min(cfg.Workers*cfg.Sender.ClaimBatch, maxIdleProviderConns),
		Credentials:         creds,
		Owners:              st,
		Clock:               clk,
		Logger:              log,
	})
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("provider: %w", err)
	}
	// WeCom application accounts reach the same provider URL locally; the
	// application secrets are files of their own: an application's own
	// <dir>/wecom-app/accounts/<corpid>.<agentid>, else its tenant's
	// <dir>/wecom-app/tenants/<tenant>, else <dir>/wecom-app/default.
	// With the stack's own mock, any secret does.
	appSecret := ""
	if s.Mock != nil {
		appSecret = "local-mock-secret"
	}
	appCreds := credcache.New(filecreds.New(filecreds.Config{Dir: filepath.Join(cfg.DataDir, ProviderCredentialsDir, string(provider.KindWecomApp)), Default: appSecret}),
		credcache.Options{TTL: 30 * time.Second, Clock: clk, Log: log})
	appAccountCreds := credcache.New(filecreds.New(filecreds.Config{Dir: filepath.Join(cfg.DataDir, ProviderCredentialsDir, string(provider.KindWecomApp)), Accounts: true}),
		credcache.Options{TTL: 30 * time.Second, Clock: clk, Log: log})
	wecomApp, err := wecomapp.New(wecomapp.Config{BaseURL: providerURL, AccountCredentials: appAccountCreds, Credentials: appCreds, Owners: st, Clock: clk, Logger: log,
		Timeouts: httpcall.Timeouts{Response: cfg.ProviderTimeout}})
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("provider: %w", err)
	}
	// Generic HTTP providers: their {{secret}} is <dir>/http/{default,tenants/<tenant>};
	// their URLs are tenant-given, so private addresses only with
	// --allow-private-urls.
	httpCreds := credcache.New(filecreds.New(filecreds.Config{Dir: filepath.Join(cfg.DataDir, ProviderCredentialsDir, string(provider.KindHTTP))}),
		credcache.Options{TTL: 30 * time.Second, Clock: clk, Log: log})
	httpProv := httpprovider.New(httpprovider.Config{Credentials: httpCreds, AllowPrivate: cfg.AllowPrivateURLs, Logger: log,
		Timeouts: httpcall.Timeouts{Response: cfg.ProviderTimeout}})
	// Official Account template messages: the AppSecret is
	// <dir>/wechat-mp/{default,tenants/<tenant>} (any with the own mock).
	mpCreds := credcache.New(filecreds.New(filecreds.Config{Dir: filepath.Join(cfg.DataDir, ProviderCredentialsDir, "wechat-mp"), Default: appSecret}),
		credcache.Options{TTL: 30 * time.Second, Clock: clk, Log: log})
	mpTemplate, err := wechatmp.NewTemplate(wechatmp.Config{BaseURL: providerURL, Credentials: mpCreds, Owners: st, Clock: clk, Logger: log,
		Timeouts: httpcall.Timeouts{Response: cfg.ProviderTimeout}})
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("provider: %w", err)
	}
	// Official Account mass send: the same AppSecret; the account is the appid.
	mpMass, err := wechatmp.NewMass(wechatmp.Config{BaseURL: providerURL, Credentials: mpCreds, Owners: st, Clock: clk, Logger: log,
		Timeouts: httpcall.Timeouts{Response: cfg.ProviderTimeout}})
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("provider: %w", err)
	}
	// Each call goes through the adapter of the provider its account names.
	prov, err := accountroute.New(accountroute.Config{Accounts: st, Clock: clk, Logger: log,
		Adapters: map[provider.Kind]provider.Provider{provider.KindWecomAPI: wecom, provider.KindWecomApp: wecomApp,
			provider.KindWechatMPTemplate: mpTemplate, provider.KindWechatMPMass: mpMass, provider.KindHTTP: httpProv}})
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("provider: %w", err)
	}
	s.Feed = alert.NewFeed(1000)
	hooks, deliverer := s.newWebhooks(clk)
	s.Webhooks = deliverer
	alerts := alert.Multi{alert.NewLog(log), s.Feed, hooks}
	s.Submitter = &submit.Submitter{Store: st, Queue: q, Clock: clk, Limits: cfg.Limits, Alerts: alerts, Log: log}
	s.Series = storeseries.Wrap(st, st, storeseries.Options{Every: SeriesFlush, Clock: clk, Log: log})
	s.Control = &control.Controller{Store: s.Series, Queue: q, Clock: clk, Alerts: alerts, Log: log}
	s.Metrics = prom.New(log)
	s.Metrics.WatchQueue("work", s.queueDepth)
	s.observeCapacity()
	// The sender hands shards back through the queue that stops renewing
	// a message once its invocation has decided about it.
	var senderQueue queue.Queue = q
	if s.held != nil {
		senderQueue = s.held
	}
	s.Sender = &sender.Sender{Store: s.Series, Queue: queuecap.New(senderQueue, queuecap.DefaultMax), Provider: metrics.Provider(prov, s.Metrics), Clock: clk, Log: log,
		Config: cfg.Sender, Alerts: alerts, Outcomes: hooks, Metrics: s.Metrics, MsgCalls: st, Sizers: &sender.Sizers{}, Accounts: &sender.AccountReads{},
		Breakers: &breaker.Breakers{Store: st, Clock: clk, Alerts: alerts, Log: log}}
	s.Reconciler = &reconcile.Reconciler{
		Store: s.Series, MsgCalls: st, Queue: q, Provider: prov, Clock: clk, Log: log, Alerts: alerts, Outcomes: hooks, Items: st, Gauges: s.Metrics,
		// A call lasts at most connect + 2 × response timeout: never look up
		// an item whose call may still be in flight.
		StaleAfter: cfg.StaleAfter, SettleAfter: 3*time.Second + 2*cfg.ProviderTimeout + 5*time.Second,
		Plans: s.Submitter,
	}
	if cfg.AWS != nil {
		// Named after the data directory, so the next life of this stack
		// frees the lease a killed pass held (openAWS).
		s.Reconciler.Holder = reconcilerHolder(cfg.DataDir)
	}
	s.WechatCallbacks = callbackSecrets(filepath.Join(cfg.DataDir, ProviderCredentialsDir, WechatCallbackDir), clk, log)
	s.WecomCallbacks = callbackSecrets(filepath.Join(cfg.DataDir, ProviderCredentialsDir, WecomCallbackDir), clk, log)
	s.Campaigns = s.newCampaigns()
	s.APIURL = "http://" + cfg.Addr
	return s, nil
}

// Serve runs the API (the given handler), the mock provider, the sender
// event source and the reconciler schedule until ctx is done, then shuts
// down cleanly: the API stops accepting, senders finish the batch in hand
// and hand their shards back.
func (s *Stack) Serve(ctx context.Context, api http.Handler) error {
	cfg := s.Config
	var listeners []net.Listener
	apiLn, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen for the API: %w", err)
	}
	listeners = append(listeners, apiLn)
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", s.Metrics.Handler())
	mux.Handle("/", api)
	apiSrv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	var mockSrv *http.Server
	var mockLn net.Listener
	if s.Mock != nil {
		mockLn, err = net.Listen("tcp", cfg.MockAddr)
		if err != nil {
			apiLn.Close()
			return fmt.Errorf("listen for the mock provider: %w", err)
		}
		mockSrv = &http.Server{Handler: s.Mock.Handler(), ReadHeaderTimeout: 10 * time.Second}
	}
	errc := make(chan error, 2)
	go func() { errc <- serveHTTP(apiSrv, apiLn) }()
	if mockSrv != nil {
		go func() { errc <- serveHTTP(mockSrv, mockLn) }()
	}

	workCtx, stopWork := context.WithCancel(ctx)
	defer stopWork()
	var wg sync.WaitGroup
	src := &EventSource{
		Queue: s.Queue, Handler: handlers.Work(s.Sender, s.Submitter, s.Log), Log: s.Log,
		Workers: cfg.Workers, Timeout: 2 * s.senderTurn(), Held: s.held,
	}
	if s.held != nil {
		src.Visibility = cfg.AWS.Visibility
	}
	campaignTick := time.NewTicker(CampaignTick)
	defer campaignTick.Stop()
	webhookTick := time.NewTicker(WebhookTick)
	defer webhookTick.Stop()
	seriesTick := time.NewTicker(SeriesFlush)
	defer seriesTick.Stop()
	wg.Add(6)
	go func() { defer wg.Done(); s.flushSeries(workCtx, seriesTick.C) }()
	go func() { defer wg.Done(); s.deliverWebhooks(workCtx, webhookTick.C) }()
	go func() { defer wg.Done(); s.fireCampaigns(workCtx, campaignTick.C) }()
	go func() { defer wg.Done(); src.Run(workCtx) }()
	go func() {
		defer wg.Done()
		s.schedule(workCtx, "qunfa-reconciler", cfg.ReconcileEvery, handlers.Reconciler(s.Reconciler, s.Log))
	}()
	go func() {
		defer wg.Done()
		s.schedule(workCtx, "qunfa-breaker", cfg.BreakerEvery, handlers.Breaker(s.Sender.Breakers, s.Log))
	}()

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
	}
	s.Log.Info("shutting down: finishing batches in hand")
	stopWork()
	wg.Wait() // senders handed their shards back
	shCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = apiSrv.Shutdown(shCtx)
	if mockSrv != nil {
		_ = mockSrv.Shutdown(shCtx)
	}
	return serveErr
}

func (s *Stack) senderTurn() time.Duration {
	return s.Config.Sender.TurnDuration
}

// ScheduledHandler is the shape of an EventBridge-scheduled handler.
type ScheduledHandler func(context.Context, events.EventBridgeEvent) error

// schedule fires a scheduled handler like its EventBridge rule would, with a
// scheduled-event payload: once at start (to resume after a crash), then
// every period.
func (s *Stack) schedule(ctx context.Context, rule string, every time.Duration, h ScheduledHandler) {
	fire := func(t time.Time) {
		ev := events.EventBridgeEvent{
			Version: "0", ID: "local-" + strconv.FormatInt(t.UnixNano(), 36), DetailType: "Scheduled Event",
			Source: "aws.events", Time: t.UTC(), Region: "local", Resources: []string{"local:rule/" + rule},
			Detail: []byte("{}"),
		}
		if err := h(ctx, ev); err != nil && ctx.Err() == nil {
			s.Log.Error("scheduled function failed", slog.String("rule", rule), slog.Any("err", err))
		}
	}
	fire(time.Now())
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case t := <-tick.C:
			fire(t)
		}
	}
}

func serveHTTP(srv *http.Server, ln net.Listener) error {
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Close releases the store, queue and mock provider.
func (s *Stack) Close() error {
	var errs []error
	for i := len(s.closers) - 1; i >= 0; i-- {
		errs = append(errs, s.closers[i]())
	}
	s.closers = nil
	return errors.Join(errs...)
}

// openSQLite opens the embedded store and queue in the data directory.
func (s *Stack) openSQLite(ctx context.Context) (Store, queue.Queue, error) {
	st, err := sqlitestore.Open(ctx, filepath.Join(s.Config.DataDir, "store.db"))
	if err != nil {
		return nil, nil, fmt.Errorf("open store: %w", err)
	}
	s.closers = append(s.closers, st.Close)
	q, err := sqlitequeue.Open(ctx, filepath.Join(s.Config.DataDir, "queue.db"), sqlitequeue.Options{
		Name: "work", DeadLetter: "work-dlq", MaxReceiveCount: 10,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("open queue: %w", err)
	}
	s.closers = append(s.closers, q.Close)
	s.queueDepth = func(ctx context.Context) (int, int, error) {
		qs, err := q.Stats(ctx)
		return qs.Visible, qs.InFlight, err
	}
	// This process owns the data directory alone (the lock): whatever its
	// previous life held in flight was abandoned by a crash. Hand it out
	// again now instead of waiting out the visibility timeout; the store's
	// turn fencing and the reconciler make the redelivery safe.
	if n, err := q.ReleaseInFlight(ctx); err != nil {
		return nil, nil, fmt.Errorf("release messages held before a restart: %w", err)
	} else if n > 0 {
		s.Log.Info("resuming shard turns held before the restart", slog.Int("turns", n))
	}
	// Likewise the reconciler's lease: its holder died with the previous
	// life, and waiting out the lease would stop reconciliation for minutes.
	if n, err := st.ReleaseAbandonedLeases(ctx); err != nil {
		return nil, nil, fmt.Errorf("release leases held before a restart: %w", err)
	} else if n > 0 {
		s.Log.Info("released the reconciler lease held before the restart")
	}
	return st, q, nil
}

// reconcilerHolder names the reconciler of the local stack on the data
// directory dir in the store's lease; the reconciler appends "-<pass>".
func reconcilerHolder(dir string) string {
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	host, _ := os.Hostname()
	return "qunfa-dev:" + host + ":" + dir
}

// EnsureAccount creates the account for the default tenant if missing,
// granting it to the default tenant (an error if another tenant owns it).
func (s *Stack) EnsureAccount(ctx context.Context, a store.Account) error {
	a.Tenant = DefaultTenant
	if err := s.Store.GrantAccount(ctx, a.Tenant, a.ID, time.Now()); err != nil {
		return fmt.Errorf("grant account %s: %w", a.ID, err)
	}
	if _, err := s.Store.GetAccount(ctx, a.Tenant, a.ID); err == nil {
		return nil
	} else if !errors.Is(err, store.ErrNotFound) {
		return err
	}
	_, err := s.Store.PutAccount(ctx, a)
	return err
}

// keptToken reads the token kept in the data directory under name, or
// makes one up and keeps it (readable by the owner only), so the token
// stays the same across restarts.
func keptToken(dir, name string) (string, error) {
	path := filepath.Join(dir, name)
	b, err := os.ReadFile(path)
	if err == nil && len(strings.TrimSpace(string(b))) > 0 {
		return strings.TrimSpace(string(b)), nil
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("read %s: %w", name, err)
	}
	token := api.NewToken()
	if err := os.WriteFile(path, []byte(token+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("keep %s: %w", name, err)
	}
	return token, nil
}
