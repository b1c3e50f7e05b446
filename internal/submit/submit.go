// Package submit turns a submission into a job: it validates the request,
// renders every recipient's message once to prove it can be rendered, drops
// duplicate recipients, plans shards, writes the job, its shards and the item
// snapshot, and enqueues the first turn of every shard. The HTTP API and the
// scheduled-campaign path both call Submit.
//
// Submission is idempotent (DESIGN.md rule 7): the same tenant and
// idempotency key with the same body give the same job; with another body,
// ErrIdempotencyConflict. An interrupted submission is finished by
// submitting again: the job stays `creating` until its snapshot is complete.
package submit

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/qunfa/qunfa/internal/alert"
	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/content"
	"github.com/qunfa/qunfa/internal/dispatch"
	"github.com/qunfa/qunfa/internal/queue"
	"github.com/qunfa/qunfa/internal/store"
)

// Request is the body of POST /v1/jobs (DESIGN.md contract).
type Request struct {
	Name       string      `json:"name"`
	Template   string      `json:"template"`
	Recipients []Recipient `json:"recipients"`
	Budget     int64       `json:"budget"`
	RatePerSec float64     `json:"rate_per_sec"`
	// Metadata is the submitter's own key-value pairs, kept with the job
	// and shown back (bounded, see MaxMetadataKeys). Left out of the JSON
	// when empty, so requests without it hash as they always did.
	Metadata map[string]string `json:"metadata,omitempty"`
	// Staged asks for a staged job (DESIGN.md, "Staged submission"): no
	// recipients here, they are uploaded in parts (CreateStaged).
	Staged bool `json:"staged,omitempty"`
	// Canary asks the job to send its first items only, then pause for
	// approval (DESIGN.md, "Preview, canary, frequency caps, warm-up").
	// Left out of the JSON when absent, so requests without it hash as
	// they always did.
	Canary *Canary `json:"canary,omitempty"`
}

// Canary is the job option "canary": how many of the job's first items
// (spread over its shards) are sent before the job pauses with reason
// canary; exactly one of Count and Percent.
type Canary struct {
	Count   int64   `json:"count,omitempty"`
	Percent float64 `json:"percent,omitempty"`
}

// canaryCount is the canary's size for a job of total items (0: none).
func (c *Canary) canaryCount(total int64) int64 {
	switch {
	case c == nil:
		return 0
	case c.Count > 0:
		return min(c.Count, total)
	case c.Percent > 0:
		return min(int64(math.Ceil(float64(total)*c.Percent/100)), total)
	}
	return 0
}

// checkCanary reports what is wrong with a canary option.
func checkCanary(c *Canary, staged bool, add func(field, format string, args ...any)) {
	if c == nil {
		return
	}
	switch {
	case c.Count != 0 && c.Percent != 0:
		add("canary", "takes count or percent, not both")
	case c.Count < 0:
		add("canary.count", "must be positive")
	case c.Percent < 0 || c.Percent >= 100 || math.IsNaN(c.Percent):
		add("canary.percent", "must be more than 0 and less than 100")
	case c.Count == 0 && c.Percent == 0:
		add("canary", "needs count or percent")
	case staged && c.Percent != 0:
		add("canary.percent", "is not supported for a staged job yet; give count")
	}
}

// Bounds of metadata and references (Stripe's, for metadata).
const (
	MaxMetadataKeys       = 50
	MaxMetadataKeyChars   = 40
	MaxMetadataValueChars = 500
	MaxRefChars           = 200
)

// Recipient is one addressee of a job.
type Recipient struct {
	Account string            `json:"account"`
	To      string            `json:"to"`
	Vars    map[string]string `json:"vars,omitempty"`
	// Ref is the submitter's reference of the recipient (an order or
	// customer id), shown on the item and searchable; at most MaxRefChars.
	Ref string `json:"ref,omitempty"`
}

