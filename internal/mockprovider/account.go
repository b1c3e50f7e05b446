package mockprovider

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Behaviour is how the mock treats one account's calls. The zero value is a
// healthy account with no rate limit.
type Behaviour struct {
	// RatePerSec is the token bucket's refill rate; 0 means unlimited.
	RatePerSec float64 `json:"rate_per_sec"`
	// Burst is the bucket's size; 0 with a rate means max(1, ceil(rate)).
	Burst int `json:"burst"`
	// LatencyMS delays every answer of the account.
	LatencyMS int `json:"latency_ms"`
	// LatencyPerRecipientMS delays every answer by that much more per
	// recipient of the call, as a provider whose work grows with the
	// batch: a call of n recipients waits latency_ms + n ×
	// latency_per_recipient_ms.
	LatencyPerRecipientMS int `json:"latency_per_recipient_ms"`
	// Errors injects refusals by ratio, one draw per call.
	Errors []InjectedError `json:"errors"`
	// TimeoutRatio is the share of calls that are delivered and logged but
	// never answered.
	TimeoutRatio float64 `json:"timeout_ratio"`
	// Down makes every call answer 42001 (access token expired).
	Down bool `json:"down"`
	// Token, when set, is the only bearer token the account takes: calls
	// with another (or none) answer 42001, as WeCom answers an expired or
	// rotated-out token.
	Token string `json:"token,omitempty"`
	// InvalidToIDs are recipients the account refuses with 81013.
	InvalidToIDs []string `json:"invalid_to_ids"`
	// GatewayErrors make a share of calls answer an HTTP status with an
	// HTML body, as a gateway in front of the provider does; one draw per
	// call, ratios adding up to at most 1.
	GatewayErrors []GatewayError `json:"gateway_errors"`
	// StatusLatencyMS delays every status look-up of the account.
	StatusLatencyMS int `json:"status_latency_ms"`
	// StatusDown makes the account's status look-ups answer 503.
	StatusDown bool `json:"status_down"`
	// StatusLookup false makes the account's status look-ups answer 404,
	// as for a provider without a look-up (nil: true).
	StatusLookup *bool `json:"status_lookup,omitempty"`
	// MemberLimitPerMin (wecom-app protocol) is how many messages one
	// member gets a minute; more are accepted and silently dropped, as
	// WeCom drops them (0: no limit).
	MemberLimitPerMin int `json:"member_limit_per_min"`
	// LoseMassCallbacks (wechat-mp protocol): the app's mass sends finish
	// without their MASSSENDJOBFINISH event reaching the callback URL
	// (message/mass/get still answers).
	LoseMassCallbacks bool `json:"lose_mass_callbacks,omitempty"`
	// LoseTemplateCallbacks (wechat-mp protocol): the app's template
	// messages are delivered without their TEMPLATESENDJOBFINISH event
	// reaching the callback URL.
	LoseTemplateCallbacks bool `json:"lose_template_callbacks,omitempty"`
	// TemplateBlockedOpenIDs (wechat-mp protocol, on the appid) are users
	// who block the app's template messages: a send to one is answered
	// with a msgid but not delivered (nor logged), and its
	// TEMPLATESENDJOBFINISH says "failed:user block".
	TemplateBlockedOpenIDs []string `json:"template_blocked_openids,omitempty"`
}

// GatewayError makes a share of an account's calls answer Status (5xx)
// with an HTML body. With AfterDelivery the message is delivered and
// logged first: the gateway gave up on a provider that did the work.
type GatewayError struct {
	Status        int     `json:"status"`
	Ratio         float64 `json:"ratio"`
	AfterDelivery bool    `json:"after_delivery"`
}

// lookupEnabled reports whether the account answers status look-ups.
func (b Behaviour) lookupEnabled() bool { return b.StatusLookup == nil || *b.StatusLookup }

// InjectedError makes a share of an account's calls fail with Errcode.
type InjectedError struct {
	Errcode int     `json:"errcode"`
	Ratio   float64 `json:"ratio"`
}

// AccountStats are the counts of one account since the mock started.
// Calls and Timeouts count calls; the others count recipients.
type AccountStats struct {
	Calls       int64 `json:"calls"`
	Accepted    int64 `json:"accepted"`
	RateLimited int64 `json:"rate_limited"`
	Failed      int64 `json:"failed"`
	Timeouts    int64 `json:"timeouts"`
	Dropped     int64 `json:"dropped"`
	// GatewayErrors counts calls answered by an injected gateway error;
	// StatusCalls counts status look-ups naming the account.
	GatewayErrors int64 `json:"gateway_errors"`
	StatusCalls   int64 `json:"status_calls"`
}

