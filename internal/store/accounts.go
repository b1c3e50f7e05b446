package store

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"
)

// Breaker is the circuit breaker of one account: open, the account's shards
// pause; after the cool-down a probe decides whether to close it.
type Breaker struct {
	Tenant  string
	Account string
	State   BreakerState // empty reads as closed
	Reason  string
	// OpenedAt is when it last opened; Until ends the cool-down.
	OpenedAt time.Time
	Until    time.Time
	// Opens counts opens since the breaker was last closed by a successful
	// probe; each reopen doubles the cool-down.
	Opens int
	// ProbeShard names the shard running the half-open probe.
	ProbeShard string
	// Window is the scheduled check's last snapshot of the account's
	// cumulative attempts (see Shard.Attempts), to compute a failure rate
	// over the time since.
	WindowAt       time.Time
	WindowAttempts int64
	WindowFailures int64
	UpdatedAt      time.Time
	Version        int64
	// Transitions counts the transitions recorded in the account's breaker
	// history; the history keeps the last MaxBreakerHistory of them.
	Transitions int64
	// Transition, when set on a breaker to save, is recorded in the
	// history in the same write as the breaker (Transitions + 1). It is
	// not part of the stored breaker: read back, it is nil.
	Transition *BreakerTransition
}

// MaxBreakerHistory is how many transitions an account's breaker history
// keeps; a newer one replaces the oldest.
const MaxBreakerHistory = 100

// BreakerTransition is one change of a breaker's state: when, why, and
// the figures that tripped it.
type BreakerTransition struct {
	// Seq numbers the account's transitions from 1 (set by the store).
	Seq  int64
	From BreakerState
	To   BreakerState
	At   time.Time
	// Reason says why, in words ("5 failed sends in a row", "probe
	// succeeded").
	Reason string
	// FailureRate (0..1) over Attempts is the scheduled check's window
	// that opened the breaker; ConsecutiveFailures the streak that did.
	// Zero when not the cause.
	FailureRate         float64
	Attempts            int64
	ConsecutiveFailures int
	// Opens and Until are the breaker's after the transition: opens in a
	// row and the end of the cool-down (zero unless open).
	Opens int
	Until time.Time
}

// ListBreakersParams selects breakers.
type ListBreakersParams struct {
	AllStates bool
}

// FrequencyCharge is one claimed item to charge against a frequency cap.
type FrequencyCharge struct {
	Seq int64
	To  string
}

// ChargeFrequencyParams charges items of one job and account (at most
// MaxPutItems).
type ChargeFrequencyParams struct {
	Tenant  string
	Account string
	JobID   string
	Cap     FrequencyCap
	Charges []FrequencyCharge
	Now     time.Time
}

// ChargeFrequencyResult lists the items over the cap, by seq.
type ChargeFrequencyResult struct {
	Capped map[int64]bool
}

// FrequencyCountsParams asks how many items recipients of one account
// were charged in the last WindowSec seconds before Now.
type FrequencyCountsParams struct {
	Tenant    string
	Account   string
	WindowSec int
	To        []string
	Now       time.Time
}

// TakeTokensParams takes tokens from a bucket.
type TakeTokensParams struct {
	Bucket     string // e.g. "acct:<tenant>/<account>" or "job:<id>"
	Want       int
	RatePerSec float64
	Burst      float64
	Now        time.Time
	// WarmupSec, when above 0, ramps the bucket from 10% to 100% of its
	// rate and burst over that many seconds after that long without a
	// grant (TakeWarm); 0 keeps the plain bucket.
	WarmupSec float64
}

// TakeTokensResult tells how many tokens were granted and, when fewer than
// wanted, how long until the next one.
type TakeTokensResult struct {
	Granted    int
	RetryAfter time.Duration
}

// BreakerConfig sets an account's circuit breaker; 0 disables a trigger.
type BreakerConfig struct {
	ConsecutiveFailures int     `json:"consecutive_failures"`
	FailureRate         float64 `json:"failure_rate"`
	MinSamples          int     `json:"min_samples"`
	CooldownSec         int     `json:"cooldown_sec"`
}