// Params is one submission.
type Params struct {
	Tenant         string
	CreatedBy      string
	IdempotencyKey string // empty: a fresh key (no idempotency)
	Request        Request
	Meta           map[string]string
}

// Result is the job standing for the submission.
type Result struct {
	Job     store.JobView
	Created bool // false: an earlier submission with the same key
}

// FieldError is one validation failure.
type FieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

// ValidationError lists everything wrong with a request; nothing was stored.
type ValidationError struct {
	Errors []FieldError
}

func (e *ValidationError) Error() string {
	parts := make([]string, 0, len(e.Errors))
	for _, f := range e.Errors {
		parts = append(parts, f.Field+": "+f.Message)
	}
	return "invalid request: " + strings.Join(parts, "; ")
}

// ErrIdempotencyConflict: the idempotency key was used with another body.
var ErrIdempotencyConflict = errors.New("idempotency key already used with a different request")

// Limits bound what a submission may contain.
type Limits struct {
	// MaxRecipients per job (default 1,000,000).
	MaxRecipients int
	// ShardSplit: an account with more recipients than this is split into
	// several shards by recipient hash (default 10,000).
	ShardSplit int
	// MaxTemplateBytes (default 16 KiB).
	MaxTemplateBytes int
	// MaxFieldBytes bounds name, account, to and each variable (default 1 KiB).
	MaxFieldBytes int
	// MaxVars bounds a recipient's variables (default 32), MaxVarNameBytes
	// each name (default 64).
	MaxVars, MaxVarNameBytes int
	// MaxContentBytes bounds a recipient's rendered message on accounts
	// that set no limit of their own (default DefaultMaxContentBytes).
	MaxContentBytes int
	// PlanGroup bounds the recipients a planning step holds in memory to
	// drop duplicates across a staged job's parts (default 200,000): the
	// shards are planned in groups of about that many recipients, each
	// group one pass over the parts.
	PlanGroup int
}

func (l Limits) withDefaults() Limits {
	if l.MaxRecipients <= 0 {
		l.MaxRecipients = 1_000_000
	}
	if l.ShardSplit <= 0 {
		l.ShardSplit = 10_000
	}
	if l.MaxTemplateBytes <= 0 {
		l.MaxTemplateBytes = 16 << 10
	}
	if l.MaxFieldBytes <= 0 {
		l.MaxFieldBytes = 1 << 10
	}
	if l.MaxVars <= 0 {
		l.MaxVars = 32
	}
	if l.MaxVarNameBytes <= 0 {
		l.MaxVarNameBytes = 64
	}
	if l.MaxContentBytes <= 0 {
		l.MaxContentBytes = DefaultMaxContentBytes
	}
	if l.PlanGroup <= 0 {
		l.PlanGroup = 200_000
	}
	return l
}

const (
	// DefaultMaxContentBytes is the largest rendered message on an account
	// that sets no max_content_bytes: what a WeCom markdown message takes.
	DefaultMaxContentBytes = 4 << 10
	// MaxContentBytesCeiling is the most an account's max_content_bytes may
	// be: a bound on the rendering work one recipient may ask for. An
	// account whose provider takes less sets its own, lower limit.
	MaxContentBytesCeiling = 16 << 10
)

// ContentLimit is the largest rendered message account a takes.
func (l Limits) ContentLimit(a store.Account) int {
	if a.MaxContentBytes > 0 {
		return a.MaxContentBytes
	}
	return l.withDefaults().MaxContentBytes
}

// Submitter creates jobs.
type Submitter struct {
	Store  store.Store
	Queue  queue.Queue
	Clock  clock.Clock
	Limits Limits
	// Alerts receives JobStarted (nil: none).
	Alerts alert.Publisher
	// Log receives alert publishing failures (nil: slog.Default()).
	Log *slog.Logger
	// Staging keeps staged jobs' parts (nil: Store, when it implements
	// store.StagingStore).
	Staging store.StagingStore
	// Quotas holds tenants' quotas, checked before a job is stored or a
	// staged job started (nil: Store, when it implements store.QuotaStore).
	Quotas store.QuotaStore
}