// behaviourPatch is the body of PUT /_mock/accounts/{guid}: only the fields
// present change.
type behaviourPatch struct {
	RatePerSec      *float64         `json:"rate_per_sec"`
	Burst           *int             `json:"burst"`
	LatencyMS       *int             `json:"latency_ms"`
	LatencyPerRcpt  *int             `json:"latency_per_recipient_ms"`
	Errors          *[]InjectedError `json:"errors"`
	TimeoutRatio    *float64         `json:"timeout_ratio"`
	Down            *bool            `json:"down"`
	Token           *string          `json:"token"`
	InvalidToIDs    *[]string        `json:"invalid_to_ids"`
	GatewayErrors   *[]GatewayError  `json:"gateway_errors"`
	StatusLatencyMS *int             `json:"status_latency_ms"`
	StatusDown      *bool            `json:"status_down"`
	StatusLookup    *bool            `json:"status_lookup"`
	MemberLimit     *int             `json:"member_limit_per_min"`
	LoseCallbacks   *bool            `json:"lose_mass_callbacks"`
	LoseTemplate    *bool            `json:"lose_template_callbacks"`
	TemplateBlocked *[]string        `json:"template_blocked_openids"`
}

func (p behaviourPatch) apply(b Behaviour) Behaviour {
	if p.LoseCallbacks != nil {
		b.LoseMassCallbacks = *p.LoseCallbacks
	}
	if p.LoseTemplate != nil {
		b.LoseTemplateCallbacks = *p.LoseTemplate
	}
	if p.TemplateBlocked != nil {
		b.TemplateBlockedOpenIDs = *p.TemplateBlocked
	}
	if p.RatePerSec != nil {
		b.RatePerSec = *p.RatePerSec
	}
	if p.Burst != nil {
		b.Burst = *p.Burst
	}
	if p.LatencyMS != nil {
		b.LatencyMS = *p.LatencyMS
	}
	if p.LatencyPerRcpt != nil {
		b.LatencyPerRecipientMS = *p.LatencyPerRcpt
	}
	if p.Errors != nil {
		b.Errors = *p.Errors
	}
	if p.TimeoutRatio != nil {
		b.TimeoutRatio = *p.TimeoutRatio
	}
	if p.Down != nil {
		b.Down = *p.Down
	}
	if p.Token != nil {
		b.Token = *p.Token
	}
	if p.InvalidToIDs != nil {
		b.InvalidToIDs = *p.InvalidToIDs
	}
	if p.GatewayErrors != nil {
		b.GatewayErrors = *p.GatewayErrors
	}
	if p.StatusLatencyMS != nil {
		b.StatusLatencyMS = *p.StatusLatencyMS
	}
	if p.StatusDown != nil {
		b.StatusDown = *p.StatusDown
	}
	if p.StatusLookup != nil {
		v := *p.StatusLookup
		b.StatusLookup = &v
	}
	if p.MemberLimit != nil {
		b.MemberLimitPerMin = *p.MemberLimit
	}
	return b
}

func validRatio(r float64) bool { return r >= 0 && r <= 1 && !math.IsNaN(r) }

// validate reports every problem of b at once.
func (b Behaviour) validate() error {
	var errs []error
	if b.RatePerSec < 0 || math.IsNaN(b.RatePerSec) || math.IsInf(b.RatePerSec, 0) {
		errs = append(errs, errors.New("rate_per_sec must be a number >= 0"))
	}
	if b.Burst < 0 {
		errs = append(errs, errors.New("burst must be >= 0"))
	}
	if b.LatencyMS < 0 || b.LatencyMS > 600_000 {
		errs = append(errs, errors.New("latency_ms must be between 0 and 600000"))
	}
	if b.LatencyPerRecipientMS < 0 || b.LatencyPerRecipientMS > 60_000 {
		errs = append(errs, errors.New("latency_per_recipient_ms must be between 0 and 60000"))
	}
	if !validRatio(b.TimeoutRatio) {
		errs = append(errs, errors.New("timeout_ratio must be between 0 and 1"))
	}
	sum := 0.0
	for i, e := range b.Errors {
		if !validRatio(e.Ratio) {
			errs = append(errs, fmt.Errorf("errors[%d].ratio must be between 0 and 1", i))
		}
		if e.Errcode == 0 {
			errs = append(errs, fmt.Errorf("errors[%d].errcode must not be 0", i))
		}
		sum += e.Ratio
	}
	if sum > 1+1e-9 {
		errs = append(errs, errors.New("errors ratios must add up to at most 1"))
	}
	if b.MemberLimitPerMin < 0 {
		errs = append(errs, errors.New("member_limit_per_min must be >= 0"))
	}
	if b.StatusLatencyMS < 0 || b.StatusLatencyMS > 600_000 {
		errs = append(errs, errors.New("status_latency_ms must be between 0 and 600000"))
	}
	sum = 0
	for i, g := range b.GatewayErrors {
		if !validRatio(g.Ratio) {
			errs = append(errs, fmt.Errorf("gateway_errors[%d].ratio must be between 0 and 1", i))
		}
		if g.Status < 500 || g.Status > 599 {
			errs = append(errs, fmt.Errorf("gateway_errors[%d].status must be a 5xx HTTP status", i))
		}
		sum += g.Ratio
	}
	if sum > 1+1e-9 {
		errs = append(errs, errors.New("gateway_errors ratios must add up to at most 1"))
	}
	return errors.Join(errs...)
}

