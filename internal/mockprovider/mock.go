package mockprovider

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/qunfa/qunfa/internal/clock"
)

// WeCom-like error codes the mock answers with.
const (
	CodeOK               = 0
	CodeSystemBusy       = -1    // retry later
	CodeInvalidRecipient = 40003 // invalid user id
	CodeInvalidToken     = 40014 // invalid access token
	CodeInvalidParameter = 40058 // missing or invalid field
	CodeInvalidURL       = 40066 // unknown path
	CodeTokenExpired     = 42001 // access token expired
	CodeEmptyContent     = 44004 // text content empty
	CodeFrequencyLimit   = 45009 // over the account's rate
	CodeConcurrencyLimit = 45033 // too many concurrent calls
	CodeDataFormat       = 47001 // body is not valid JSON
	CodeRecipientInvalid = 81013 // recipient not found or not reachable
)

// maxBody bounds a request body.
const maxBody = 1 << 20

// Config configures a Mock.
type Config struct {
	// LogPath is the JSON-lines delivery log; it is created if missing and
	// loaded at start. Empty keeps deliveries in memory only.
	LogPath string
	// Rate and Burst are every account's initial token bucket (0 rate =
	// unlimited; 0 burst = max(1, ceil(rate))).
	Rate  float64
	Burst int
	// SilentDrop accepts over-rate recipients without delivering them
	// instead of answering 45009.
	SilentDrop bool
	// Clock drives the token buckets and log timestamps (default: system).
	// If it also has a Sleep(ctx, d) error method, injected latency waits
	// through it.
	Clock clock.Clock
	// Rand drives error and timeout injection (default: a random source).
	// It need not be safe for concurrent use.
	Rand mrand.Source
	// Logger receives start-up and failure logs (default: slog.Default()).
	Logger *slog.Logger
	// Protocol is the provider API the mock speaks: ProtocolWecomAPI
	// (the default), ProtocolWecomApp, ProtocolWechatMP, ProtocolHTTP, or
	// ProtocolAll.
	Protocol string
	// MemberLimitPerMin is every account's initial per-member limit of
	// the wecom-app protocol (0: none; WeCom's is 30).
	MemberLimitPerMin int
	// WechatCallbackURL is where the wechat-mp protocol POSTs each mass
	// send's MASSSENDJOBFINISH event and each delivered template
	// message's TEMPLATESENDJOBFINISH event, "{appid}" replaced by the app
	// (empty: no events), signed with WechatCallbackToken,
	// WechatCallbackDelay after the send (default 1 s), retried 3 times
	// until answered 200. With WechatCallbackAESKey (an EncodingAESKey)
	// the events go out in WeChat's safe mode: encrypted for the AppID,
	// encrypt_type=aes and msg_signature in the query.
	WechatCallbackURL    string
	WechatCallbackToken  string
	WechatCallbackAESKey string
	WechatCallbackDelay  time.Duration
}

// Protocols the mock speaks.
const (
	ProtocolWecomAPI = "wecomapi"
	ProtocolWecomApp = "wecom-app"
	ProtocolHTTP     = "http"
	ProtocolWechatMP = "wechat-mp"
	ProtocolAll      = "all"
)

// speaks reports whether the mock serves protocol p.
func (m *Mock) speaks(p string) bool {
	switch m.cfg.Protocol {
	case "", ProtocolWecomAPI:
		return p == ProtocolWecomAPI
	case ProtocolAll:
		return true
	default:
		return m.cfg.Protocol == p
	}
}