// planned is a validated, cleaned submission.
type planned struct {
	items      []store.Item // seq-ordered; each shard's items are contiguous
	shards     []store.Shard
	suppressed int64
}

// Submit validates, plans and stores a job, then enqueues its shards.
func (s *Submitter) Submit(ctx context.Context, p Params) (Result, error) {
	lim := s.Limits.withDefaults()
	accounts, err := s.validate(ctx, p, lim)
	if err != nil {
		return Result{}, err
	}
	plan, err := s.plan(ctx, p, lim, accounts)
	if err != nil {
		return Result{}, err
	}
	now := s.Clock.Now()
	key := p.IdempotencyKey
	if key == "" {
		key = "auto-" + newID(now)
	}
	job := store.Job{
		ID:             newID(now),
		Tenant:         p.Tenant,
		Name:           p.Request.Name,
		Template:       p.Request.Template,
		IdempotencyKey: key,
		RequestHash:    RequestHash(p.Request),
		Status:         store.JobCreating,
		Total:          int64(len(plan.items)),
		Suppressed:     plan.suppressed,
		ShardCount:     len(plan.shards),
		Budget:         p.Request.Budget,
		RatePerSec:     p.Request.RatePerSec,
		CreatedBy:      p.CreatedBy,
		CreatedAt:      now,
		Meta:           p.Meta,
		Metadata:       p.Request.Metadata,
		Canary:         p.Request.Canary.canaryCount(int64(len(plan.items))),
	}
	for i := range plan.shards {
		plan.shards[i].JobID = job.ID
		plan.shards[i].LastAdvancedAt = now
	}
	release, err := s.reserveQuota(ctx, p.Tenant, int64(len(plan.items)))
	var qerr *QuotaError
	if errors.As(err, &qerr) && key != "" {
		// A replay of an accepted submission gets its job, quota or not.
		if res, ok, rerr := s.replay(ctx, p.Tenant, key, job.RequestHash); rerr != nil || ok {
			return res, rerr
		}
	}
	if err != nil {
		return Result{}, err
	}
	created, err := s.Store.CreateJob(ctx, store.CreateJobParams{Job: job, Shards: plan.shards})
	if err != nil || !created.Created {
		release(ctx) // a replay's recipients were counted by its first submission
	}
	if errors.Is(err, store.ErrConflict) {
		return Result{}, ErrIdempotencyConflict
	}
	if err != nil {
		return Result{}, fmt.Errorf("create job: %w", err)
	}
	job = created.Job
	if job.Status == store.JobCreating && !created.Created {
		// Finishing an interrupted submission: the snapshot must be the one
		// the stored shards were planned for. The request is the same (same
		// hash), but the suppression list may have changed since; then the
		// half-written job is failed rather than completed with a
		// different plan (which could leave stale items behind).
		if err := s.checkSamePlan(ctx, job, plan); err != nil {
			return Result{}, err
		}
	}
	if job.Status == store.JobCreating {
		// New, or an earlier submission of the same request was interrupted:
		// (re)write the snapshot — deterministic from the request — and release.
		err := s.writeSnapshot(ctx, job.ID, plan.items)
		switch {
		case errors.Is(err, store.ErrInvalidTransition):
			// A concurrent submission of the same request finished the
			// snapshot and released the job first: nothing left to do.
		case err != nil:
			return Result{}, err
		}
		released, err := s.Store.TransitionJob(ctx, store.TransitionJobParams{
			JobID: job.ID, From: []store.JobStatus{store.JobCreating}, To: store.JobRunning, At: now,
		})
		switch {
		case errors.Is(err, store.ErrInvalidTransition): // released by a concurrent duplicate
		case err != nil:
			return Result{}, fmt.Errorf("release job %s: %w", job.ID, err)
		default:
			log := s.Log
			if log == nil {
				log = slog.Default()
			}
			alert.Emit(ctx, s.Alerts, log, alert.Event{Type: alert.JobStarted, Tenant: released.Tenant, Time: now,
				Detail: alert.JobStartedDetail{JobID: released.ID, Name: released.Name, Total: released.Total, Shards: released.ShardCount}})
		}
	}
	view, err := s.Store.GetJob(ctx, job.ID)
	if err != nil {
		return Result{}, fmt.Errorf("read job %s: %w", job.ID, err)
	}
	// Enqueue the first turn of every shard that has not begun. On a repeated
	// submission this repairs a crash between release and enqueue; the
	// queue's dedup and the store's turn fencing make it harmless otherwise.
	if view.Job.Status == store.JobRunning {
		if err := dispatch.SendTurns(ctx, s.Queue, firstTurns(view)); err != nil {
			return Result{}, err
		}
	}
	return Result{Job: view, Created: created.Created}, nil
}