// Account is a tenant's sending account and its limits.
type Account struct {
	Tenant               string
	ID                   string
	RatePerSec           float64
	Burst                float64
	OnlineReservePerSec  float64
	MaxRecipientsPerCall int
	// MaxContentBytes bounds a recipient's rendered message on this
	// account (0: the deployment's limit, 4 KiB).
	MaxContentBytes int
	// WarmupSec ramps the account's batch rate from 10% to 100% over that
	// many seconds after that long without a send (0: no warm-up).
	WarmupSec int
	// FrequencyCap bounds how many messages one recipient of the account
	// gets in any window (zero: no cap).
	FrequencyCap FrequencyCap
	// Provider names the provider API the account sends through
	// (provider.Kind: "wecomapi", "wecom-app", "wechat-mp-mass",
	// "wechat-mp-template", "http"); "" is "wecomapi".
	Provider string
	// NoStatusLookup says the account's provider answers no status
	// look-up (a wecomapi account whose provider has none): items whose
	// answer was lost go to review instead of being looked up.
	NoStatusLookup bool
	// HTTP is how an account of the generic "http" provider calls it
	// (nil for the other providers).
	HTTP *HTTPProvider
	// Pacing spaces the account's sends by random gaps instead of the
	// token bucket's bursts (zero: the token bucket).
	Pacing    Pacing
	Breaker   BreakerConfig
	UpdatedAt time.Time
	// Sizing is what the senders last measured and chose for the account
	// (SaveAccountSizing); zero when never measured. PutAccount does not
	// write it and starts it afresh: new limits, new measurement.
	Sizing AccountSizing
}

// HTTPProvider describes a generic HTTP provider (an SMS gateway, an
// in-house sender): one request per recipient, and which answers mean
// what. Body and header values are templates of {{to}}, {{content}},
// {{key}} (the message key), {{account}} and, in headers only,
// {{secret}} (the tenant's credential for the provider).
type HTTPProvider struct {
	URL     string            `json:"url"`
	Method  string            `json:"method,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
	Body    string            `json:"body,omitempty"`
	// Accepted, RateLimited ("throttled") and Permanent are the HTTP
	// statuses that mean so. Any other answer is judged as for every
	// provider: 501/503 retryable, other 5xx uncertain (the gateway may
	// have sent it), other 4xx permanent.
	Accepted    []int `json:"accepted,omitempty"`
	RateLimited []int `json:"throttled,omitempty"`
	Permanent   []int `json:"permanent,omitempty"`
	// MsgIDField names the field of a JSON answer holding the provider's
	// message id (optional).
	MsgIDField string `json:"msgid_field,omitempty"`
}

// Validate says what is wrong with an http provider's configuration
// (nil: there is none).
func (h *HTTPProvider) Validate() error {
	if h == nil {
		return errors.New("is required for the http provider")
	}
	var errs []error
	if u, err := url.Parse(h.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, fmt.Errorf("url %q must be an absolute http(s) URL", h.URL))
	}
	switch h.Method {
	case "", "POST", "PUT", "GET":
	default:
		errs = append(errs, fmt.Errorf("method %q must be POST, PUT or GET", h.Method))
	}
	if strings.Contains(h.Body, "{{secret}}") {
		errs = append(errs, errors.New("body must not hold {{secret}} (only headers may)"))
	}
	if len(h.Accepted) == 0 {
		errs = append(errs, errors.New("accepted must list at least one HTTP status"))
	}
	for _, list := range [][]int{h.Accepted, h.RateLimited, h.Permanent} {
		for _, st := range list {
			if st < 100 || st > 599 {
				errs = append(errs, fmt.Errorf("%d is not an HTTP status", st))
			}
		}
	}
	for name := range h.Headers {
		if name == "" || strings.ContainsAny(name, " :\r\n") {
			errs = append(errs, fmt.Errorf("header name %q is invalid", name))
		}
	}
	return errors.Join(errs...)
}

// AccountSizing is the batch size and calls in flight the sender chose for
// an account from its observed call latency (issue 13): BatchSize
// recipients per call of identical content (80% of
// max_recipients_per_call, less while the P99 call latency is over 2 s),
// Concurrency calls in flight (Little's law), P99 the latency they were
// chosen from, At when.
type AccountSizing struct {
	BatchSize   int
	Concurrency int
	P99         time.Duration
	At          time.Time
}

// Measured reports whether the sizing was ever saved.
func (s AccountSizing) Measured() bool { return !s.At.IsZero() }

// SaveAccountSizingParams records an account's sizing.
type SaveAccountSizingParams struct {
	Tenant  string
	Account string
	Sizing  AccountSizing
}

// FrequencyCap is an account's per-recipient cap: at most Max messages in
// any WindowSec seconds, across all the tenant's jobs. Max 0 is no cap.
type FrequencyCap struct {
	Max       int `json:"max"`
	WindowSec int `json:"window_sec"`
}

// MaxFrequencyWindowSec is the longest frequency-cap window: 31 days.
// Charges older than that limit no cap, and stores may drop them.
const MaxFrequencyWindowSec = 31 * 86400

// Capped tells whether the cap limits anything.
func (c FrequencyCap) Capped() bool { return c.Max > 0 && c.WindowSec > 0 }

// BatchRate is the rate available to bulk sending: the account rate minus
// the online reserve.
func (a Account) BatchRate() float64 {
	r := a.RatePerSec - a.OnlineReservePerSec
	if r < 0 {
		return 0
	}
	return r
}
