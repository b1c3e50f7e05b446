// Package store is the persistence port of qunfa: jobs, their shards and
// items, token buckets, accounts, idempotency records and API tenants.
//
// Every promise qunfa makes rests on a few atomic operations declared here:
// claiming items (pending → submitted) before the provider is called,
// recording outcomes only by the claimer, status changes only along allowed
// transitions, and token buckets that never grant more than their rate.
// Adapters (sqlitestore, dynamostore) implement Store and prove it with the
// shared conformance suite in storetest.
//
// Counts. Item operations (ClaimItems, UpdateItems) change item records only
// and return the count delta they caused; the caller folds that delta into
// the shard with AdvanceShard (the sender, fenced by its turn) or
// AddShardCounts (anyone else). Deltas always sum to zero, so a shard's counts
// always add up to its size. A sender turn that dies between an item
// operation and AdvanceShard leaves the shard Dirty; the next BeginTurn (or
// RecountShard) recomputes its counts from the items. A change made outside
// a turn marks the shard Dirty before writing items (BeginOutsideTurn) and
// folds with FoldOutsideTurn, so a crash between the two is repaired the
// same way. No fold ever stores impossible counts (a negative count, or
// counts not adding up to the shard's size): the adapter recounts instead.
//
// Count epochs keep deltas and recounts from being applied twice. Every
// recount increments the shard's Epoch. A delta is folded only if the
// caller's Epoch (the shard's epoch it read before its item operations) is
// still the shard's; otherwise the delta is discarded and the counts are
// recomputed from the items instead (Epoch + 1), because the recount that
// moved the epoch may already include the delta's changes. The caller adopts
// the epoch of the shard returned.
package store

import (
	"context"
	"errors"
	"time"
)

// Sentinel errors. Adapters translate backend errors into these at the edge;
// callers test them with errors.Is.
var (
	// ErrNotFound: the job, shard, item, account or token does not exist.
	ErrNotFound = errors.New("store: not found")
	// ErrConflict: a conditional write lost — an idempotency key reused with
	// another body, a stale turn, a concurrent modification.
	ErrConflict = errors.New("store: conflict")
	// ErrInvalidTransition: the requested status change is not allowed from
	// the record's current status.
	ErrInvalidTransition = errors.New("store: transition not allowed")
	// ErrInvalidArgument: the parameters are malformed (empty ids, negative
	// counts, too many items in one call).
	ErrInvalidArgument = errors.New("store: invalid argument")
)