func (c Config) withDefaults() Config {
	if c.Clock == nil {
		c.Clock = clock.System{}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func (c Config) validate() error {
	var err error
	switch c.Protocol {
	case "", ProtocolWecomAPI, ProtocolWecomApp, ProtocolWechatMP, ProtocolHTTP, ProtocolAll:
	default:
		err = fmt.Errorf("protocol %q: want %s, %s, %s, %s or %s", c.Protocol, ProtocolWecomAPI, ProtocolWecomApp, ProtocolWechatMP, ProtocolHTTP, ProtocolAll)
	}
	return errors.Join(err, Behaviour{RatePerSec: c.Rate, Burst: c.Burst, MemberLimitPerMin: c.MemberLimitPerMin}.validate())
}

// sleeper is a clock that can wait (clock.Fake and clock.System may have
// it); injected latency uses it when present.
type sleeper interface {
	Sleep(ctx context.Context, d time.Duration) error
}

// Mock is a wecomapi provider stand-in. It is safe for concurrent use.
type Mock struct {
	cfg      Config
	log      *deliveryLog
	accounts sync.Map // guid → *account
	mux      *http.ServeMux

	randMu sync.Mutex // guards cfg.Rand
	tokens accessTokens

	msgPrefix string
	msgSeq    atomic.Uint64
	mass      massJobs // wechat-mp mass sends by msg_id
	// callbacks tracks event posts in flight; massEvents and
	// templateEvents count those answered 200.
	callbacks      sync.WaitGroup
	massEvents     atomic.Int64
	templateEvents atomic.Int64

	closing   chan struct{}
	closed    atomic.Bool
	onHold    func() // test hook: a call's answer is being withheld
	closeOnce sync.Once
	closeErr  error
}

// New builds a Mock and loads the keys of an existing delivery log.
func New(cfg Config) (*Mock, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("mock provider config: %w", err)
	}
	l, n, err := openDeliveryLog(cfg.LogPath)
	if err != nil {
		return nil, err
	}
	var p [4]byte
	_, _ = rand.Read(p[:])
	m := &Mock{
		cfg:       cfg,
		log:       l,
		msgPrefix: "m" + hex.EncodeToString(p[:]) + "-",
		closing:   make(chan struct{}),
	}
	m.mux = m.routes()
	cfg.Logger.Info("mock provider ready",
		slog.String("log", cfg.LogPath), slog.Int("loaded_deliveries", n),
		slog.Float64("rate", cfg.Rate), slog.Int("burst", cfg.Burst),
		slog.Bool("silent_drop", cfg.SilentDrop))
	return m, nil
}

// Handler serves the wecomapi endpoints and the /_mock control endpoints.
func (m *Mock) Handler() http.Handler { return m.mux }

// Close releases held (timed-out) requests and closes the delivery log.
// Send calls arriving afterwards answer -1 (system busy) and deliver
// nothing.
func (m *Mock) Close() error {
	m.closed.Store(true)
	m.release()
	m.callbacks.Wait()
	m.closeOnce.Do(func() { m.closeErr = m.log.close() })
	return m.closeErr
}

// release ends every withheld answer; it is idempotent.
func (m *Mock) release() {
	select {
	case <-m.closing:
	default:
		close(m.closing)
	}
}

// Stats returns the counts of every account seen so far.
func (m *Mock) Stats() map[string]AccountStats {
	out := map[string]AccountStats{}
	m.accounts.Range(func(k, v any) bool {
		out[k.(string)] = v.(*account).stats()
		return true
	})
	return out
}

// Delivered reports whether a message key is in the delivery log.
func (m *Mock) Delivered(key string) bool { return m.log.delivered(key) }

// SetBehaviour replaces an account's behaviour, as PUT /_mock/accounts does
// with every field present.
func (m *Mock) SetBehaviour(guid string, b Behaviour) error {
	if err := b.validate(); err != nil {
		return err
	}
	m.account(guid).setBehaviour(b, m.cfg.Clock.Now())
	return nil
}

// Behaviour returns an account's current behaviour.
func (m *Mock) Behaviour(guid string) Behaviour {
	return m.account(guid).behaviour.Load().Behaviour
}

func (m *Mock) account(guid string) *account {
	if a, ok := m.accounts.Load(guid); ok {
		return a.(*account)
	}
	a, _ := m.accounts.LoadOrStore(guid, newAccount(Behaviour{RatePerSec: m.cfg.Rate, Burst: m.cfg.Burst, MemberLimitPerMin: m.cfg.MemberLimitPerMin}, m.cfg.Clock.Now()))
	return a.(*account)
}

// draw returns a number in [0, 1).
func (m *Mock) draw() float64 {
	if m.cfg.Rand == nil {
		return mrand.Float64()
	}
	m.randMu.Lock()
	defer m.randMu.Unlock()
	return float64(m.cfg.Rand.Uint64()>>11) / (1 << 53)
}

func (m *Mock) nextMsgID() string {
	return m.msgPrefix + strconv.FormatUint(m.msgSeq.Add(1), 10)
}

// wait applies injected latency.
func (m *Mock) wait(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	if s, ok := m.cfg.Clock.(sleeper); ok {
		return s.Sleep(ctx, d)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Serve runs a Mock on addr until ctx is done, then shuts it down: withheld
// answers are released, in-flight calls finish, the log is closed.
func Serve(ctx context.Context, addr string, cfg Config) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("mock provider listen: %w", err)
	}
	return serveListener(ctx, ln, cfg)
}

// serveListener is Serve on an open listener, which it closes.
func serveListener(ctx context.Context, ln net.Listener, cfg Config) error {
	m, err := New(cfg)
	if err != nil {
		_ = ln.Close()
		return err
	}
	srv := &http.Server{Handler: m.Handler(), ReadHeaderTimeout: 10 * time.Second}
	m.cfg.Logger.Info("mock provider listening", slog.String("addr", ln.Addr().String()))
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		_ = m.Close()
		return fmt.Errorf("mock provider serve: %w", err)
	case <-ctx.Done():
	}
	m.release()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	shutErr := srv.Shutdown(sctx)
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		shutErr = errors.Join(shutErr, err)
	}
	return errors.Join(shutErr, m.Close())
}
