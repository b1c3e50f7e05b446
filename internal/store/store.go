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
// recount increments the shard's Epoch, and so does every outside change's
// dirty mark. A delta is folded only if the
// caller's Epoch (the shard's epoch it read before its item operations) is
// still the shard's; otherwise the delta is discarded and the counts are
// recomputed from the items instead (Epoch + 1), because the recount that
// moved the epoch may already include the delta's changes. The caller adopts
// the epoch of the shard returned.
package store

import (
	"context"
	"errors"
	"math"
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
	// items first (Epoch + 1). If the previous turn did not end
	// (TurnOpen), OutcomesReplay is set. Marks the shard Dirty and
	// TurnOpen; EndTurn clears both.
	BeginTurn(ctx context.Context, p BeginTurnParams) (Shard, error)
	// AdvanceShard folds a count delta into the shard (subject to the count
	// epoch, see the package doc) and moves its cursor, last-advanced time
	// and slow-down factor, only while p.Turn is the shard's current turn
	// (ErrConflict otherwise, and nothing changes). EndTurn clears Dirty
	// and TurnOpen.
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
	// reconciler), and starts its next count epoch (Epoch + 1), so that no
	// fold computed before the mark adds a delta or clears the mark. It
	// returns the shard as it was before (its Dirty and Epoch tell
	// FoldOutsideTurn what to do). It adds one to OutcomesOutside: the
	// change may record outcomes and die before it publishes them.
	MarkShardDirty(ctx context.Context, jobID string, index int) (Shard, error)
	// TransitionShard changes a shard's status along ShardTransitionAllowed,
	// like TransitionJob.
	TransitionShard(ctx context.Context, p TransitionShardParams) (Shard, error)
	// ListStaleShards lists shards in status running, or paused with reason
	// breaker, whose LastAdvancedAt is before p.Before, across all jobs
	// (with Before in the future: every such shard).
	ListStaleShards(ctx context.Context, p ListStaleShardsParams) ([]ShardRef, error)
	// ListDirtyShards lists shards in a final status (ShardFinal) that need
	// the reconciler's sweep (NeedsSweep), across all jobs, up to p.Limit:
	// Dirty (an outside change died between its item writes and its fold
	// on a shard that gets no more turns), or with outcomes that may be
	// unpublished (its last turn could not publish them, or an outside
	// change is unfinished). The reconciler recounts them, publishes their
	// outcomes again and clears the marks.
	ListDirtyShards(ctx context.Context, p ListDirtyShardsParams) ([]ShardRef, error)

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
	// status and/or error category, paged by an opaque cursor. An adapter
	// may bound what one call reads: a page may then hold fewer items
	// than p.Limit, or none, with a cursor to go on from; only an empty
	// NextCursor means the end.
	ListItems(ctx context.Context, p ListItemsParams) (ListItemsResult, error)
	// ListSubmittedItems lists items (across jobs) that have been submitted
	// since before p.SubmittedBefore, oldest claim first is not required.
	ListSubmittedItems(ctx context.Context, p ListSubmittedItemsParams) (ListItemsResult, error)

	// TakeTokens takes up to p.Want tokens from a token bucket at time p.Now.
	// A bucket starts full (Burst tokens) and refills at RatePerSec up to
	// Burst. Over any interval, the tokens granted never exceed
	// Burst + RatePerSec × elapsed, however many callers take concurrently.
	TakeTokens(ctx context.Context, p TakeTokensParams) (TakeTokensResult, error)
	// TakeSlots takes up to p.Want send slots from the random schedule of
	// the account p.Bucket names (see the function TakeSlots; a schedule
	// is kept apart from the token bucket of the same name), atomically
	// with respect to every other taker: a slot is granted once, and the
	// gaps between granted slots are those the schedule drew.
	TakeSlots(ctx context.Context, p TakeSlotsParams) (TakeSlotsResult, error)

	// PutAccount creates or replaces a tenant's sending account config.
	PutAccount(ctx context.Context, a Account) (Account, error)
	// GetAccount reads a tenant's account (ErrNotFound if unknown).
	GetAccount(ctx context.Context, tenant, account string) (Account, error)
	// ListAccounts lists a tenant's accounts ordered by ID.
	ListAccounts(ctx context.Context, tenant string) ([]Account, error)
	// SaveAccountSizing records the sizing the sender chose for an account
	// (Account.Sizing), leaving its limits alone; ErrNotFound when the
	// account does not exist. Senders call it when the sizing changes, or
	// about once a minute, so it costs a few writes an hour per account.
	SaveAccountSizing(ctx context.Context, p SaveAccountSizingParams) error

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
	// With b.Transition set, the same write appends it to the account's
	// breaker history as number b.Transitions + 1.
	SaveBreaker(ctx context.Context, b Breaker) (Breaker, error)
	// ListBreakerHistory returns an account's last MaxBreakerHistory
	// breaker transitions, newest first (none: empty, not ErrNotFound).
	ListBreakerHistory(ctx context.Context, tenant, account string) ([]BreakerTransition, error)
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
	// SuppressionsChangedAt is a time at or after the CreatedAt of every
	// entry on the tenant's suppression list (an entry without one counts
	// as added at the end of time), and the zero time only when the list
	// is empty. A job created well after it was planned against the whole
	// list, so its sender need not look its recipients up again (one
	// eventually consistent read per recipient on DynamoDB); a tenant with
	// no list needs no look-ups at all.
	SuppressionsChangedAt(ctx context.Context, tenant string) (time.Time, error)
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

// RecipientKey names one recipient of an account.
type RecipientKey struct {
	Account string
	To      string
}

// EndOfTime is the latest time a store can hold (unix nanoseconds
// MaxInt64): what SuppressionsChangedAt says when it cannot tell.
var EndOfTime = time.Unix(0, math.MaxInt64).UTC()

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
	// Timezone is the IANA zone (e.g. "Asia/Shanghai") a cron schedule is
	// evaluated in; "" is the stack's default zone.
	Timezone string
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
	// OutcomesPublishedTo is the shard's outcomes watermark: every final
	// outcome of its items with FinishedAt at or before it has been
	// published (items.outcomes), by the sender that recorded it.
	// OutcomesReplay says a turn may have recorded outcomes and not
	// published them (it died, or a publish failed), and OutcomesOutside
	// counts outside changes begun (MarkShardDirty) and not yet folded
	// after publishing theirs (one may have died in between), first seen
	// by a turn at OutcomesOutsideSeenAt (zero: not yet): while the
	// watermark stays where it is (it does not move while OutcomesOutside
	// is not 0) and, when OutcomesReplay is set or outside changes have
	// stayed unfinished for OutcomesOutsideGrace, the next turn publishes
	// again the shard's outcomes finished after the watermark (less a
	// margin) before it sends (OutcomesNeedReplay).
	OutcomesPublishedTo   time.Time
	OutcomesReplay        bool
	OutcomesOutside       int64
	OutcomesOutsideSeenAt time.Time
	// TurnOpen says a turn began (BeginTurn) and has not ended
	// (AdvanceShard with EndTurn): at the next BeginTurn, that turn died.
	TurnOpen bool
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

// ExpireItemsParams asks a store with data retention (dynamostore) to mark
// finished jobs' item data for deletion: at most Limit records in one call,
// each expiring Retain after its job finished.
type ExpireItemsParams struct {
	Now    time.Time
	Retain time.Duration
	Limit  int
}

// ExpireItemsResult says what one call marked.
type ExpireItemsResult struct {
	// Records is how many item records were given their expiry.
	Records int
	// Jobs is how many jobs had all their item records marked.
	Jobs int
	// Deferred is how many finished jobs were left for later because items
	// are still pending or submitted (under review, or re-opened).
	Deferred int
	// More: the limit stopped the call; more records are waiting.
	More bool
}
