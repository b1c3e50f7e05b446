package sender_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/alert/alerttest"
	"github.com/qunfa/qunfa/internal/breaker"
	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/devstack"
	"github.com/qunfa/qunfa/internal/handlers"
	"github.com/qunfa/qunfa/internal/mockprovider"
	"github.com/qunfa/qunfa/internal/provider/wecomapi"
	"github.com/qunfa/qunfa/internal/queue"
	"github.com/qunfa/qunfa/internal/queue/sqlitequeue"
	"github.com/qunfa/qunfa/internal/reconcile"
	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/store/sqlitestore"
	"github.com/qunfa/qunfa/internal/submit"
)

const tenant = "t1"

// pipeline is the engine in one process: embedded store and queue, the
// mock provider over real HTTP on 127.0.0.1, the wecomapi adapter, and the
// same handlers the Lambda functions run.
type pipeline struct {
	t          testing.TB
	dir        string
	clock      clock.Sleeper
	store      *sqlitestore.Store
	queue      *sqlitequeue.Queue
	mock       *mockprovider.Mock
	mockURL    string
	logPath    string
	submitter  *submit.Submitter
	sender     *sender.Sender
	reconciler *reconcile.Reconciler
	log        *slog.Logger
	alerts     *alerttest.Recorder
}

type pipelineOptions struct {
	clock           clock.Sleeper // default: system clock
	sender          sender.Config
	responseTimeout time.Duration
	mockSeed        int64
	shardSplit      int
}