// burst is the effective bucket size.
func (b Behaviour) burst() float64 {
	if b.Burst > 0 {
		return float64(b.Burst)
	}
	return math.Max(1, math.Ceil(b.RatePerSec))
}

// accountBehaviour is an immutable snapshot with look-up helpers.
type accountBehaviour struct {
	Behaviour
	invalid map[string]struct{}
}

func newAccountBehaviour(b Behaviour) *accountBehaviour {
	ab := &accountBehaviour{Behaviour: b}
	if len(b.InvalidToIDs) > 0 {
		ab.invalid = make(map[string]struct{}, len(b.InvalidToIDs))
		for _, id := range b.InvalidToIDs {
			ab.invalid[id] = struct{}{}
		}
	}
	return ab
}

// account is the state the mock keeps per guid. Each account has its own
// lock, so accounts never contend with each other, and an account without a
// rate limit takes no lock at all on the send path.
type account struct {
	behaviour atomic.Pointer[accountBehaviour]

	mu     sync.Mutex // guards the bucket
	tokens float64
	last   time.Time

	members map[string][]time.Time // member → sends in the last minute; under mu

	calls, accepted, rateLimited, failed, timeouts, dropped atomic.Int64
	gatewayErrors, statusCalls                              atomic.Int64
}

func newAccount(b Behaviour, now time.Time) *account {
	a := &account{tokens: b.burst(), last: now}
	a.behaviour.Store(newAccountBehaviour(b))
	return a
}

// setBehaviour replaces the behaviour, carrying the bucket over: tokens
// earned under the old rate are kept (up to the new burst); an account that
// was unlimited starts with a full bucket.
func (a *account) setBehaviour(b Behaviour, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	old := a.behaviour.Load()
	if old.RatePerSec > 0 {
		a.refill(old.Behaviour, now)
	} else {
		a.tokens = b.burst()
	}
	a.tokens = math.Min(a.tokens, b.burst())
	a.last = now
	a.behaviour.Store(newAccountBehaviour(b))
}

// refill adds the tokens earned since a.last; a.mu must be held.
func (a *account) refill(b Behaviour, now time.Time) {
	if elapsed := now.Sub(a.last); elapsed > 0 {
		a.tokens = math.Min(b.burst(), a.tokens+elapsed.Seconds()*b.RatePerSec)
		a.last = now
	}
}

// take grants up to n tokens and reports how many it granted.
func (a *account) take(b *accountBehaviour, n int, now time.Time) int {
	if b.RatePerSec <= 0 {
		return n
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.refill(b.Behaviour, now)
	// The epsilon absorbs float rounding of elapsed*rate, so exactly one
	// second at rate r yields exactly r tokens.
	granted := min(n, int(math.Floor(a.tokens+1e-9)))
	if granted < 0 {
		granted = 0
	}
	a.tokens -= float64(granted)
	return granted
}

// takeAll takes n tokens if the bucket holds them, else none.
func (a *account) takeAll(b *accountBehaviour, n int, now time.Time) bool {
	if b.RatePerSec <= 0 {
		return true
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.refill(b.Behaviour, now)
	if a.tokens+1e-9 < float64(n) {
		return false
	}
	a.tokens -= float64(n)
	return true
}

// memberAllowed records a message to member and reports whether it is
// within the per-member limit of the last minute.
func (a *account) memberAllowed(b *accountBehaviour, member string, now time.Time) bool {
	if b.MemberLimitPerMin <= 0 {
		return true
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.members == nil {
		a.members = map[string][]time.Time{}
	}
	recent := a.members[member][:0]
	for _, at := range a.members[member] {
		if now.Sub(at) < time.Minute {
			recent = append(recent, at)
		}
	}
	if len(recent) >= b.MemberLimitPerMin {
		a.members[member] = recent
		return false
	}
	a.members[member] = append(recent, now)
	return true
}

func (a *account) stats() AccountStats {
	return AccountStats{
		Calls:       a.calls.Load(),
		Accepted:    a.accepted.Load(),
		RateLimited: a.rateLimited.Load(),
		Failed:      a.failed.Load(),
		Timeouts:    a.timeouts.Load(),
		Dropped:     a.dropped.Load(),

		GatewayErrors: a.gatewayErrors.Load(),
		StatusCalls:   a.statusCalls.Load(),
	}
}
