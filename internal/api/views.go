package api

import (
	"time"

	"github.com/qunfa/qunfa/internal/provider"
	"github.com/qunfa/qunfa/internal/store"
)

// Job is the JSON view of a job, the answer of GET /v1/jobs/{id} and of
// every command on a job. Timestamps are RFC 3339 in UTC; those that may
// be unset are null while unset.
type Job struct {
	ID          string           `json:"id"`
	Name        string           `json:"name"`
	Status      string           `json:"status"`
	PauseReason *string          `json:"pause_reason"`
	Total       int64            `json:"total"`
	Counts      store.Counts     `json:"counts"`
	Failures    map[string]int64 `json:"failures"`
	// ConfirmedAfterRetry counts the confirmed items that needed more
	// than one attempt ("15 of the delivered needed retries"); 0 in job
	// listings, like the counts.
	ConfirmedAfterRetry int64      `json:"confirmed_after_retry"`
	Shards              []Shard    `json:"shards"`
	CreatedAt           time.Time  `json:"created_at"`
	StartedAt           *time.Time `json:"started_at"`
	FinishedAt          *time.Time `json:"finished_at"`
	// Extras beyond the DESIGN contract.
	Budget     int64   `json:"budget"`      // 0 = none
	BudgetUsed int64   `json:"budget_used"` // items claimed against the budget
	RatePerSec float64 `json:"rate_per_sec"`
	Suppressed int64   `json:"suppressed"`
	CreatedBy  string  `json:"created_by"`
	// Metadata is the submitter's metadata, as given ({} when none).
	Metadata map[string]string `json:"metadata"`
	// Canary is the job's canary (null when it has none).
	Canary *JobCanary `json:"canary"`
}

// JobCanary is the canary of a job: its size and results (live until it
// is approved, then as they were at approval).
type JobCanary struct {
	Count     int64 `json:"count"`
	Confirmed int64 `json:"confirmed"`
	Failed    int64 `json:"failed"`
	// Approved: an operator resumed the canary pause.
	Approved bool `json:"approved"`
}

// Shard is the JSON view of one shard of a job.
type Shard struct {
	Index          int              `json:"index"`
	Account        string           `json:"account"`
	Status         string           `json:"status"`
	PauseReason    *string          `json:"pause_reason"`
	Size           int64            `json:"size"`
	Cursor         int64            `json:"cursor"`
	LastAdvancedAt time.Time        `json:"last_advanced_at"`
	Counts         store.Counts     `json:"counts"`
	Failures       map[string]int64 `json:"failures"`
	SlowFactor     float64          `json:"slow_factor"`
}

// Done is how many of the shard's items reached a terminal status.
func (s Shard) Done() int64 { return s.Counts.Confirmed + s.Counts.Failed + s.Counts.Abandoned }

// JobList is one page of GET /v1/jobs, newest first.
type JobList struct {
	Jobs       []Job  `json:"jobs"`
	NextCursor string `json:"next_cursor"`
}

// Item is the JSON view of one recipient's message.
type Item struct {
	Seq      int64            `json:"seq"`
	Shard    int              `json:"shard"`
	Account  string           `json:"account"`
	To       string           `json:"to"`
	Status   string           `json:"status"`
	Attempts int              `json:"attempts"`
	Error    *store.ItemError `json:"error"`
	// Ref is the submitter's reference of the recipient ("" when none).
	Ref string `json:"ref"`
	// SubmittedAt is the latest send, FinishedAt when the item reached
	// its terminal status; null until then.
	SubmittedAt *time.Time `json:"submitted_at"`
	FinishedAt  *time.Time `json:"finished_at"`
	// MsgID is the provider's message id of the accepted send ("" until
	// confirmed, or when the provider gave none).
	MsgID string `json:"msgid"`
	// UnderReview: the item waits for an operator (store.UnderReview).
	UnderReview bool `json:"under_review"`
}

// ItemList is one page of GET /v1/jobs/{id}/items, in seq order.
type ItemList struct {
	Items      []Item `json:"items"`
	NextCursor string `json:"next_cursor"`
}

