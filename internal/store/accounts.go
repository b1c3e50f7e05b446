package store

import "time"

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
	// Pacing spaces the account's sends by random gaps instead of the
	// token bucket's bursts (zero: the token bucket).
	Pacing    Pacing
	Breaker   BreakerConfig
	UpdatedAt time.Time
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