// replay answers a submission whose idempotency key already made a job:
// that job (ok true) when the request is the same, ErrIdempotencyConflict
// when it is not, ok false when the key made no job yet.
func (s *Submitter) replay(ctx context.Context, tenant, key, hash string) (Result, bool, error) {
	lookup, ok := s.Store.(store.IdempotencyLookup)
	if !ok {
		return Result{}, false, nil
	}
	j, err := lookup.JobByIdempotencyKey(ctx, tenant, key)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return Result{}, false, nil
	case err != nil:
		return Result{}, false, fmt.Errorf("look up idempotency key: %w", err)
	case j.RequestHash != hash:
		return Result{}, false, ErrIdempotencyConflict
	case j.Status == store.JobCreating:
		return Result{}, false, nil // interrupted: finishing it is a new acceptance
	}
	view, err := s.Store.GetJob(ctx, j.ID)
	if err != nil {
		return Result{}, false, fmt.Errorf("read job %s: %w", j.ID, err)
	}
	return Result{Job: view}, true, nil
}

// checkSamePlan fails an interrupted job whose stored shards differ from
// plan.
func (s *Submitter) checkSamePlan(ctx context.Context, job store.Job, plan planned) error {
	view, err := s.Store.GetJob(ctx, job.ID)
	if err != nil {
		return fmt.Errorf("read interrupted job %s: %w", job.ID, err)
	}
	same := len(view.Shards) == len(plan.shards) && view.Job.Total == int64(len(plan.items))
	for i := 0; same && i < len(plan.shards); i++ {
		same = view.Shards[i].Account == plan.shards[i].Account && view.Shards[i].Size == plan.shards[i].Size
	}
	if same {
		return nil
	}
	if _, err := s.Store.TransitionJob(ctx, store.TransitionJobParams{
		JobID: job.ID, From: []store.JobStatus{store.JobCreating}, To: store.JobFailed, At: s.Clock.Now(),
	}); err != nil && !errors.Is(err, store.ErrInvalidTransition) {
		return fmt.Errorf("fail interrupted job %s: %w", job.ID, err)
	}
	return fmt.Errorf("%w: the submission with this key was interrupted and the suppression list has changed since, so it cannot be completed as planned (job %s failed without sending anything); submit again with a new key",
		ErrIdempotencyConflict, job.ID)
}

func (s *Submitter) writeSnapshot(ctx context.Context, jobID string, items []store.Item) error {
	for start := 0; start < len(items); start += store.MaxPutItems {
		end := min(start+store.MaxPutItems, len(items))
		page := items[start:end]
		for i := range page {
			page[i].JobID = jobID
		}
		if err := s.Store.PutItems(ctx, store.PutItemsParams{JobID: jobID, Items: page}); err != nil {
			return fmt.Errorf("write snapshot of job %s at item %d: %w", jobID, start, err)
		}
	}
	return nil
}