// Store is the persistence port. All methods are safe for concurrent use by
// many goroutines and many processes.
type Store interface {
	// CreateJob stores a new job in status JobCreating (or JobStaging when
	// Job.Status says so; a staging job has no shards) together with its
	// shards and its idempotency record (Tenant + IdempotencyKey).
	// If the key is already used by a job with the same RequestHash, that job
	// is returned with Created = false; with another hash, ErrConflict.
	CreateJob(ctx context.Context, p CreateJobParams) (CreateJobResult, error)
	// PutItems writes a page of the item snapshot (all status pending,
	// attempts 0). Rewriting the same seqs with the same content is
	// harmless, so an interrupted submit can be redone. Allowed only while
	// the job is JobCreating or JobStarting (ErrInvalidTransition
	// otherwise); a starting job's shards are installed afterwards
	// (StagingStore.ReleasePlannedJob), so its items' shard indexes are
	// not checked against them.
	PutItems(ctx context.Context, p PutItemsParams) error
	// GetJob reads a job and all its shards (ordered by index).
	GetJob(ctx context.Context, jobID string) (JobView, error)
	// GetJobRecord reads a job without its shards: what a sender needs at
	// every batch (status, limits), at a cost independent of the shard count.
	GetJobRecord(ctx context.Context, jobID string) (Job, error)
	// ListJobs lists a tenant's jobs, newest first, paged by an opaque cursor.
	ListJobs(ctx context.Context, p ListJobsParams) (ListJobsResult, error)
	// TransitionJob changes a job's status if its current status is one of
	// p.From (any status when From is empty) and the change is allowed by
	// JobTransitionAllowed; otherwise ErrInvalidTransition and nothing
	// changes. Entering running the first time sets StartedAt; entering a
	// final status sets FinishedAt.
	TransitionJob(ctx context.Context, p TransitionJobParams) (Job, error)
	// UpdateJobLimits changes a job's rate cap and/or budget (nil = keep).
	// A job in a final status (JobFinal) keeps its limits:
	// ErrInvalidTransition, and nothing changes.
	UpdateJobLimits(ctx context.Context, p UpdateJobLimitsParams) (Job, error)
	// ReserveBudget adds n (which may be negative, to give back) to the
	// job's BudgetUsed, never beyond Budget: it grants min(n, Budget −
	// BudgetUsed) for n > 0. A job without a budget grants all of n. The
	// result also tells the usage right after this change, so a caller
	// giving budget back knows whether it was the one that made room.
	ReserveBudget(ctx context.Context, jobID string, n int64) (BudgetGrant, error)

	// GetShard reads one shard.
	GetShard(ctx context.Context, jobID string, index int) (Shard, error)
	// BeginTurn starts a sender turn for a shard: accepted when p.Turn ==
	// shard.Turn+1 (a new turn; sets Turn and TurnMessage) or when p.Turn ==
	// shard.Turn and p.MessageID == shard.TurnMessage (a redelivery of the
	// current turn's message). Anything else is a stale message:
	// ErrConflict. If the shard was Dirty (the previous turn did not end
	// with AdvanceShard{EndTurn: true}) its counts are recomputed from the
	// items first (Epoch + 1). Marks the shard Dirty.
	BeginTurn(ctx context.Context, p BeginTurnParams) (Shard, error)
	// AdvanceShard folds a count delta into the shard (subject to the count
	// epoch, see the package doc) and moves its cursor, last-advanced time
	// and slow-down factor, only while p.Turn is the shard's current turn
	// (ErrConflict otherwise, and nothing changes). EndTurn clears Dirty.
	AdvanceShard(ctx context.Context, p AdvanceShardParams) (Shard, error)
	// AddShardCounts folds a count delta into a shard outside any turn (API
	// actions, reconciler), subject to the count epoch. It does not move the
	// cursor.
	AddShardCounts(ctx context.Context, p AddShardCountsParams) (Shard, error)
	// RecountShard recomputes a shard's counts and failures from its items
	// and stores them, incrementing Epoch (Dirty is left as it was).
	RecountShard(ctx context.Context, jobID string, index int) (Shard, error)
	// MarkShardDirty marks a shard Dirty before a change made outside a
	// turn writes its items, so a crash before the change's counts are
	// folded is repaired by a recount (the next BeginTurn, or the
	// reconciler). It returns the shard as it was before (its Dirty and
	// Epoch tell FoldOutsideTurn what to do).
	MarkShardDirty(ctx context.Context, jobID string, index int) (Shard, error)
	// TransitionShard changes a shard's status along ShardTransitionAllowed,
	// like TransitionJob.
	TransitionShard(ctx context.Context, p TransitionShardParams) (Shard, error)
	// ListStaleShards lists shards in status running, or paused with reason
	// breaker, whose LastAdvancedAt is before p.Before, across all jobs
	// (with Before in the future: every such shard).
	ListStaleShards(ctx context.Context, p ListStaleShardsParams) ([]ShardRef, error)

	// ClaimItems atomically moves up to p.Max due items of a shard (status
	// pending, NextAttemptAt <= p.Now) to submitted, in seq order, setting
	// ClaimID, SubmittedAt = p.Now and Attempts + 1. No item is ever
	// returned to two claimers. Fewer than Max (even none) may be returned.
	ClaimItems(ctx context.Context, p ClaimItemsParams) (ClaimItemsResult, error)
	// UpdateItems applies conditional changes to items of one shard. Each
	// update applies only if the item's status is update.From and, when
	// update.ClaimID is set, the item's ClaimID matches (outcomes are
	// recorded only by the claimer). Updates whose condition fails are
	// reported in Rejected and change nothing; the others are applied.
	UpdateItems(ctx context.Context, p UpdateItemsParams) (UpdateItemsResult, error)
	// ListItems lists a job's items in seq order, optionally filtered by
	// status and/or error category, paged by an opaque cursor.
	ListItems(ctx context.Context, p ListItemsParams) (ListItemsResult, error)
	// ListSubmittedItems lists items (across jobs) that have been submitted
	// since before p.SubmittedBefore, oldest claim first is not required.
	ListSubmittedItems(ctx context.Context, p ListSubmittedItemsParams) (ListItemsResult, error)

	// TakeTokens takes up to p.Want tokens from a token bucket at time p.Now.
	// A bucket starts full (Burst tokens) and refills at RatePerSec up to
	// Burst. Over any interval, the tokens granted never exceed
	// Burst + RatePerSec × elapsed, however many callers take concurrently.
	TakeTokens(ctx context.Context, p TakeTokensParams) (TakeTokensResult, error)

	// PutAccount creates or replaces a tenant's sending account config.
	PutAccount(ctx context.Context, a Account) (Account, error)
	// GetAccount reads a tenant's account (ErrNotFound if unknown).
	GetAccount(ctx context.Context, tenant, account string) (Account, error)
	// ListAccounts lists a tenant's accounts ordered by ID.
	ListAccounts(ctx context.Context, tenant string) ([]Account, error)

	// PutToken binds the hash of an API token to a tenant.
	PutToken(ctx context.Context, tokenHash, tenant string) error
	// TenantForToken returns the tenant owning a token hash (ErrNotFound).
	TenantForToken(ctx context.Context, tokenHash string) (string, error)

	// GetBreaker reads an account's circuit breaker. An account whose
	// breaker never changed has a closed breaker with Version 0 (never
	// ErrNotFound).
	GetBreaker(ctx context.Context, tenant, account string) (Breaker, error)
	// SaveBreaker stores b if the stored breaker's Version is still
	// b.Version (0 = none stored yet); the result has Version + 1. Anything
	// else is ErrConflict and nothing changes.
	SaveBreaker(ctx context.Context, b Breaker) (Breaker, error)
	// ListBreakers lists breakers (all tenants) that are not closed, or
	// every stored breaker when AllStates is set.
	ListBreakers(ctx context.Context, p ListBreakersParams) ([]Breaker, error)

	// PutSuppressions adds recipients to a tenant's suppression list (up to
	// MaxPutItems per call; adding one twice is harmless).
	PutSuppressions(ctx context.Context, tenant string, entries []Suppression) error
	// DeleteSuppression removes a recipient from the list (absent: no error).
	DeleteSuppression(ctx context.Context, tenant, account, to string) error
	// SuppressedAmong returns which of the given recipients (up to
	// MaxPutItems) are on the tenant's suppression list. An entry added in
	// the last moment may not be seen yet (the DynamoDB adapter reads
	// eventually consistently); senders check at every batch.
	SuppressedAmong(ctx context.Context, tenant string, keys []RecipientKey) (map[RecipientKey]bool, error)
	// ListSuppressions pages a tenant's suppression list ordered by account
	// and recipient.
	ListSuppressions(ctx context.Context, p ListSuppressionsParams) (ListSuppressionsResult, error)

	// ChargeFrequency charges claimed items against their account's
	// per-recipient frequency cap, in one atomic step with respect to every
	// other charge of the tenant's account (whatever job, whatever sender):
	// an item passes when its recipient had fewer than Cap.Max items
	// charged in the last Cap.WindowSec seconds, and is then charged at
	// p.Now; otherwise it is reported in Capped and nothing is charged. An
	// item charged before (a retry of the same job and seq) passes again
	// without a second charge. A charge stays when the send fails: the cap
	// counts messages handed to the provider, not deliveries.
	ChargeFrequency(ctx context.Context, p ChargeFrequencyParams) (ChargeFrequencyResult, error)
	// FrequencyCounts tells, for each given recipient of one account, how
	// many items were charged in the window ending at p.Now (absent: none);
	// it reads only (preview), and like SuppressedAmong may miss a charge
	// of the last moment (the DynamoDB adapter reads eventually
	// consistently).
	FrequencyCounts(ctx context.Context, p FrequencyCountsParams) (map[string]int, error)

	// PutCampaign creates or replaces a scheduled campaign.
	PutCampaign(ctx context.Context, c Campaign) (Campaign, error)
	// GetCampaign reads a tenant's campaign (ErrNotFound).
	GetCampaign(ctx context.Context, tenant, id string) (Campaign, error)
	// ListCampaigns lists a tenant's campaigns ordered by ID, or every
	// tenant's when tenant is empty (the local scheduler).
	ListCampaigns(ctx context.Context, tenant string) ([]Campaign, error)
	// DeleteCampaign removes a campaign (absent: ErrNotFound).
	DeleteCampaign(ctx context.Context, tenant, id string) error

	// AcquireLease takes (or, for its holder, renews) the named lease until
	// p.Until if it is free at p.Now: never taken, released, expired, or
	// already p.Holder's. Otherwise ErrConflict and nothing changes. The
	// lease returned carries the Cursor its last holder left, so a
	// singleton task (the reconciler) resumes where the last run stopped.
	AcquireLease(ctx context.Context, p AcquireLeaseParams) (Lease, error)
	// ReleaseLease frees p.Holder's lease and stores p.Cursor for the next
	// holder. ErrConflict if the lease is not p.Holder's (it expired and
	// someone else took it): nothing changes.
	ReleaseLease(ctx context.Context, p ReleaseLeaseParams) error
}