func newPipeline(t testing.TB, o pipelineOptions) *pipeline {
	t.Helper()
	ctx := context.Background()
	if o.clock == nil {
		o.clock = clock.System{}
	}
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if os.Getenv("QUNFA_TEST_LOG") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	st, err := sqlitestore.Open(ctx, filepath.Join(dir, "store.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	q, err := sqlitequeue.Open(ctx, filepath.Join(dir, "queue.db"), sqlitequeue.Options{
		Name: "work", DeadLetter: "work-dlq", MaxReceiveCount: 10, Clock: o.clock,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	logPath := filepath.Join(dir, "deliveries.jsonl")
	mcfg := mockprovider.Config{LogPath: logPath, Clock: o.clock, Logger: log}
	if o.mockSeed != 0 {
		mcfg.Rand = newSource(o.mockSeed)
	}
	m, err := mockprovider.New(mcfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(m.Handler())
	t.Cleanup(func() { m.Close(); srv.Close() })
	rt := o.responseTimeout
	if rt == 0 {
		rt = 5 * time.Second
	}
	prov, err := wecomapi.New(wecomapi.Config{BaseURL: srv.URL, ResponseTimeout: rt, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	p := &pipeline{
		t: t, dir: dir, clock: o.clock, store: st, queue: q, mock: m, mockURL: srv.URL, logPath: logPath, log: log,
		submitter: &submit.Submitter{Store: st, Queue: q, Clock: o.clock, Limits: submit.Limits{ShardSplit: o.shardSplit}},
		sender:    &sender.Sender{Store: st, Queue: q, Provider: prov, Clock: o.clock, Log: log, Config: o.sender, Sizers: &sender.Sizers{}, Accounts: &sender.AccountReads{}},
	}
	p.reconciler = &reconcile.Reconciler{Store: st, Queue: q, Provider: prov, Clock: o.clock, Log: log,
		StaleAfter: 30 * time.Second, SettleAfter: 30 * time.Second}
	p.alerts = &alerttest.Recorder{}
	p.submitter.Alerts, p.sender.Alerts, p.reconciler.Alerts = p.alerts, p.alerts, p.alerts
	p.sender.Breakers = &breaker.Breakers{Store: st, Clock: o.clock, Alerts: p.alerts, Log: log}
	return p
}

func (p *pipeline) account(id string, rate, burst, reserve float64, perCall int) {
	p.t.Helper()
	p.putAccount(store.Account{ID: id, RatePerSec: rate, Burst: burst, OnlineReservePerSec: reserve, MaxRecipientsPerCall: perCall})
}

func (p *pipeline) putAccount(a store.Account) {
	p.t.Helper()
	a.Tenant = tenant
	if err := p.store.GrantAccount(context.Background(), a.Tenant, a.ID, time.Time{}); err != nil {
		p.t.Fatal(err)
	}
	if _, err := p.store.PutAccount(context.Background(), a); err != nil {
		p.t.Fatal(err)
	}
}

func (p *pipeline) submit(req submit.Request, key string) store.JobView {
	p.t.Helper()
	res, err := p.submitter.Submit(context.Background(), submit.Params{Tenant: tenant, CreatedBy: "test", IdempotencyKey: key, Request: req})
	if err != nil {
		p.t.Fatal(err)
	}
	return res.Job
}

// runUntilFinal runs the local event source until the job reaches a final
// status, or fails the test after timeout.
func (p *pipeline) runUntilFinal(jobID string, workers int, timeout time.Duration) store.JobView {
	p.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	src := &devstack.EventSource{Queue: p.queue, Handler: handlers.Sender(p.sender, p.log), Log: p.log,
		Workers: workers, Timeout: 30 * time.Second, Wait: 50 * time.Millisecond}
	done := make(chan struct{})
	go func() { src.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		v, err := p.store.GetJob(context.Background(), jobID)
		if err != nil {
			p.t.Fatal(err)
		}
		if store.JobFinal(v.Job.Status) {
			return v
		}
		time.Sleep(20 * time.Millisecond)
	}
	v, _ := p.store.GetJob(context.Background(), jobID)
	p.t.Fatalf("job %s not final after %v: status %s, counts %+v", jobID, timeout, v.Job.Status, v.Counts())
	return store.JobView{}
}

// deliveries reads the mock's log: message key → lines.
func (p *pipeline) deliveries() map[string][]mockprovider.Delivery {
	p.t.Helper()
	return readDeliveries(p.t, p.logPath)
}

func readDeliveries(t testing.TB, path string) map[string][]mockprovider.Delivery {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return map[string][]mockprovider.Delivery{}
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][]mockprovider.Delivery{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var d mockprovider.Delivery
		if err := json.Unmarshal(sc.Bytes(), &d); err != nil {
			t.Fatalf("bad log line %q: %v", sc.Text(), err)
		}
		out[d.Key] = append(out[d.Key], d)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// items lists every item of a job.
func (p *pipeline) items(jobID string) []store.Item {
	p.t.Helper()
	var all []store.Item
	cursor := ""
	for {
		page, err := p.store.ListItems(context.Background(), store.ListItemsParams{JobID: jobID, Cursor: cursor, Limit: 1000})
		if err != nil {
			p.t.Fatal(err)
		}
		all = append(all, page.Items...)
		if page.NextCursor == "" {
			return all
		}
		cursor = page.NextCursor
	}
}

// checkExactlyOnce judges a job by the mock's log: every confirmed item
// was delivered exactly once, every other item never, no key twice, and the
// job's counts add up and match the items.
func (p *pipeline) checkExactlyOnce(jobID string) {
	p.t.Helper()
	view, err := p.store.GetJob(context.Background(), jobID)
	if err != nil {
		p.t.Fatal(err)
	}
	log := p.deliveries()
	items := p.items(jobID)
	var truth store.Counts
	for _, it := range items {
		key := sender.MessageKey(jobID, it.Seq)
		n := len(log[key])
		switch it.Status {
		case store.ItemConfirmed:
			truth.Confirmed++
			if n != 1 {
				p.t.Errorf("item %d (%s/%s) confirmed but delivered %d times", it.Seq, it.Account, it.To, n)
			}
		case store.ItemSubmitted:
			truth.Submitted++
			if n > 1 {
				p.t.Errorf("item %d submitted and delivered %d times", it.Seq, n)
			}
		default:
			switch it.Status {
			case store.ItemPending:
				truth.Pending++
			case store.ItemFailed:
				truth.Failed++
			case store.ItemAbandoned:
				truth.Abandoned++
			}
			if n != 0 {
				p.t.Errorf("item %d is %s but was delivered %d times", it.Seq, it.Status, n)
			}
		}
	}
	if got := int64(len(items)); got != view.Job.Total {
		p.t.Errorf("job has %d items, total %d", got, view.Job.Total)
	}
	if c := view.Counts(); c != truth {
		p.t.Errorf("job counts %+v, items say %+v", c, truth)
	}
	for key, ds := range log {
		if len(ds) > 1 {
			p.t.Errorf("key %s delivered %d times", key, len(ds))
		}
	}
}

func recipients(accounts []string, perAccount int) []submit.Recipient {
	var out []submit.Recipient
	for _, a := range accounts {
		for i := range perAccount {
			out = append(out, submit.Recipient{Account: a, To: fmt.Sprintf("user-%d", i), Vars: map[string]string{"n": fmt.Sprint(i)}})
		}
	}
	return out
}

func TestPipelineDeliversEveryRecipientOnce(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, pipelineOptions{sender: sender.Config{ClaimBatch: 50, Concurrency: 16}, shardSplit: 500})
	accounts := []string{"acct-a", "acct-b", "acct-c"}
	for _, a := range accounts {
		p.account(a, 100000, 100000, 0, 1)
	}
	job := p.submit(submit.Request{Name: "once", Template: "Hi {{n}}", Recipients: recipients(accounts, 700)}, "k1")
	if job.Job.Total != 2100 || len(job.Shards) != 6 {
		t.Fatalf("planned %d items in %d shards, want 2100 in 6", job.Job.Total, len(job.Shards))
	}
	v := p.runUntilFinal(job.Job.ID, 4, 60*time.Second)
	if v.Job.Status != store.JobCompleted {
		t.Fatalf("status %s, counts %+v", v.Job.Status, v.Counts())
	}
	if c := v.Counts(); c.Confirmed != 2100 {
		t.Fatalf("counts %+v", c)
	}
	p.checkExactlyOnce(job.Job.ID)
	log := p.deliveries()
	if len(log) != 2100 {
		t.Fatalf("mock delivered %d keys, want 2100", len(log))
	}
	for _, ds := range log {
		if ds[0].Content == "" || ds[0].GUID == "" {
			t.Fatalf("bad delivery %+v", ds[0])
		}
	}
}

func newSource(seed int64) mrand.Source { return mrand.NewPCG(uint64(seed), uint64(seed)*31+7) }

// turnMessage is how the event source hands a queue message to the sender.
func turnMessage(m queue.Message) sender.Message {
	return sender.Message{ID: m.ID, Body: m.Body, ReceiptHandle: m.ReceiptHandle, ReceiveCount: m.ReceiveCount}
}

// nextTurn receives the one turn message the test expects to be waiting.
func (p *pipeline) nextTurn(visibility time.Duration) sender.Message {
	p.t.Helper()
	msgs, err := p.queue.Receive(context.Background(), queue.ReceiveParams{Max: 1, VisibilityTimeout: visibility})
	if err != nil || len(msgs) != 1 {
		p.t.Fatalf("receive a turn: %v (%d messages)", err, len(msgs))
	}
	return turnMessage(msgs[0])
}

// TestPipelinePacksIdenticalContent: a job whose template has no variables
// renders the same text for every recipient, so its calls go out full (issue
// 13: at least 80% of max_recipients_per_call on average), judged by the
// mock's count of calls; still every recipient exactly once.
func TestPipelinePacksIdenticalContent(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, pipelineOptions{sender: sender.Config{ClaimBatch: 50, Concurrency: 16}, shardSplit: 1000})
	const n, per = 1000, 100
	p.account("acct-p", 1e6, 1e6, 0, per)
	rs := make([]submit.Recipient, n)
	for i := range rs {
		rs[i] = submit.Recipient{Account: "acct-p", To: fmt.Sprintf("user-%d", i)}
	}
	job := p.submit(submit.Request{Name: "packed", Template: "The same words for everyone.", Recipients: rs}, "k-packed")
	v := p.runUntilFinal(job.Job.ID, 4, 60*time.Second)
	if c := v.Counts(); v.Job.Status != store.JobCompleted || c.Confirmed != n {
		t.Fatalf("status %s, counts %+v", v.Job.Status, c)
	}
	p.checkExactlyOnce(job.Job.ID)
	if log := p.deliveries(); len(log) != n {
		t.Fatalf("mock delivered %d keys, want %d", len(log), n)
	}
	calls := p.mock.Stats()["acct-p"].Calls
	if calls == 0 || float64(n)/float64(calls) < 0.8*per {
		t.Fatalf("%d recipients in %d calls (%.1f per call), want at least %d per call on average",
			n, calls, float64(n)/float64(max(calls, 1)), per*8/10)
	}
}

// TestPipelinePacksNoMoreThanTheProviderTakes: an account whose provider
// takes one recipient per call (WeChat template messages) sends one call
// per recipient, whatever its max_recipients_per_call says.
func TestPipelinePacksNoMoreThanTheProviderTakes(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, pipelineOptions{sender: sender.Config{ClaimBatch: 50, Concurrency: 16}})
	const n = 60
	p.putAccount(store.Account{ID: "acct-t", RatePerSec: 1e6, Burst: 1e6, MaxRecipientsPerCall: 100, Provider: "wechat-mp-template"})
	rs := make([]submit.Recipient, n)
	for i := range rs {
		rs[i] = submit.Recipient{Account: "acct-t", To: fmt.Sprintf("openid-%d", i)}
	}
	job := p.submit(submit.Request{Name: "template", Template: "The same words for everyone.", Recipients: rs}, "k-template")
	v := p.runUntilFinal(job.Job.ID, 2, 60*time.Second)
	if c := v.Counts(); v.Job.Status != store.JobCompleted || c.Confirmed != n {
		t.Fatalf("status %s, counts %+v", v.Job.Status, c)
	}
	p.checkExactlyOnce(job.Job.ID)
	if calls := p.mock.Stats()["acct-t"].Calls; calls != n {
		t.Fatalf("%d recipients in %d calls, want one call each", n, calls)
	}
}