// Account is the JSON view of a sending account (PUT and GET
// /v1/accounts/{account}).
type Account struct {
	ID                   string  `json:"account"`
	RatePerSec           float64 `json:"rate_per_sec"`
	Burst                float64 `json:"burst"`
	OnlineReservePerSec  float64 `json:"online_reserve_per_sec"`
	BatchRatePerSec      float64 `json:"batch_rate_per_sec"`
	MaxRecipientsPerCall int     `json:"max_recipients_per_call"`
	// MaxContentBytes is the largest rendered message the account takes
	// (the deployment's 4 KiB when it sets none).
	MaxContentBytes int `json:"max_content_bytes"`
	// WarmupSec is the account's warm-up: after that many seconds without
	// a send its batch rate ramps from 10% to 100% over as many (0: none).
	WarmupSec int `json:"warmup_sec"`
	// FrequencyCap is the account's per-recipient cap; nil: none.
	FrequencyCap *store.FrequencyCap `json:"frequency_cap"`
	// Provider is the provider API the account sends through.
	Provider string `json:"provider"`
	// StatusLookup tells whether qunfa can ask the provider what became
	// of a message whose answer was lost; without, such items go to
	// review.
	StatusLookup bool `json:"status_lookup"`
	// HTTP is how an account of the http provider calls it (null for
	// the other providers).
	HTTP *store.HTTPProvider `json:"http"`
	// Pacing is the account's random spacing of sends; nil: the token
	// bucket.
	Pacing    *store.Pacing       `json:"pacing"`
	Breaker   store.BreakerConfig `json:"breaker"`
	UpdatedAt *time.Time          `json:"updated_at"`
	// BreakerState is the account's circuit breaker right now.
	BreakerState BreakerState `json:"breaker_state"`
	// Sizing is what the senders chose from the account's measured call
	// latency; nil until measured (and again after a PUT of the account).
	Sizing *AccountSizing `json:"sizing"`
}

// AccountSizing is the batch size and calls in flight the senders chose
// for an account from its measured call latency (issue 13).
type AccountSizing struct {
	BatchSize   int       `json:"batch_size"`
	Concurrency int       `json:"concurrency"`
	P99MS       int64     `json:"p99_ms"`
	MeasuredAt  time.Time `json:"measured_at"`
}

// BreakerState is an account's circuit breaker as operators see it.
type BreakerState struct {
	State    string     `json:"state"` // closed, open, half_open
	Reason   string     `json:"reason"`
	OpenedAt *time.Time `json:"opened_at"`
	Until    *time.Time `json:"until"` // end of the cool-down while open
	Opens    int        `json:"opens"`
}

// BreakerTransition is one change of an account's breaker state.
type BreakerTransition struct {
	Seq    int64     `json:"seq"`
	From   string    `json:"from"`
	To     string    `json:"to"`
	At     time.Time `json:"at"`
	Reason string    `json:"reason"`
	// FailureRate (0..1) over Attempts: the window that opened the
	// breaker; ConsecutiveFailures: the streak that did (0 otherwise).
	FailureRate         float64    `json:"failure_rate"`
	Attempts            int64      `json:"attempts"`
	ConsecutiveFailures int        `json:"consecutive_failures"`
	Opens               int        `json:"opens"`
	Until               *time.Time `json:"until"`
}

// BreakerHistory is the answer of GET
// /v1/accounts/{account}/breaker/history: the account's last transitions,
// newest first.
type BreakerHistory struct {
	Account     string              `json:"account"`
	Transitions []BreakerTransition `json:"transitions"`
}

// AccountList is the answer of GET /v1/accounts, ordered by id.
type AccountList struct {
	Accounts []Account `json:"accounts"`
}

// AccountRequest is the body of PUT /v1/accounts/{account}. Absent burst
// defaults to the rate (at least 1), absent max_recipients_per_call to 1 (10,000 for wechat-mp-mass),
// absent max_content_bytes to 4 KiB, absent warmup_sec to 0 (no warm-up),
// absent or null frequency_cap to no cap, absent or null pacing to the
// token bucket, absent provider to "wecomapi", absent status_lookup to the
// provider's (true for wecomapi), absent breaker thresholds to 0 (trigger
// disabled).
type AccountRequest struct {
	RatePerSec           *float64             `json:"rate_per_sec"`
	Burst                *float64             `json:"burst"`
	OnlineReservePerSec  *float64             `json:"online_reserve_per_sec"`
	MaxRecipientsPerCall *int                 `json:"max_recipients_per_call"`
	MaxContentBytes      *int                 `json:"max_content_bytes"`
	WarmupSec            *int                 `json:"warmup_sec"`
	FrequencyCap         *store.FrequencyCap  `json:"frequency_cap"`
	Provider             *string              `json:"provider"`
	StatusLookup         *bool                `json:"status_lookup"`
	HTTP                 *store.HTTPProvider  `json:"http"`
	Pacing               *PacingRequest       `json:"pacing"`
	Breaker              *store.BreakerConfig `json:"breaker"`
}

// PacingRequest is an account's pacing option: mode "random" spaces its
// sends by random gaps around 1/batch rate, never closer than min_gap_ms
// (absent: 0).
type PacingRequest struct {
	Mode     string `json:"mode"`
	MinGapMs *int   `json:"min_gap_ms"`
}