// Validate checks a submission as Submit does — the request against the
// contract, the tenant's accounts, every recipient's message rendered —
// without storing anything: nil, a *ValidationError, or a store failure.
// Scheduled campaigns check their stored request with it.
func (s *Submitter) Validate(ctx context.Context, p Params) error {
	_, err := s.validate(ctx, p, s.Limits.withDefaults())
	return err
}

// validate checks the request against the contract and returns the
// tenant's accounts the recipients use.
func (s *Submitter) validate(ctx context.Context, p Params, lim Limits) (map[string]store.Account, error) {
	var errs []FieldError
	add := func(field, format string, args ...any) {
		if len(errs) < 100 {
			errs = append(errs, FieldError{Field: field, Message: fmt.Sprintf(format, args...)})
		}
	}
	r := p.Request
	text := func(field, v string, required bool) {
		switch {
		case required && strings.TrimSpace(v) == "":
			add(field, "is required")
		case !utf8.ValidString(v):
			add(field, "is not valid UTF-8")
		case len(v) > lim.MaxFieldBytes && field != "template":
			add(field, "is longer than %d bytes", lim.MaxFieldBytes)
		}
	}
	text("name", r.Name, false)
	text("template", r.Template, true)
	if len(r.Template) > lim.MaxTemplateBytes {
		add("template", "is longer than %d bytes", lim.MaxTemplateBytes)
	}
	tmpl, err := content.Parse(r.Template)
	if err != nil {
		add("template", "%v", err)
	}
	if r.Budget < 0 {
		add("budget", "must be 0 (none) or positive")
	}
	if r.RatePerSec < 0 {
		add("rate_per_sec", "must be 0 (none) or positive")
	}
	checkMetadata(r.Metadata, add)
	checkCanary(r.Canary, false, add)
	switch {
	case len(r.Recipients) == 0:
		add("recipients", "must not be empty")
	case len(r.Recipients) > lim.MaxRecipients:
		add("recipients", "has %d entries, more than the limit of %d", len(r.Recipients), lim.MaxRecipients)
	}
	if len(errs) > 0 {
		return nil, &ValidationError{Errors: errs}
	}
	accounts := map[string]store.Account{}
	for i, rc := range r.Recipients {
		if err := s.checkRecipient(ctx, p.Tenant, lim, tmpl, accounts, rc, "recipients["+strconv.Itoa(i)+"]", i, add); err != nil {
			return nil, err
		}
	}
	if len(errs) > 0 {
		return nil, &ValidationError{Errors: errs}
	}
	return accounts, nil
}

