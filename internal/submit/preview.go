package submit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/qunfa/qunfa/internal/content"
	"github.com/qunfa/qunfa/internal/store"
)

// Preview (DESIGN.md, "Preview, canary, frequency caps, warm-up"): what a
// submission would send — counts after dedupe, suppression and frequency
// caps, per account the recipients, batch rate and estimated duration, a
// few rendered messages and the largest one — read from the store, never
// written to it, and nothing sent.

// PreviewSamples is how many rendered messages a preview shows.
const PreviewSamples = 5

// Preview is what a submission would send.
type Preview struct {
	// Total is the recipients that would be sent to (after drops).
	Total   int64
	Dropped PreviewDropped
	// ByAccount is one entry per account, by account.
	ByAccount []PreviewAccount
	// Samples are the first PreviewSamples recipients kept, rendered.
	Samples []PreviewSample
	// MaxContentBytes is the largest rendered message among those kept.
	MaxContentBytes int
}

// PreviewDropped counts the recipients a submission would drop.
type PreviewDropped struct {
	Duplicate       int64
	Suppressed      int64
	FrequencyCapped int64
}

// PreviewAccount is one account's share of a preview.
type PreviewAccount struct {
	Account    string
	Recipients int64
	// BatchRatePerSec is the rate the account's shards would send at: the
	// account's batch rate, capped by the job's rate_per_sec.
	BatchRatePerSec float64
	// EstSeconds is how long sending Recipients at BatchRatePerSec takes,
	// rounded up (0 when the rate is 0: the account does not send). With
	// warmup_sec the account's rate ramps from 10% to 100% first: the
	// estimate assumes the job finds the account idle (the usual case for
	// a launch) and integrates the ramp.
	EstSeconds int64
}

// PreviewSample is one rendered message.
type PreviewSample struct {
	Account string
	To      string
	Content string
}

// Preview validates a submission as Submit does and tells what it would
// send, without storing anything.
func (s *Submitter) Preview(ctx context.Context, p Params) (Preview, error) {
	lim := s.Limits.withDefaults()
	if p.Request.Staged {
		return Preview{}, &ValidationError{Errors: []FieldError{{Field: "staged",
			Message: "a staged job is previewed with POST /v1/jobs/{id}/preview once its parts are uploaded"}}}
	}
	accounts, err := s.validate(ctx, p, lim)
	if err != nil {
		return Preview{}, err
	}
	pv := newPreviewer(s, p.Tenant, p.Request, accounts)
	for _, rc := range p.Request.Recipients {
		if err := pv.add(ctx, rc); err != nil {
			return Preview{}, err
		}
	}
	return pv.finish(ctx)
}

// PreviewStaged tells what a staging job would send with the parts
// uploaded so far, without storing anything.
func (s *Submitter) PreviewStaged(ctx context.Context, job store.Job) (Preview, error) {
	if job.Status != store.JobStaging {
		return Preview{}, fmt.Errorf("%w: job %s is %s", ErrNotStaging, job.ID, job.Status)
	}
	ss, err := s.staging()
	if err != nil {
		return Preview{}, err
	}
	parts, err := ss.ListParts(ctx, job.ID)
	if err != nil {
		return Preview{}, fmt.Errorf("list parts of job %s: %w", job.ID, err)
	}
	accounts := map[string]store.Account{}
	pv := newPreviewer(s, job.Tenant, Request{Template: job.Template, RatePerSec: job.RatePerSec}, accounts)
	for _, part := range parts {
		data, err := ss.ReadPart(ctx, job.ID, part.Number)
		if err != nil {
			return Preview{}, fmt.Errorf("read part %d of job %s: %w", part.Number, job.ID, err)
		}
		err = eachStored(data, func(l storedLine) error {
			rc, err := decodeStored(l)
			if err != nil {
				return err
			}
			if _, ok := accounts[rc.Account]; !ok {
				a, err := s.Store.GetAccount(ctx, job.Tenant, rc.Account)
				if err != nil && !errors.Is(err, store.ErrNotFound) {
					return fmt.Errorf("read account %q: %w", rc.Account, err)
				}
				accounts[rc.Account] = a
			}
			return pv.add(ctx, rc)
		})
		if err != nil {
			return Preview{}, fmt.Errorf("part %d of job %s: %w", part.Number, job.ID, err)
		}
	}
	return pv.finish(ctx)
}

// previewer folds recipients into a Preview; suppression is looked up a
// page at a time, as planning does.
type previewer struct {
	s        *Submitter
	tenant   string
	tmpl     content.Template
	rate     float64
	accounts map[string]store.Account
	seen     map[store.RecipientKey]bool
	page     []Recipient
	counts   map[string]int64
	out      Preview
}

func newPreviewer(s *Submitter, tenant string, r Request, accounts map[string]store.Account) *previewer {
	tmpl, _ := content.Parse(r.Template) // validated before
	return &previewer{s: s, tenant: tenant, tmpl: tmpl, rate: r.RatePerSec, accounts: accounts,
		seen: map[store.RecipientKey]bool{}, counts: map[string]int64{}}
}

func (pv *previewer) add(ctx context.Context, rc Recipient) error {
	k := store.RecipientKey{Account: rc.Account, To: rc.To}
	if pv.seen[k] {
		pv.out.Dropped.Duplicate++
		return nil
	}
	pv.seen[k] = true
	pv.page = append(pv.page, rc)
	if len(pv.page) >= store.MaxPutItems {
		return pv.flush(ctx)
	}
	return nil
}