// LimitsRequest is the body of PATCH /v1/jobs/{id}; absent fields stay.
type LimitsRequest struct {
	RatePerSec *float64 `json:"rate_per_sec"`
	Budget     *int64   `json:"budget"`
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

func reasonPtr(r store.PauseReason) *string {
	if r == "" {
		return nil
	}
	s := string(r)
	return &s
}

// nonNil copies a shard's failures by category, without zero entries and
// without store.TallyConfirmedAfterRetry (no failure).
func nonNil(m map[string]int64) map[string]int64 {
	out := make(map[string]int64, len(m))
	for k, n := range m {
		if n != 0 && k != store.TallyConfirmedAfterRetry {
			out[k] = n
		}
	}
	return out
}

// jobView renders a job with its shards.
func jobView(v store.JobView) Job {
	j := jobSummary(v.Job)
	j.Counts = v.Counts()
	j.Failures = v.Failures()
	j.ConfirmedAfterRetry = v.ConfirmedAfterRetry()
	if v.Job.Canary > 0 {
		c := &JobCanary{Count: v.Job.Canary, Approved: v.Job.CanaryApproved}
		if c.Approved {
			c.Confirmed, c.Failed = v.Job.CanaryConfirmed, v.Job.CanaryFailed
		} else {
			c.Confirmed, c.Failed = store.CanaryResults(v)
		}
		j.Canary = c
	}
	j.Shards = make([]Shard, 0, len(v.Shards))
	for _, s := range v.Shards {
		j.Shards = append(j.Shards, Shard{
			Index:          s.Index,
			Account:        s.Account,
			Status:         string(s.Status),
			PauseReason:    reasonPtr(s.PauseReason),
			Size:           s.Size,
			Cursor:         s.Cursor,
			LastAdvancedAt: s.LastAdvancedAt.UTC(),
			Counts:         s.Counts,
			Failures:       nonNil(s.Failures),
			SlowFactor:     s.SlowFactor,
		})
	}
	return j
}

// jobSummary renders a job without its shards (counts unknown: zero, and
// shards empty), for listings.
func jobSummary(j store.Job) Job {
	return Job{
		ID:          j.ID,
		Name:        j.Name,
		Status:      string(j.Status),
		PauseReason: reasonPtr(j.PauseReason),
		Total:       j.Total,
		Failures:    map[string]int64{},
		Shards:      []Shard{},
		CreatedAt:   j.CreatedAt.UTC(),
		StartedAt:   timePtr(j.StartedAt),
		FinishedAt:  timePtr(j.FinishedAt),
		Budget:      j.Budget,
		BudgetUsed:  j.BudgetUsed,
		RatePerSec:  j.RatePerSec,
		Suppressed:  j.Suppressed,
		CreatedBy:   j.CreatedBy,
		Metadata:    nonNilStrings(j.Metadata),
	}
}

func nonNilStrings(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

func itemView(it store.Item) Item {
	return Item{
		Seq: it.Seq, Shard: it.Shard, Account: it.Account, To: it.To,
		Status: string(it.Status), Attempts: it.Attempts, Error: it.Error,
		Ref: it.Ref, SubmittedAt: timePtr(it.SubmittedAt), FinishedAt: timePtr(it.FinishedAt), MsgID: it.MsgID,
		UnderReview: store.UnderReview(it),
	}
}

func (s *server) accountView(a store.Account, b store.Breaker) Account {
	state := string(b.State)
	if state == "" {
		state = string(store.BreakerClosed)
	}
	return Account{
		BreakerState:         BreakerState{State: state, Reason: b.Reason, OpenedAt: timePtr(b.OpenedAt), Until: timePtr(b.Until), Opens: b.Opens},
		ID:                   a.ID,
		RatePerSec:           a.RatePerSec,
		Burst:                a.Burst,
		OnlineReservePerSec:  a.OnlineReservePerSec,
		BatchRatePerSec:      a.BatchRate(),
		MaxRecipientsPerCall: a.MaxRecipientsPerCall,
		MaxContentBytes:      s.Submitter.Limits.ContentLimit(a),
		WarmupSec:            a.WarmupSec,
		FrequencyCap:         frequencyCapView(a.FrequencyCap),
		Provider:             string(provider.KindOf(a.Provider)),
		StatusLookup:         hasStatusLookup(a),
		HTTP:                 a.HTTP,
		Pacing:               pacingView(a.Pacing),
		Breaker:              a.Breaker,
		UpdatedAt:            timePtr(a.UpdatedAt),
		Sizing:               sizingView(a.Sizing),
	}
}

// sizingView is nil for an account never measured.
func sizingView(z store.AccountSizing) *AccountSizing {
	if !z.Measured() {
		return nil
	}
	return &AccountSizing{BatchSize: z.BatchSize, Concurrency: z.Concurrency, P99MS: z.P99.Milliseconds(), MeasuredAt: z.At.UTC()}
}

// hasStatusLookup: only wecomapi answers a look-up by message key, and
// an account may say its wecomapi provider has none.
func hasStatusLookup(a store.Account) bool {
	return provider.KindOf(a.Provider) == provider.KindWecomAPI && !a.NoStatusLookup
}

// frequencyCapView is nil for an account without a cap.
func frequencyCapView(c store.FrequencyCap) *store.FrequencyCap {
	if !c.Capped() {
		return nil
	}
	return &c
}

// pacingView is nil for an account on the token bucket.
func pacingView(p store.Pacing) *store.Pacing {
	if !p.Random() {
		return nil
	}
	return &p
}