// checkRecipient reports what is wrong with one recipient under field f
// (the i-th of its request): its fields, its account (looked up once per
// request in accounts) and its message rendered with tmpl. It returns only
// store failures.
func (s *Submitter) checkRecipient(ctx context.Context, tenant string, lim Limits, tmpl content.Template,
	accounts map[string]store.Account, rc Recipient, f string, i int, add func(field, format string, args ...any)) error {
	text := func(field, v string) {
		switch {
		case strings.TrimSpace(v) == "" && (field == f+".account" || field == f+".to"):
			add(field, "is required")
		case !utf8.ValidString(v):
			add(field, "is not valid UTF-8")
		case len(v) > lim.MaxFieldBytes:
			add(field, "is longer than %d bytes", lim.MaxFieldBytes)
		}
	}
	text(f+".account", rc.Account)
	text(f+".to", rc.To)
	if n := utf8.RuneCountInString(rc.Ref); n > MaxRefChars {
		add(f+".ref", "is longer than %d characters", MaxRefChars)
	} else if !utf8.ValidString(rc.Ref) {
		add(f+".ref", "is not valid UTF-8")
	}
	if len(rc.Vars) > lim.MaxVars {
		add(f+".vars", "has %d variables, more than %d", len(rc.Vars), lim.MaxVars)
		return nil // the names and values are not worth reading one by one
	}
	for k, v := range rc.Vars {
		if len(k) > lim.MaxVarNameBytes {
			add(f+".vars", "has a variable name longer than %d bytes", lim.MaxVarNameBytes)
			continue
		}
		text(f+".vars."+k, v)
	}
	if rc.Account != "" {
		if _, known := accounts[rc.Account]; !known {
			a, err := s.Store.GetAccount(ctx, tenant, rc.Account)
			switch {
			case errors.Is(err, store.ErrNotFound):
				add(f+".account", "unknown account %q", rc.Account)
				accounts[rc.Account] = store.Account{} // report once
				return nil
			case err != nil:
				return fmt.Errorf("read account %q: %w", rc.Account, err)
			}
			if granted, err := s.granted(ctx, tenant, rc.Account); err != nil {
				return err
			} else if !granted {
				add(f+".account", "the provider account %q is not granted to this tenant", rc.Account)
				accounts[rc.Account] = store.Account{} // report once
				return nil
			}
			accounts[rc.Account] = a
		}
	}
	n, err := tmpl.RenderedLen(rc.Vars)
	var missing *content.MissingVarError
	switch {
	case errors.As(err, &missing):
		add(f+".vars."+missing.Var, "recipient %d has no variable %q used by the template", i, missing.Var)
	case err != nil:
		add(f, "%v", err)
	case n > lim.ContentLimit(accounts[rc.Account]):
		add(f, "renders a message of %d bytes, more than the %d account %q takes", n, lim.ContentLimit(accounts[rc.Account]), rc.Account)
	}
	return nil
}

// plan drops duplicate recipients and those on the tenant's suppression
// list (counted in Job.Suppressed), and assigns items to shards: one or
// more shards per account, shard count fixed here.
func (s *Submitter) plan(ctx context.Context, p Params, lim Limits, accounts map[string]store.Account) (planned, error) {
	seen := make(map[store.RecipientKey]bool, len(p.Request.Recipients))
	unique := make([]Recipient, 0, len(p.Request.Recipients))
	for _, rc := range p.Request.Recipients {
		k := store.RecipientKey{Account: rc.Account, To: rc.To}
		if !seen[k] {
			seen[k] = true
			unique = append(unique, rc)
		}
	}
	byAccount := map[string][]Recipient{}
	var pl planned
	anySupp, err := s.anySuppressions(ctx, p.Tenant)
	if err != nil {
		return planned{}, err
	}
	for start := 0; anySupp && start < len(unique); start += store.MaxPutItems {
		page := unique[start:min(start+store.MaxPutItems, len(unique))]
		keys := make([]store.RecipientKey, len(page))
		for i, rc := range page {
			keys[i] = store.RecipientKey{Account: rc.Account, To: rc.To}
		}
		suppressed, err := s.Store.SuppressedAmong(ctx, p.Tenant, keys)
		if err != nil {
			return planned{}, fmt.Errorf("suppression look-up: %w", err)
		}
		for i, rc := range page {
			if suppressed[keys[i]] {
				pl.suppressed++
				continue
			}
			byAccount[rc.Account] = append(byAccount[rc.Account], rc)
		}
	}
	if !anySupp {
		for _, rc := range unique {
			byAccount[rc.Account] = append(byAccount[rc.Account], rc)
		}
	}
	if len(byAccount) == 0 {
		msg := "has no recipient left after removing duplicates"
		if pl.suppressed > 0 {
			msg = "has no recipient left after removing duplicates and suppressed recipients"
		}
		return planned{}, &ValidationError{Errors: []FieldError{{Field: "recipients", Message: msg}}}
	}
	names := make([]string, 0, len(byAccount))
	for a := range byAccount {
		names = append(names, a)
	}
	slices.Sort(names)
	var seq int64
	for _, a := range names {
		rcs := byAccount[a]
		n := (len(rcs) + lim.ShardSplit - 1) / lim.ShardSplit
		buckets := make([][]Recipient, n)
		for _, rc := range rcs {
			b := 0
			if n > 1 {
				h := fnv.New32a()
				h.Write([]byte(rc.To))
				b = int(h.Sum32() % uint32(n))
			}
			buckets[b] = append(buckets[b], rc)
		}
		for _, bucket := range buckets {
			if len(bucket) == 0 {
				continue
			}
			idx := len(pl.shards)
			pl.shards = append(pl.shards, store.Shard{
				Index: idx, Account: a, Status: store.ShardRunning,
				Size: int64(len(bucket)), Cursor: seq, SlowFactor: 1,
				Counts: store.Counts{Pending: int64(len(bucket))},
			})
			for _, rc := range bucket {
				pl.items = append(pl.items, store.Item{
					Shard: idx, Seq: seq, Account: a, To: rc.To, Vars: rc.Vars, Ref: rc.Ref,
					Status: store.ItemPending,
				})
				seq++
			}
		}
	}
	return pl, nil
}