// Lease is a named, time-bounded right to run a singleton task.
type Lease struct {
	Name   string
	Holder string // empty when released
	Until  time.Time
	// Cursor is where the last holder stopped (opaque to the store).
	Cursor string
}

// AcquireLeaseParams takes a lease.
type AcquireLeaseParams struct {
	Name   string
	Holder string
	Now    time.Time
	Until  time.Time
}

// ReleaseLeaseParams frees a lease.
type ReleaseLeaseParams struct {
	Name   string
	Holder string
	Cursor string
}

// BreakerState is a circuit breaker's state.
type BreakerState string

// Breaker states.
const (
	BreakerClosed   BreakerState = "closed"
	BreakerOpen     BreakerState = "open"
	BreakerHalfOpen BreakerState = "half_open"
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
}

// ListBreakersParams selects breakers.
type ListBreakersParams struct {
	AllStates bool
}

// RecipientKey names one recipient of an account.
type RecipientKey struct {
	Account string
	To      string
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

// Suppression is one entry of a tenant's suppression list.
type Suppression struct {
	Account   string
	To        string
	Reason    string
	CreatedAt time.Time
}

// ListSuppressionsParams pages a suppression list.
type ListSuppressionsParams struct {
	Tenant string
	Cursor string
	Limit  int // 0 = adapter default (100)
}

// ListSuppressionsResult is one page of a suppression list.
type ListSuppressionsResult struct {
	Entries    []Suppression
	NextCursor string
}

// Campaign is a scheduled submission: at each firing of its schedule it
// creates one job (idempotent on campaign + scheduled time).
type Campaign struct {
	Tenant string
	ID     string
	Name   string
	// Schedule is an EventBridge expression: "rate(1 hour)" or
	// "cron(0 9 * * ? *)".
	Schedule string
	// Mode is "snapshot" (Request holds the recipients) or "requery"
	// (recipients fetched from Source at each firing).
	Mode string
	// Request is the job request (template, limits; recipients in
	// snapshot mode), as JSON.
	Request []byte
	// Source is the business system's HTTPS endpoint for requery mode.
	Source string
	// MaxDelaySec: a firing that starts later than this after its
	// scheduled time is skipped with an alert (0 = never skipped).
	MaxDelaySec int
	Enabled     bool
	// LastFiredAt is the scheduled time of the last firing handled.
	LastFiredAt time.Time
	CreatedBy   string
	CreatedAt   time.Time
	UpdatedAt   time.Time
}

// JobStatus is a job's lifecycle state.
type JobStatus string

// Job statuses. JobCreating is internal: the snapshot is still being written.
// A staged job is JobStaging while its parts are uploaded (it never sends)
// and JobStarting while it is planned in the background.
const (
	JobCreating  JobStatus = "creating"
	JobStaging   JobStatus = "staging"
	JobStarting  JobStatus = "starting"
	JobRunning   JobStatus = "running"
	JobPaused    JobStatus = "paused"
	JobCompleted JobStatus = "completed"
	JobPartial   JobStatus = "partial"
	JobFailed    JobStatus = "failed"
	JobCancelled JobStatus = "cancelled"
)

// PauseReason says why a job or shard is paused.
type PauseReason string

// Pause reasons.
const (
	PauseManual  PauseReason = "manual"
	PauseBudget  PauseReason = "budget"
	PauseBreaker PauseReason = "breaker"
	// PauseCanary: the job's canary items were sent; it waits for an
	// operator to approve (resume) or cancel it.
	PauseCanary PauseReason = "canary"
)

// jobTransitions lists the allowed job status changes. Partial and failed
// jobs may run again (redrive); cancelled and completed ones never change.
var jobTransitions = map[JobStatus][]JobStatus{
	JobCreating: {JobRunning, JobFailed},
	JobStaging:  {JobStarting, JobCancelled},
	JobStarting: {JobRunning, JobCompleted, JobFailed, JobCancelled},
	JobRunning:  {JobPaused, JobCompleted, JobPartial, JobFailed, JobCancelled},
	JobPaused:   {JobRunning, JobCancelled},
	JobPartial:  {JobRunning},
	JobFailed:   {JobRunning},
}

// JobTransitionAllowed reports whether a job may go from one status to
// another.
func JobTransitionAllowed(from, to JobStatus) bool {
	for _, s := range jobTransitions[from] {
		if s == to {
			return true
		}
	}
	return false
}

// JobFinal reports whether a status ends a job's run.
func JobFinal(s JobStatus) bool {
	return s == JobCompleted || s == JobPartial || s == JobFailed || s == JobCancelled
}

// ShardStatus is a shard's lifecycle state.
type ShardStatus string

// Shard statuses.
const (
	ShardPending   ShardStatus = "pending"
	ShardRunning   ShardStatus = "running"
	ShardPaused    ShardStatus = "paused"
	ShardCompleted ShardStatus = "completed"
	ShardFailed    ShardStatus = "failed"
	ShardCancelled ShardStatus = "cancelled"
)

var shardTransitions = map[ShardStatus][]ShardStatus{
	ShardPending:   {ShardRunning, ShardPaused, ShardCancelled},
	ShardRunning:   {ShardPaused, ShardCompleted, ShardFailed, ShardCancelled},
	ShardPaused:    {ShardRunning, ShardCancelled},
	ShardCompleted: {ShardRunning},
	ShardFailed:    {ShardRunning},
}

// ShardTransitionAllowed reports whether a shard may go from one status to
// another.
func ShardTransitionAllowed(from, to ShardStatus) bool {
	for _, s := range shardTransitions[from] {
		if s == to {
			return true
		}
	}
	return false
}

// ShardFinal reports whether a shard has nothing more to do.
func ShardFinal(s ShardStatus) bool {
	return s == ShardCompleted || s == ShardFailed || s == ShardCancelled
}

// ItemStatus is one recipient's state.
type ItemStatus string

// Item statuses. Submitted means "claimed, the request may have gone out":
// never send a submitted item again without finding out what happened.
const (
	ItemPending   ItemStatus = "pending"
	ItemSubmitted ItemStatus = "submitted"
	ItemConfirmed ItemStatus = "confirmed"
	ItemFailed    ItemStatus = "failed"
	ItemAbandoned ItemStatus = "abandoned"
)

// Error categories stored on items (see DESIGN.md).
const (
	CategoryRetryable   = "retryable"
	CategoryRateLimited = "rate_limited"
	// CategoryAccountDown: every call of the account failed (token expired
	// or invalid); nothing was sent, the item waits pending.
	CategoryAccountDown = "account_down"
	CategoryPermanent   = "permanent"
	CategoryUncertain   = "uncertain"
	CategoryExhausted   = "exhausted"
	CategoryCancelled   = "cancelled"
	CategorySuppressed  = "suppressed"
	// CategoryFrequencyCapped: the recipient already had its account's
	// frequency_cap of messages in the window; the item was not sent.
	CategoryFrequencyCapped = "frequency_capped"
)

// CodeReview is the error code the reconciler sets on a submitted item it
// could not settle: the status look-up said the provider has no record of
// the key, or the provider has no look-up and the item waited past the
// settle delay. Only such items are "under review" (see UnderReview).
const CodeReview = "review"

// UnderReview reports whether an item waits for an operator's verdict: it
// is submitted, uncertain, and the reconciler marked it for review. An
// item whose answer was just lost is uncertain too, but it has not been
// looked up yet; resending it could deliver twice.
func UnderReview(it Item) bool {
	return it.Status == ItemSubmitted && it.Error != nil &&
		it.Error.Category == CategoryUncertain && it.Error.Code == CodeReview
}

// TallyConfirmedAfterRetry is a key of Shard.Failures that is not an error
// category: it counts the shard's confirmed items that needed more than one
// attempt ("15 of the delivered needed retries"). Adapters keep it like the
// categories (in the deltas of item operations, folded with them, recounted
// from the items), so it costs no write of its own; JobView.Failures leaves
// it out and JobView.ConfirmedAfterRetry reports it.
const TallyConfirmedAfterRetry = "confirmed_after_retry"

// ConfirmedAfterRetry reports whether an item in this state counts under
// TallyConfirmedAfterRetry: confirmed after more than one attempt.
func ConfirmedAfterRetry(status ItemStatus, attempts int) bool {
	return status == ItemConfirmed && attempts > 1
}

// Counts are item counts by status. They always add up to the total.
type Counts struct {
	Pending   int64 `json:"pending"`
	Submitted int64 `json:"submitted"`
	Confirmed int64 `json:"confirmed"`
	Failed    int64 `json:"failed"`
	Abandoned int64 `json:"abandoned"`
}

// Total is the sum of all counts.
func (c Counts) Total() int64 {
	return c.Pending + c.Submitted + c.Confirmed + c.Failed + c.Abandoned
}

// Add returns c + d.
func (c Counts) Add(d Counts) Counts {
	return Counts{
		Pending:   c.Pending + d.Pending,
		Submitted: c.Submitted + d.Submitted,
		Confirmed: c.Confirmed + d.Confirmed,
		Failed:    c.Failed + d.Failed,
		Abandoned: c.Abandoned + d.Abandoned,
	}
}

// Move records one item moving from one status to another.
func (c *Counts) Move(from, to ItemStatus) {
	if from == to {
		return
	}
	*c.field(from)--
	*c.field(to)++
}

// IsZero reports whether all counts are zero.
func (c Counts) IsZero() bool { return c == Counts{} }

func (c *Counts) field(s ItemStatus) *int64 {
	switch s {
	case ItemPending:
		return &c.Pending
	case ItemSubmitted:
		return &c.Submitted
	case ItemConfirmed:
		return &c.Confirmed
	case ItemFailed:
		return &c.Failed
	default:
		return &c.Abandoned
	}
}

// Job is one submission: a template and its recipients.
type Job struct {
	ID             string
	Tenant         string
	Name           string
	Template       string
	IdempotencyKey string
	// RequestHash identifies the request body behind IdempotencyKey.
	RequestHash string
	Status      JobStatus
	PauseReason PauseReason // set while paused
	Total       int64
	Suppressed  int64 // recipients dropped at submit by the suppression list
	ShardCount  int
	Budget      int64   // maximum items sent; 0 = none
	BudgetUsed  int64   // items claimed against the budget
	RatePerSec  float64 // per-job cap; 0 = none
	CreatedBy   string
	CreatedAt   time.Time
	StartedAt   time.Time // zero until first running
	FinishedAt  time.Time // zero until final
	// Meta is free-form submit metadata (campaign id, query, cursor…).
	Meta map[string]string
	// Metadata is the submitter's own key-value pairs (the "metadata" of
	// the job request), kept and shown back as given; nil = none.
	Metadata map[string]string
	// Canary is how many items the job sends before it pauses for an
	// operator's approval (PauseCanary), spread over the shards by
	// CanaryQuotas; 0 = no canary. CanaryApproved is set when the operator
	// resumed the canary pause, with the canary's results at that moment.
	Canary                        int64
	CanaryApproved                bool
	CanaryConfirmed, CanaryFailed int64
}

// CanaryResults counts the canary's outcomes in a job view while the canary
// is not approved (every item sent so far is a canary item): confirmed,
// and failed or abandoned (but not cancelled).
func CanaryResults(v JobView) (confirmed, failed int64) {
	c := v.Counts()
	return c.Confirmed, c.Failed + c.Abandoned - v.Failures()[CategoryCancelled]
}

// CanaryQuotas spreads a canary of n items over shards of the given sizes:
// one item per shard in turn (never more than a shard holds) until n are
// placed. A shard's canary is its first quota items by seq.
func CanaryQuotas(sizes []int64, n int64) []int64 {
	q := make([]int64, len(sizes))
	for n > 0 {
		placed := false
		for i := range sizes {
			if n > 0 && q[i] < sizes[i] {
				q[i]++
				n--
				placed = true
			}
		}
		if !placed {
			break
		}
	}
	return q
}

// Shard is the unit of parallelism, rate and rerun: one account's slice of
// a job.
type Shard struct {
	JobID   string
	Index   int
	Account string
	Status  ShardStatus
	// PauseReason is set while the shard itself is paused (e.g. breaker).
	PauseReason PauseReason
	Size        int64 // items in the shard, fixed at creation
	// Cursor is one past the highest item seq claimed so far.
	Cursor         int64
	LastAdvancedAt time.Time
	Counts         Counts
	// Failures counts items by error category (failed, abandoned and
	// submitted-under-review items), and under TallyConfirmedAfterRetry
	// the confirmed items that needed more than one attempt.
	Failures map[string]int64
	// SlowFactor scales the shard's rate after rate-limit answers (1 = full).
	SlowFactor  float64
	Turn        int64
	TurnMessage string
	Dirty       bool
	// Epoch counts recounts (see the package doc on count epochs).
	Epoch int64
	// Attempts and AttemptFailures are cumulative counts of provider
	// attempts and of attempts that failed (any category but rate
	// limiting), for the breaker's failure rate. Never recounted.
	Attempts        int64
	AttemptFailures int64
}

// ShardRef names a shard.
type ShardRef struct {
	JobID string
	Index int
}

// JobView is a job with all its shards.
type JobView struct {
	Job    Job
	Shards []Shard
}

// Counts sums the shards' counts: the job aggregates, shards report.
func (v JobView) Counts() Counts {
	var c Counts
	for _, s := range v.Shards {
		c = c.Add(s.Counts)
	}
	return c
}

// Failures sums the shards' failures by category (without
// TallyConfirmedAfterRetry, which is no failure).
func (v JobView) Failures() map[string]int64 {
	f := map[string]int64{}
	for _, s := range v.Shards {
		for k, n := range s.Failures {
			if n != 0 && k != TallyConfirmedAfterRetry {
				f[k] += n
			}
		}
	}
	return f
}

// ConfirmedAfterRetry sums the shards' confirmed items that needed more
// than one attempt.
func (v JobView) ConfirmedAfterRetry() int64 {
	var n int64
	for _, s := range v.Shards {
		n += s.Failures[TallyConfirmedAfterRetry]
	}
	return n
}

// ItemError is the last error of an item.
type ItemError struct {
	Category string `json:"category"`
	Code     string `json:"code,omitempty"`
	Message  string `json:"message,omitempty"`
}

// Item is one recipient's message.
type Item struct {
	JobID   string
	Shard   int
	Seq     int64 // position in the job, unique per job
	Account string
	To      string
	Vars    map[string]string
	// Ref is the submitter's reference of the recipient (write-once, with
	// the payload); "" = none.
	Ref    string
	Status ItemStatus
	// Attempts counts sends (claims that used an attempt).
	Attempts      int
	NextAttemptAt time.Time
	// SubmittedAt is the time of the latest claim, kept after the item
	// leaves submitted (zero if never claimed).
	SubmittedAt time.Time
	// FinishedAt is when the item entered its terminal status (confirmed,
	// failed, abandoned): the At of that update; zero while not terminal.
	FinishedAt time.Time
	// MsgID is the provider's message id of the accepted send ("" until
	// confirmed, or when the provider gave none).
	MsgID   string
	ClaimID string
	Error   *ItemError // nil unless the item has failed at least once
}

// CreateJobParams creates a job with its shards.
type CreateJobParams struct {
	Job    Job // ID, Tenant, IdempotencyKey, RequestHash, … set by the caller
	Shards []Shard
}

// CreateJobResult tells which job stands for the request.
type CreateJobResult struct {
	Job     Job
	Created bool // false: an existing job with the same key and body
}

// MaxPutItems is the largest page PutItems accepts.
const MaxPutItems = 500

// PutItemsParams writes one page of the snapshot.
type PutItemsParams struct {
	JobID string
	Items []Item // Seq, Shard, Account, To, Vars, Ref
}

// ListJobsParams pages a tenant's jobs.
type ListJobsParams struct {
	Tenant string
	Cursor string
	Limit  int // 0 = adapter default (50)
}

// ListJobsResult is one page of jobs.
type ListJobsResult struct {
	Jobs       []Job
	NextCursor string // empty at the end
}

// TransitionJobParams changes a job's status.
type TransitionJobParams struct {
	JobID string
	From  []JobStatus // allowed current statuses; empty = any
	// FromPauseReason, when set, also requires the job to be paused for
	// that reason (lifting a budget pause must not undo a manual one).
	FromPauseReason PauseReason
	To              JobStatus
	PauseReason     PauseReason // for To == JobPaused
	At              time.Time
	// ApproveCanary: when the job is paused for its canary (PauseCanary),
	// the transition also marks the canary approved and records
	// CanaryConfirmed and CanaryFailed as its results.
	ApproveCanary                 bool
	CanaryConfirmed, CanaryFailed int64
}

// IdempotencyLookup finds the job an idempotency key made, without
// creating one: a submission refused for a quota may be the replay of one
// that was accepted, and a replay is answered with its job.
type IdempotencyLookup interface {
	// JobByIdempotencyKey returns the job a tenant's key made (ErrNotFound
	// if none).
	JobByIdempotencyKey(ctx context.Context, tenant, key string) (Job, error)
}

// BudgetGrant is what ReserveBudget did.
type BudgetGrant struct {
	// Granted was added to BudgetUsed (negative when budget was given back).
	Granted int64
	// Used is BudgetUsed right after the change, and Budget the job's budget
	// then (0 = none).
	Used, Budget int64
}

// UpdateJobLimitsParams changes a job's limits; nil fields stay.
type UpdateJobLimitsParams struct {
	JobID      string
	RatePerSec *float64
	Budget     *int64
}

// BeginTurnParams starts a sender turn.
type BeginTurnParams struct {
	JobID     string
	Index     int
	Turn      int64
	MessageID string
	At        time.Time
}

// AdvanceShardParams folds a sender's progress into its shard.
type AdvanceShardParams struct {
	JobID string
	Index int
	Turn  int64
	// Epoch is the shard epoch the delta is relative to; on a mismatch the
	// delta is replaced by a recount.
	Epoch         int64
	Delta         Counts
	FailuresDelta map[string]int64
	Cursor        int64   // kept if lower than the current cursor
	SlowFactor    float64 // 0 = keep
	At            time.Time
	EndTurn       bool
	// Attempts and AttemptFailures are added to the shard's cumulative
	// counters whatever the epoch.
	Attempts        int64
	AttemptFailures int64
}

// AddShardCountsParams folds a delta into a shard outside a turn.
type AddShardCountsParams struct {
	JobID string
	Index int
	// Epoch is the shard epoch read before the item operations; on a
	// mismatch the delta is replaced by a recount.
	Epoch         int64
	Delta         Counts
	FailuresDelta map[string]int64
	// ClearDirty clears the shard's Dirty flag when the delta is folded at
	// Epoch (the caller marked the shard dirty itself, from clean, and no
	// turn or recount came between). On an epoch mismatch Dirty stays.
	ClearDirty bool
}

// TransitionShardParams changes a shard's status.
type TransitionShardParams struct {
	JobID       string
	Index       int
	From        []ShardStatus
	To          ShardStatus
	PauseReason PauseReason
	At          time.Time
}

// ListStaleShardsParams selects running (or breaker-paused) shards without
// progress.
type ListStaleShardsParams struct {
	Before time.Time
	Limit  int
}

// ClaimItemsParams claims due items of a shard.
type ClaimItemsParams struct {
	JobID   string
	Index   int
	Max     int
	Now     time.Time
	ClaimID string
}

// ClaimItemsResult holds the claimed items (status submitted).
type ClaimItemsResult struct {
	Items []Item
	Delta Counts
	// NextDueAt is the earliest NextAttemptAt of the shard's remaining
	// pending items (zero if none is pending), so the sender knows how
	// long to wait when nothing was due.
	NextDueAt time.Time
}

// ItemUpdate is one conditional item change.
type ItemUpdate struct {
	Seq     int64
	From    ItemStatus
	ClaimID string // when set, must match the item's ClaimID
	To      ItemStatus
	// Error replaces the item's error (nil clears it unless KeepError).
	Error     *ItemError
	KeepError bool
	// NextAttemptAt applies when To is pending.
	NextAttemptAt time.Time
	// AttemptsDelta is added to Attempts (e.g. −1 to give back the attempt
	// of a rate-limited send).
	AttemptsDelta int
	// ResetAttempts sets Attempts to 0 (redrive) before AttemptsDelta.
	ResetAttempts bool
	// MsgID is the provider's message id, stored when To is confirmed.
	// Entering a terminal status sets FinishedAt to the update's At;
	// leaving it clears FinishedAt and MsgID.
	MsgID string
}

// UpdateItemsParams changes items of one shard.
type UpdateItemsParams struct {
	JobID   string
	Index   int
	Updates []ItemUpdate
	At      time.Time
}

// UpdateItemsResult reports what changed.
type UpdateItemsResult struct {
	Delta         Counts
	FailuresDelta map[string]int64
	// Rejected lists the seqs whose condition failed (nothing changed).
	Rejected []int64
}

// ListItemsParams pages a job's items.
type ListItemsParams struct {
	JobID    string
	Status   ItemStatus // empty = any
	Category string     // empty = any; matches Error.Category
	Ref      string     // empty = any; matches Ref exactly
	Shard    *int       // nil = all shards
	Cursor   string
	Limit    int // 0 = adapter default (100)
}

// ListItemsResult is one page of items.
type ListItemsResult struct {
	Items      []Item
	NextCursor string
}

// ListSubmittedItemsParams selects items left submitted.
type ListSubmittedItemsParams struct {
	SubmittedBefore time.Time
	Cursor          string
	Limit           int
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
	Breaker      BreakerConfig
	UpdatedAt    time.Time
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

// BeginOutsideTurn marks a shard dirty before a change made outside a
// sender turn (reconciler, operator actions) writes its items, and returns
// the shard as it was before, to hand to FoldOutsideTurn afterwards. Should
// the process die between the item writes and the fold, the shard stays
// Dirty and its counts are recounted from the items (next BeginTurn, or the
// reconciler's count check) instead of staying wrong for good.
func BeginOutsideTurn(ctx context.Context, s Store, jobID string, index int) (Shard, error) {
	return s.MarkShardDirty(ctx, jobID, index)
}

// FoldOutsideTurn folds the count changes of item operations made outside a
// sender turn into their shard. before is the shard BeginOutsideTurn
// returned. If it was Dirty already (a turn is running, one died without
// folding its progress, or another outside change is under way) its counts
// cannot be trusted to add a delta to, so they are recounted from the
// items (which also moves the epoch, making any running turn recount at
// its next fold) and Dirty stays; otherwise the delta is added relative to
// before's epoch and the Dirty mark this change set is cleared.
func FoldOutsideTurn(ctx context.Context, s Store, before Shard, delta Counts, failures map[string]int64) (Shard, error) {
	if before.Dirty {
		return s.RecountShard(ctx, before.JobID, before.Index)
	}
	return s.AddShardCounts(ctx, AddShardCountsParams{
		JobID: before.JobID, Index: before.Index, Epoch: before.Epoch, Delta: delta, FailuresDelta: failures,
		ClearDirty: true,
	})
}

// Impossible reports whether counts cannot be a shard's true counts: a
// negative count, or counts that do not add up to the shard's size. A fold
// that would store such counts recounts from the items instead.
func (c Counts) Impossible(size int64) bool {
	return c.Pending < 0 || c.Submitted < 0 || c.Confirmed < 0 || c.Failed < 0 || c.Abandoned < 0 || c.Total() != size
}
