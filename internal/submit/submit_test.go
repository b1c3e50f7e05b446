package submit_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/dispatch"
	"github.com/qunfa/qunfa/internal/queue"
	"github.com/qunfa/qunfa/internal/queue/sqlitequeue"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/store/sqlitestore"
	"github.com/qunfa/qunfa/internal/submit"
)

type fixture struct {
	st  *sqlitestore.Store
	q   *sqlitequeue.Queue
	sub *submit.Submitter
	clk *clock.Fake
}

func newFixture(t *testing.T, lim submit.Limits) *fixture {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	st, err := sqlitestore.Open(ctx, filepath.Join(dir, "store.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	clk := clock.NewFake(time.Date(2026, 5, 1, 8, 0, 0, 0, time.UTC))
	q, err := sqlitequeue.Open(ctx, filepath.Join(dir, "queue.db"), sqlitequeue.Options{Name: "work", Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	for _, a := range []string{"acct-a", "acct-b"} {
		if err := st.GrantAccount(ctx, "t1", a, time.Time{}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.PutAccount(ctx, store.Account{Tenant: "t1", ID: a, RatePerSec: 10, Burst: 10}); err != nil {
			t.Fatal(err)
		}
	}
	return &fixture{st: st, q: q, clk: clk, sub: &submit.Submitter{Store: st, Queue: q, Clock: clk, Limits: lim}}
}

func (f *fixture) jobs(t *testing.T) []store.Job {
	t.Helper()
	res, err := f.st.ListJobs(context.Background(), store.ListJobsParams{Tenant: "t1", Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	return res.Jobs
}

func rcpts(account string, n int) []submit.Recipient {
	out := make([]submit.Recipient, n)
	for i := range out {
		out[i] = submit.Recipient{Account: account, To: fmt.Sprintf("u%d", i), Vars: map[string]string{"name": fmt.Sprint(i)}}
	}
	return out
}

func TestValidationErrorsStoreNothing(t *testing.T) {
	t.Parallel()
	f := newFixture(t, submit.Limits{})
	long := strings.Repeat("x", 2000)
	tests := []struct {
		name  string
		req   submit.Request
		field string
		msg   string
	}{
		{"no template", submit.Request{Recipients: rcpts("acct-a", 1)}, "template", "required"},
		{"bad template", submit.Request{Template: "Hi {{name", Recipients: rcpts("acct-a", 1)}, "template", "unclosed"},
		{"empty recipients", submit.Request{Template: "x"}, "recipients", "empty"},
		{"unknown account", submit.Request{Template: "x", Recipients: rcpts("acct-zz", 2)}, "recipients[0].account", `unknown account "acct-zz"`},
		{"missing variable", submit.Request{Template: "Hi {{name}} in {{city}}", Recipients: rcpts("acct-a", 2)}, "recipients[0].vars.city", `recipient 0 has no variable "city"`},
		{"missing to", submit.Request{Template: "x", Recipients: []submit.Recipient{{Account: "acct-a"}}}, "recipients[0].to", "required"},
		{"invalid utf-8", submit.Request{Template: "x", Recipients: []submit.Recipient{{Account: "acct-a", To: "a\xffb"}}}, "recipients[0].to", "UTF-8"},
		{"too long", submit.Request{Template: "x", Recipients: []submit.Recipient{{Account: "acct-a", To: long}}}, "recipients[0].to", "longer"},
		{"negative budget", submit.Request{Template: "x", Recipients: rcpts("acct-a", 1), Budget: -1}, "budget", "positive"},
		{"negative rate", submit.Request{Template: "x", Recipients: rcpts("acct-a", 1), RatePerSec: -2}, "rate_per_sec", "positive"},
		// Amplification: a 16 KiB template of {{a}} and a 1 KiB variable
		// would render 3 MiB per recipient.
		{"rendered too large", submit.Request{Template: strings.Repeat("{{a}}", 3000),
			Recipients: []submit.Recipient{{Account: "acct-a", To: "u", Vars: map[string]string{"a": strings.Repeat("y", 1000)}}}},
			"recipients[0]", "renders a message of 3000000 bytes, more than the 4096"},
		{"too many variables", submit.Request{Template: "x", Recipients: []submit.Recipient{{Account: "acct-a", To: "u", Vars: manyVars(33)}}},
			"recipients[0].vars", "has 33 variables, more than 32"},
		{"variable name too long", submit.Request{Template: "x", Recipients: []submit.Recipient{{Account: "acct-a", To: "u",
			Vars: map[string]string{strings.Repeat("k", 65): "v"}}}}, "recipients[0].vars", "name longer than 64 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := f.sub.Submit(context.Background(), submit.Params{Tenant: "t1", IdempotencyKey: tt.name, Request: tt.req})
			var ve *submit.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("err = %v, want a ValidationError", err)
			}
			found := false
			for _, fe := range ve.Errors {
				if fe.Field == tt.field && strings.Contains(fe.Message, tt.msg) {
					found = true
				}
			}
			if !found {
				t.Fatalf("errors %+v, want field %q with %q", ve.Errors, tt.field, tt.msg)
			}
		})
	}
	if n := len(f.jobs(t)); n != 0 {
		t.Fatalf("%d jobs stored after bad requests", n)
	}
	if msgs, _ := f.q.Receive(context.Background(), queue.ReceiveParams{Max: 10, VisibilityTimeout: time.Second}); len(msgs) != 0 {
		t.Fatalf("%d messages enqueued after bad requests", len(msgs))
	}
}

// An account's own max_content_bytes bounds the rendered message on that
// account; an account without one keeps the deployment's 4 KiB.
func TestAccountContentLimit(t *testing.T) {
	t.Parallel()
	f := newFixture(t, submit.Limits{})
	ctx := context.Background()
	if _, err := f.st.PutAccount(ctx, store.Account{Tenant: "t1", ID: "acct-b", RatePerSec: 10, Burst: 10, MaxContentBytes: 100}); err != nil {
		t.Fatal(err)
	}
	long := map[string]string{"name": strings.Repeat("y", 150)} // "Hi " + 150 bytes
	_, err := f.sub.Submit(ctx, submit.Params{Tenant: "t1", IdempotencyKey: "b", Request: submit.Request{Template: "Hi {{name}}",
		Recipients: []submit.Recipient{{Account: "acct-a", To: "u1", Vars: long}, {Account: "acct-b", To: "u2", Vars: long}}}})
	var ve *submit.ValidationError
	if !errors.As(err, &ve) || len(ve.Errors) != 1 || ve.Errors[0].Field != "recipients[1]" ||
		!strings.Contains(ve.Errors[0].Message, `renders a message of 153 bytes, more than the 100 account "acct-b" takes`) {
		t.Fatalf("err = %v, want recipients[1] refused by acct-b's 100-byte limit only", err)
	}
	if n := len(f.jobs(t)); n != 0 {
		t.Fatalf("%d jobs stored after a refused request", n)
	}
	if _, err := f.sub.Submit(ctx, submit.Params{Tenant: "t1", IdempotencyKey: "a", Request: submit.Request{Template: "Hi {{name}}",
		Recipients: []submit.Recipient{{Account: "acct-a", To: "u1", Vars: long}}}}); err != nil {
		t.Fatalf("153 bytes on acct-a (no limit of its own): %v", err)
	}
}

func TestOtherTenantsAccountIsUnknown(t *testing.T) {
	t.Parallel()
	f := newFixture(t, submit.Limits{})
	_, err := f.sub.Submit(context.Background(), submit.Params{Tenant: "t2", Request: submit.Request{Template: "x", Recipients: rcpts("acct-a", 1)}})
	var ve *submit.ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("err = %v, want unknown account for another tenant", err)
	}
}

func TestDuplicatesDroppedAndShardsPlanned(t *testing.T) {
	t.Parallel()
	f := newFixture(t, submit.Limits{ShardSplit: 100})
	var rs []submit.Recipient
	rs = append(rs, rcpts("acct-a", 250)...)
	rs = append(rs, rcpts("acct-a", 250)...) // all duplicates
	rs = append(rs, rcpts("acct-b", 40)...)  // same "to" values, other account: not duplicates
	res, err := f.sub.Submit(context.Background(), submit.Params{Tenant: "t1", CreatedBy: "ops", Request: submit.Request{Template: "Hi {{name}}", Recipients: rs}})
	if err != nil {
		t.Fatal(err)
	}
	v := res.Job
	if v.Job.Total != 290 || v.Job.Status != store.JobRunning || v.Job.CreatedBy != "ops" || v.Job.CreatedAt.IsZero() {
		t.Fatalf("job %+v", v.Job)
	}
	// acct-a: 250 > 100 → 3 shards by hash; acct-b: 1 shard.
	perAccount := map[string]int{}
	var size int64
	for _, sh := range v.Shards {
		perAccount[sh.Account]++
		size += sh.Size
		if sh.Counts.Pending != sh.Size {
			t.Fatalf("shard %d counts %+v, size %d", sh.Index, sh.Counts, sh.Size)
		}
	}
	if perAccount["acct-a"] != 3 || perAccount["acct-b"] != 1 || size != 290 || v.Job.ShardCount != 4 {
		t.Fatalf("shards per account %v, total size %d, shard count %d", perAccount, size, v.Job.ShardCount)
	}
	// Every item once, in its account's shard; seqs unique.
	items, err := f.st.ListItems(context.Background(), store.ListItemsParams{JobID: v.Job.ID, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, it := range items.Items {
		k := it.Account + "/" + it.To
		if seen[k] {
			t.Fatalf("recipient %s twice", k)
		}
		seen[k] = true
		if v.Shards[it.Shard].Account != it.Account {
			t.Fatalf("item %d of %s in shard of %s", it.Seq, it.Account, v.Shards[it.Shard].Account)
		}
	}
	if len(seen) != 290 {
		t.Fatalf("%d items", len(seen))
	}
	// One first turn enqueued per shard, grouped by shard.
	groups := map[string]bool{}
	for {
		msgs, err := f.q.Receive(context.Background(), queue.ReceiveParams{Max: 10, VisibilityTimeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) == 0 {
			break
		}
		for _, m := range msgs {
			turn, err := dispatch.Decode(m.Body)
			if err != nil || turn.Turn != 1 || turn.JobID != v.Job.ID {
				t.Fatalf("message %s: %+v %v", m.Body, turn, err)
			}
			groups[m.Group] = true
		}
	}
	if len(groups) != 4 {
		t.Fatalf("%d groups enqueued, want 4", len(groups))
	}
}

func TestNothingLeftAfterSuppressionIsRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t, submit.Limits{})
	ctx := context.Background()
	var entries []store.Suppression
	for _, rc := range rcpts("acct-a", 3) {
		entries = append(entries, store.Suppression{Account: rc.Account, To: rc.To, Reason: "unsubscribed"})
	}
	if err := f.st.PutSuppressions(ctx, "t1", entries); err != nil {
		t.Fatal(err)
	}
	_, err := f.sub.Submit(ctx, submit.Params{Tenant: "t1", Request: submit.Request{Template: "x", Recipients: rcpts("acct-a", 3)}})
	var ve *submit.ValidationError
	if !errors.As(err, &ve) || ve.Errors[0].Field != "recipients" {
		t.Fatalf("err = %v", err)
	}
	if len(f.jobs(t)) != 0 {
		t.Fatal("job stored")
	}
}

func TestIdempotency(t *testing.T) {
	t.Parallel()
	f := newFixture(t, submit.Limits{})
	ctx := context.Background()
	req := submit.Request{Name: "n", Template: "Hi {{name}}", Recipients: rcpts("acct-a", 30)}
	first, err := f.sub.Submit(ctx, submit.Params{Tenant: "t1", IdempotencyKey: "k", Request: req})
	if err != nil || !first.Created {
		t.Fatalf("first: %v %v", err, first.Created)
	}
	again, err := f.sub.Submit(ctx, submit.Params{Tenant: "t1", IdempotencyKey: "k", Request: req})
	if err != nil || again.Created || again.Job.Job.ID != first.Job.Job.ID {
		t.Fatalf("repeat: %v created=%v id=%s", err, again.Created, again.Job.Job.ID)
	}
	other := req
	other.Name = "other"
	if _, err := f.sub.Submit(ctx, submit.Params{Tenant: "t1", IdempotencyKey: "k", Request: other}); !errors.Is(err, submit.ErrIdempotencyConflict) {
		t.Fatalf("other body: %v", err)
	}
	if n := len(f.jobs(t)); n != 1 {
		t.Fatalf("%d jobs", n)
	}
	// Concurrent duplicates: one job.
	var wg sync.WaitGroup
	ids := make(chan string, 16)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := f.sub.Submit(ctx, submit.Params{Tenant: "t1", IdempotencyKey: "k2", Request: req})
			if err != nil {
				t.Error(err)
				return
			}
			ids <- r.Job.Job.ID
		}()
	}
	wg.Wait()
	close(ids)
	distinct := map[string]bool{}
	for id := range ids {
		distinct[id] = true
	}
	if len(distinct) != 1 {
		t.Fatalf("concurrent submissions made %d jobs", len(distinct))
	}
}

// failingPuts makes PutItems fail after n pages: a submission interrupted
// mid-snapshot.
type failingPuts struct {
	store.Store
	left int
}

func (f *failingPuts) PutItems(ctx context.Context, p store.PutItemsParams) error {
	if f.left == 0 {
		return errors.New("crash")
	}
	f.left--
	return f.Store.PutItems(ctx, p)
}

func TestInterruptedSubmissionIsFinishedByResubmitting(t *testing.T) {
	t.Parallel()
	f := newFixture(t, submit.Limits{})
	ctx := context.Background()
	req := submit.Request{Template: "Hi {{name}}", Recipients: rcpts("acct-a", 1200)}
	broken := &submit.Submitter{Store: &failingPuts{Store: f.st, left: 1}, Queue: f.q, Clock: f.clk}
	if _, err := broken.Submit(ctx, submit.Params{Tenant: "t1", IdempotencyKey: "big", Request: req}); err == nil {
		t.Fatal("interrupted submission succeeded")
	}
	jobs := f.jobs(t)
	if len(jobs) != 1 || jobs[0].Status != store.JobCreating {
		t.Fatalf("after interruption: %+v", jobs)
	}
	res, err := f.sub.Submit(ctx, submit.Params{Tenant: "t1", IdempotencyKey: "big", Request: req})
	if err != nil {
		t.Fatal(err)
	}
	if res.Job.Job.ID != jobs[0].ID || res.Job.Job.Status != store.JobRunning {
		t.Fatalf("resubmission: %+v", res.Job.Job)
	}
	var n int
	cursor := ""
	for {
		page, err := f.st.ListItems(ctx, store.ListItemsParams{JobID: res.Job.Job.ID, Cursor: cursor, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		n += len(page.Items)
		if page.NextCursor == "" {
			break
		}
		cursor = page.NextCursor
	}
	if n != 1200 {
		t.Fatalf("%d items after resubmission, want 1200", n)
	}
}

func TestRequestHashIgnoresMapOrder(t *testing.T) {
	a := submit.Request{Template: "x", Recipients: []submit.Recipient{{Account: "a", To: "1", Vars: map[string]string{"x": "1", "y": "2"}}}}
	b := submit.Request{Template: "x", Recipients: []submit.Recipient{{Account: "a", To: "1", Vars: map[string]string{"y": "2", "x": "1"}}}}
	if submit.RequestHash(a) != submit.RequestHash(b) {
		t.Fatal("equal requests hash differently")
	}
	b.Recipients[0].To = "2"
	if submit.RequestHash(a) == submit.RequestHash(b) {
		t.Fatal("different requests hash equally")
	}
}

func TestSuppressedRecipientsAreDroppedAndCounted(t *testing.T) {
	t.Parallel()
	f := newFixture(t, submit.Limits{})
	ctx := context.Background()
	if err := f.st.PutSuppressions(ctx, "t1", []store.Suppression{{Account: "acct-a", To: "u1"}, {Account: "acct-a", To: "u3"}, {Account: "acct-b", To: "u0"}}); err != nil {
		t.Fatal(err)
	}
	// Another tenant's list does not apply.
	if err := f.st.PutSuppressions(ctx, "t2", []store.Suppression{{Account: "acct-a", To: "u2"}}); err != nil {
		t.Fatal(err)
	}
	res, err := f.sub.Submit(ctx, submit.Params{Tenant: "t1", Request: submit.Request{Template: "x", Recipients: rcpts("acct-a", 5)}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Job.Job.Total != 3 || res.Job.Job.Suppressed != 2 {
		t.Fatalf("total %d suppressed %d, want 3 and 2", res.Job.Job.Total, res.Job.Job.Suppressed)
	}
	items, _ := f.st.ListItems(ctx, store.ListItemsParams{JobID: res.Job.Job.ID})
	for _, it := range items.Items {
		if it.To == "u1" || it.To == "u3" {
			t.Fatalf("suppressed recipient %s planned", it.To)
		}
	}
}

// TestMetadataAndRefs: metadata and refs are stored with the job and its
// items, are part of the idempotency hash (same key, other metadata:
// conflict), and bad ones are refused naming the field, storing nothing.
func TestMetadataAndRefs(t *testing.T) {
	t.Parallel()
	f := newFixture(t, submit.Limits{})
	ctx := context.Background()
	req := submit.Request{Template: "hi", Metadata: map[string]string{"order": "A-1"}, Recipients: []submit.Recipient{
		{Account: "acct-a", To: "u1", Ref: "cust-1"}, {Account: "acct-a", To: "u2"}, {Account: "acct-a", To: "u1", Ref: "dup"},
	}}
	res, err := f.sub.Submit(ctx, submit.Params{Tenant: "t1", IdempotencyKey: "k", Request: req})
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Job.Job.Metadata; len(got) != 1 || got["order"] != "A-1" {
		t.Errorf("job metadata %v", got)
	}
	items, err := f.st.ListItems(ctx, store.ListItemsParams{JobID: res.Job.Job.ID})
	if err != nil || len(items.Items) != 2 || items.Items[0].Ref != "cust-1" || items.Items[1].Ref != "" {
		t.Fatalf("items %+v, %v; want u1 with ref cust-1 (the first of the duplicates) and u2 without", items.Items, err)
	}

	other := req
	other.Metadata = map[string]string{"order": "A-2"}
	if _, err := f.sub.Submit(ctx, submit.Params{Tenant: "t1", IdempotencyKey: "k", Request: other}); !errors.Is(err, submit.ErrIdempotencyConflict) {
		t.Errorf("same key, other metadata: %v, want ErrIdempotencyConflict", err)
	}
	if without := (submit.Request{Template: "x"}); submit.RequestHash(without) != submit.RequestHash(submit.Request{Template: "x", Metadata: map[string]string{}}) {
		t.Error("an empty metadata map hashes differently from none")
	}

	many := map[string]string{}
	for i := range submit.MaxMetadataKeys + 1 {
		many[fmt.Sprint("k", i)] = "v"
	}
	for name, tc := range map[string]struct {
		md    map[string]string
		ref   string
		field string
	}{
		"too many keys": {md: many, field: "metadata"},
		"empty key":     {md: map[string]string{"": "v"}, field: "metadata"},
		"long key":      {md: map[string]string{strings.Repeat("k", 41): "v"}, field: "metadata." + strings.Repeat("k", 41)},
		"long value":    {md: map[string]string{"k": strings.Repeat("值", 501)}, field: "metadata.k"},
		"long ref":      {ref: strings.Repeat("r", submit.MaxRefChars+1), field: "recipients[0].ref"},
	} {
		bad := submit.Request{Template: "hi", Metadata: tc.md, Recipients: []submit.Recipient{{Account: "acct-a", To: "u9", Ref: tc.ref}}}
		_, err := f.sub.Submit(ctx, submit.Params{Tenant: "t1", Request: bad})
		var verr *submit.ValidationError
		if !errors.As(err, &verr) || verr.Errors[0].Field != tc.field {
			t.Errorf("%s: %v, want a validation error of %s", name, err, tc.field)
		}
	}
	if n := len(f.jobs(t)); n != 1 {
		t.Errorf("%d jobs stored, want only the first", n)
	}
	// At the bounds: accepted.
	edge := map[string]string{strings.Repeat("k", 40): strings.Repeat("值", 500)}
	if _, err := f.sub.Submit(ctx, submit.Params{Tenant: "t1", Request: submit.Request{Template: "hi", Metadata: edge,
		Recipients: []submit.Recipient{{Account: "acct-a", To: "u9", Ref: strings.Repeat("r", submit.MaxRefChars)}}}}); err != nil {
		t.Errorf("metadata and ref at the bounds: %v", err)
	}
}

func manyVars(n int) map[string]string {
	m := map[string]string{}
	for i := range n {
		m[fmt.Sprint("v", i)] = "x"
	}
	return m
}

// TestHostileBodyIsRefusedCheaply: validating a body built to amplify
// rendering (1,000 recipients of a 15 KB template of placeholders and
// 1 KB variables: 3 GB if rendered) renders nothing: the bytes it
// allocates stay far below even one recipient's rendered message per
// recipient (measured in bytes allocated, not in time).
func TestHostileBodyIsRefusedCheaply(t *testing.T) {
	f := newFixture(t, submit.Limits{})
	req := submit.Request{Template: strings.Repeat("{{a}}", 3000)}
	for i := range 1000 {
		req.Recipients = append(req.Recipients, submit.Recipient{Account: "acct-a", To: fmt.Sprint("u", i),
			Vars: map[string]string{"a": strings.Repeat("y", 1000)}})
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := f.sub.Submit(context.Background(), submit.Params{Tenant: "t1", Request: req})
	runtime.ReadMemStats(&after)
	var ve *submit.ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("err = %v, want a ValidationError", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 100<<20 {
		t.Errorf("validation allocated %d MB for 1,000 recipients (a rendered message is 3 MB)", got>>20)
	}
}

// TestReplayAtTheQuotaGetsItsJob: a tenant at its running-jobs quota that
// retries an accepted submission (same Idempotency-Key and body) gets the
// job it made, not a 429 (DESIGN rule 7); a new job is refused, and the
// same key with another body is still a conflict.
func TestReplayAtTheQuotaGetsItsJob(t *testing.T) {
	t.Parallel()
	f := newFixture(t, submit.Limits{})
	ctx := context.Background()
	if err := f.st.PutQuota(ctx, store.Quota{Tenant: "t1", MaxRunningJobs: 1}); err != nil {
		t.Fatal(err)
	}
	req := submit.Request{Template: "x", Recipients: rcpts("acct-a", 2)}
	first, err := f.sub.Submit(ctx, submit.Params{Tenant: "t1", IdempotencyKey: "k1", Request: req})
	if err != nil || !first.Created {
		t.Fatalf("first submission: %+v, %v", first.Created, err)
	}
	again, err := f.sub.Submit(ctx, submit.Params{Tenant: "t1", IdempotencyKey: "k1", Request: req})
	if err != nil || again.Created || again.Job.Job.ID != first.Job.Job.ID {
		t.Fatalf("replay at the quota: created %v, job %s, err %v; want the first job %s", again.Created, again.Job.Job.ID, err, first.Job.Job.ID)
	}
	var qerr *submit.QuotaError
	if _, err := f.sub.Submit(ctx, submit.Params{Tenant: "t1", IdempotencyKey: "k2", Request: req}); !errors.As(err, &qerr) {
		t.Fatalf("a new job over the quota: %v, want a QuotaError", err)
	}
	other := req
	other.Template = "y"
	if _, err := f.sub.Submit(ctx, submit.Params{Tenant: "t1", IdempotencyKey: "k1", Request: other}); !errors.Is(err, submit.ErrIdempotencyConflict) {
		t.Fatalf("the same key, another body, at the quota: %v, want ErrIdempotencyConflict", err)
	}
}