// checkMetadata reports what is wrong with a job's metadata.
func checkMetadata(md map[string]string, add func(field, format string, args ...any)) {
	if len(md) > MaxMetadataKeys {
		add("metadata", "has %d keys, more than %d", len(md), MaxMetadataKeys)
		return
	}
	keys := make([]string, 0, len(md))
	for k := range md {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		switch n := utf8.RuneCountInString(k); {
		case n == 0:
			add("metadata", "has an empty key")
		case !utf8.ValidString(k):
			add("metadata", "has a key that is not valid UTF-8")
		case n > MaxMetadataKeyChars:
			add("metadata."+k, "key is longer than %d characters", MaxMetadataKeyChars)
		case !utf8.ValidString(md[k]):
			add("metadata."+k, "is not valid UTF-8")
		case utf8.RuneCountInString(md[k]) > MaxMetadataValueChars:
			add("metadata."+k, "is longer than %d characters", MaxMetadataValueChars)
		}
	}
}

// anySuppressions says whether the tenant's suppression list may have an
// entry: a tenant that never suppressed anyone needs no look-up per
// recipient (half a read unit each on DynamoDB). A stale "no" costs
// nothing: a sender looks up every batch of a job created within
// sender.SuppressionMargin of the list's last change.
func (s *Submitter) anySuppressions(ctx context.Context, tenant string) (bool, error) {
	at, err := s.Store.SuppressionsChangedAt(ctx, tenant)
	if err != nil {
		return true, fmt.Errorf("suppression list of %s: %w", tenant, err)
	}
	return !at.IsZero(), nil
}

// RequestHash identifies a request body for idempotency: equal requests
// (after JSON normalisation) hash equally.
func RequestHash(r Request) string {
	b, _ := json.Marshal(r) // maps marshal with sorted keys
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// newID returns a time-ordered, unique job id.
func newID(now time.Time) string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	return "j" + strconv.FormatInt(now.UnixMilli(), 36) + hex.EncodeToString(b[:])
}

// granted reports whether tenant owns the provider account (a store that
// keeps no owners grants every account its tenant configured).
func (s *Submitter) granted(ctx context.Context, tenant, account string) (bool, error) {
	ts, ok := s.Store.(store.TenantStore)
	if !ok {
		return true, nil
	}
	owner, err := ts.AccountOwner(ctx, account)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("owner of account %q: %w", account, err)
	}
	return owner == tenant, nil
}

// firstTurns are the first turns of a job's shards that have not begun.
func firstTurns(view store.JobView) []dispatch.Turn {
	var ts []dispatch.Turn
	for _, sh := range view.Shards {
		if sh.Turn == 0 && !store.ShardFinal(sh.Status) {
			ts = append(ts, dispatch.Turn{JobID: view.Job.ID, Shard: sh.Index, Turn: 1})
		}
	}
	return ts
}