// flush drops the suppressed recipients of the page and counts the rest.
func (pv *previewer) flush(ctx context.Context) error {
	if len(pv.page) == 0 {
		return nil
	}
	keys := make([]store.RecipientKey, len(pv.page))
	for i, rc := range pv.page {
		keys[i] = store.RecipientKey{Account: rc.Account, To: rc.To}
	}
	suppressed, err := pv.s.Store.SuppressedAmong(ctx, pv.tenant, keys)
	if err != nil {
		return fmt.Errorf("suppression look-up: %w", err)
	}
	capped, err := pv.frequencyCapped(ctx, suppressed)
	if err != nil {
		return err
	}
	for i, rc := range pv.page {
		if suppressed[keys[i]] {
			pv.out.Dropped.Suppressed++
			continue
		}
		if capped[keys[i]] {
			pv.out.Dropped.FrequencyCapped++
			continue
		}
		pv.out.Total++
		pv.counts[rc.Account]++
		if n, err := pv.tmpl.RenderedLen(rc.Vars); err == nil && n > pv.out.MaxContentBytes {
			pv.out.MaxContentBytes = n
		}
		if len(pv.out.Samples) < PreviewSamples {
			text, err := pv.tmpl.Render(rc.Vars)
			if err != nil {
				return fmt.Errorf("render sample for %q: %w", rc.To, err)
			}
			pv.out.Samples = append(pv.out.Samples, PreviewSample{Account: rc.Account, To: rc.To, Content: text})
		}
	}
	pv.page = pv.page[:0]
	return nil
}

// frequencyCapped tells which recipients of the page (not suppressed)
// already had their account's frequency_cap of messages in the window
// ending now: the sender would abandon them.
func (pv *previewer) frequencyCapped(ctx context.Context, suppressed map[store.RecipientKey]bool) (map[store.RecipientKey]bool, error) {
	byAccount := map[string][]string{}
	for _, rc := range pv.page {
		k := store.RecipientKey{Account: rc.Account, To: rc.To}
		if pv.accounts[rc.Account].FrequencyCap.Capped() && !suppressed[k] {
			byAccount[rc.Account] = append(byAccount[rc.Account], rc.To)
		}
	}
	out := map[store.RecipientKey]bool{}
	for account, to := range byAccount {
		fc := pv.accounts[account].FrequencyCap
		counts, err := pv.s.Store.FrequencyCounts(ctx, store.FrequencyCountsParams{
			Tenant: pv.tenant, Account: account, WindowSec: fc.WindowSec, To: to, Now: pv.s.Clock.Now(),
		})
		if err != nil {
			return nil, fmt.Errorf("frequency cap look-up: %w", err)
		}
		for r, n := range counts {
			if n >= fc.Max {
				out[store.RecipientKey{Account: account, To: r}] = true
			}
		}
	}
	return out, nil
}

func (pv *previewer) finish(ctx context.Context) (Preview, error) {
	if err := pv.flush(ctx); err != nil {
		return Preview{}, err
	}
	names := make([]string, 0, len(pv.counts))
	for a := range pv.counts {
		names = append(names, a)
	}
	slices.Sort(names)
	pv.out.ByAccount = make([]PreviewAccount, 0, len(names))
	for _, a := range names {
		n := pv.counts[a]
		rate := pv.accounts[a].BatchRate()
		if pv.rate > 0 && (rate <= 0 || pv.rate < rate) {
			// The job's cap applies to each shard (as the sender paces it);
			// no account rate means the account does not limit.
			rate = pv.rate
		}
		var est int64
		if rate > 0 {
			acct := pv.accounts[a]
			est = int64(math.Ceil(sendSeconds(float64(n), rate, acct.BatchRate(), float64(acct.WarmupSec))))
		}
		pv.out.ByAccount = append(pv.out.ByAccount, PreviewAccount{Account: a, Recipients: n, BatchRatePerSec: rate, EstSeconds: est})
	}
	if pv.out.Samples == nil {
		pv.out.Samples = []PreviewSample{}
	}
	return pv.out, nil
}

// warmSteps is the number of steps the ramp of a warm-up is integrated in.
const warmSteps = 1000

// sendSeconds is how long n sends take at rate (the account's batch rate,
// capped by the job's) when the account's own rate acctRate ramps from
// store.WarmupFloor to full over warmupSec, as the account's token bucket
// does after an idle period: over the ramp the rate at u is
// min(rate, acctRate × f(u)), integrated in warmSteps steps; after it,
// rate. Without a warm-up it is n / rate.
func sendSeconds(n, rate, acctRate, warmupSec float64) float64 {
	if warmupSec <= 0 || acctRate <= 0 {
		return n / rate
	}
	at := func(u float64) float64 {
		f := store.WarmupFloor + (1-store.WarmupFloor)*u/warmupSec
		return math.Min(rate, acctRate*f)
	}
	dt := warmupSec / warmSteps
	var sent float64
	for i := range warmSteps {
		u := float64(i) * dt
		r0, r1 := at(u), at(u+dt)
		step := (r0 + r1) / 2 * dt
		if sent+step >= n {
			// Within the step the rate is about linear: solve for the
			// moment the n-th send goes out.
			need, a := n-sent, (r1-r0)/dt
			if a == 0 {
				return u + need/r0
			}
			return u + (math.Sqrt(r0*r0+2*a*need)-r0)/a
		}
		sent += step
	}
	return warmupSec + (n-sent)/rate
}
