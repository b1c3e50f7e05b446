package prom_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/metrics"
	"github.com/qunfa/qunfa/internal/metrics/prom"
	"github.com/qunfa/qunfa/internal/provider"
	"github.com/qunfa/qunfa/internal/queue"
	"github.com/qunfa/qunfa/internal/queue/sqlitequeue"
)

// scrape GETs the handler the way Prometheus does and returns the text.
func scrape(t *testing.T, p *prom.Recorder) string {
	t.Helper()
	srv := httptest.NewServer(p.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("scrape: %d %s\n%s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	return string(body)
}

// wantLines checks that every line appears in the exposition as a whole line.
func wantLines(t *testing.T, text string, lines ...string) {
	t.Helper()
	have := map[string]bool{}
	for _, l := range strings.Split(text, "\n") {
		have[l] = true
	}
	for _, l := range lines {
		if !have[l] {
			t.Errorf("exposition lacks %q\n%s", l, text)
		}
	}
}

func TestPrometheusExposition(t *testing.T) {
	ctx := context.Background()
	p := prom.New(nil)
	p.MessagesSent(ctx, "acct-a", 3)
	p.MessagesSent(ctx, "acct-a", 2)
	p.MessagesSent(ctx, "acct-b", 1)
	p.MessagesFailed(ctx, "acct-a", "permanent", 2)
	p.MessagesFailed(ctx, "acct-a", "uncertain", 1)
	p.RateLimited(ctx, "acct-b", 4)
	p.ProviderLatency(ctx, "acct-a", 40*time.Millisecond)
	p.ProviderLatency(ctx, "acct-a", 3*time.Second)
	p.TokenWait(ctx, 200*time.Millisecond)
	p.TokenWait(ctx, 90*time.Second)
	p.Handback(ctx)
	p.Handback(ctx)
	p.QueueDepth(ctx, "work", 7, 2)
	p.AddActiveShards(ctx, 1)
	p.AddActiveShards(ctx, 1)
	p.AddActiveShards(ctx, 1)
	p.AddActiveShards(ctx, -1)
	p.MessagesSent(ctx, "acct-c", 0) // nothing: no series

	text := scrape(t, p)
	wantLines(t, text,
		"# TYPE qunfa_messages_sent_total counter",
		`qunfa_messages_sent_total{account="acct-a"} 5`,
		`qunfa_messages_sent_total{account="acct-b"} 1`,
		"# TYPE qunfa_messages_failed_total counter",
		`qunfa_messages_failed_total{account="acct-a",category="permanent"} 2`,
		`qunfa_messages_failed_total{account="acct-a",category="uncertain"} 1`,
		`qunfa_rate_limited_total{account="acct-b"} 4`,
		"# TYPE qunfa_provider_latency_seconds histogram",
		`qunfa_provider_latency_seconds_bucket{account="acct-a",le="0.025"} 0`,
		`qunfa_provider_latency_seconds_bucket{account="acct-a",le="0.05"} 1`,
		`qunfa_provider_latency_seconds_bucket{account="acct-a",le="2.5"} 1`,
		`qunfa_provider_latency_seconds_bucket{account="acct-a",le="5"} 2`,
		`qunfa_provider_latency_seconds_bucket{account="acct-a",le="+Inf"} 2`,
		`qunfa_provider_latency_seconds_sum{account="acct-a"} 3.04`,
		`qunfa_provider_latency_seconds_count{account="acct-a"} 2`,
		"# TYPE qunfa_token_wait_seconds histogram",
		`qunfa_token_wait_seconds_bucket{le="0.25"} 1`,
		`qunfa_token_wait_seconds_bucket{le="60"} 1`,
		`qunfa_token_wait_seconds_bucket{le="300"} 2`,
		`qunfa_token_wait_seconds_count 2`,
		"# TYPE qunfa_handbacks_total counter",
		"qunfa_handbacks_total 2",
		"# TYPE qunfa_queue_depth gauge",
		`qunfa_queue_depth{queue="work",state="visible"} 7`,
		`qunfa_queue_depth{queue="work",state="in_flight"} 2`,
		"# TYPE qunfa_active_shards gauge",
		"qunfa_active_shards 2",
	)
	if strings.Contains(text, "acct-c") {
		t.Error("a zero count made a series")
	}
}

// TestPrometheusWatchesSQLiteQueue registers the local stack's queue the
// way devstack does and checks each scrape reads its current depth.
func TestPrometheusWatchesSQLiteQueue(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(time.Date(2025, 3, 1, 9, 0, 0, 0, time.UTC))
	q, err := sqlitequeue.Open(ctx, filepath.Join(t.TempDir(), "queue.db"), sqlitequeue.Options{Name: "work", Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = q.Close() })
	p := prom.New(slog.New(slog.NewTextHandler(io.Discard, nil)))
	p.WatchQueue("work", func(ctx context.Context) (int, int, error) {
		s, err := q.Stats(ctx)
		return s.Visible, s.InFlight, err
	})

	wantLines(t, scrape(t, p),
		`qunfa_queue_depth{queue="work",state="visible"} 0`,
		`qunfa_queue_depth{queue="work",state="in_flight"} 0`)

	for i := range 3 {
		if _, err := q.Send(ctx, queue.SendParams{Group: string(rune('a' + i)), DedupID: string(rune('a' + i)), Body: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := q.Receive(ctx, queue.ReceiveParams{Max: 1, VisibilityTimeout: time.Minute}); err != nil {
		t.Fatal(err)
	}
	wantLines(t, scrape(t, p),
		`qunfa_queue_depth{queue="work",state="visible"} 2`,
		`qunfa_queue_depth{queue="work",state="in_flight"} 1`)
}

// A queue that cannot be read drops out of that scrape; the rest is served.
func TestPrometheusQueueError(t *testing.T) {
	p := prom.New(slog.New(slog.NewTextHandler(io.Discard, nil)))
	p.WatchQueue("broken", func(context.Context) (int, int, error) { return 0, 0, errors.New("disk gone") })
	p.Handback(context.Background())
	text := scrape(t, p)
	wantLines(t, text, "qunfa_handbacks_total 1")
	if strings.Contains(text, `queue="broken"`) {
		t.Errorf("an unreadable queue was served:\n%s", text)
	}
}

// fixedProvider accepts the first recipient and rate-limits the rest,
// taking 30ms on the fake clock.
type fixedProvider struct{ clk *clock.Fake }

func (f fixedProvider) Send(_ context.Context, req provider.SendRequest) (provider.SendResult, error) {
	f.clk.Advance(30 * time.Millisecond)
	return provider.SendResult{Recipients: []provider.RecipientResult{{Accepted: true}, {Category: provider.RateLimited}}}, nil
}

func (fixedProvider) Status(context.Context, provider.StatusRequest) (provider.Status, error) {
	return provider.StatusUnknown, nil
}

func TestProviderDecoratorExposition(t *testing.T) {
	clk := clock.NewFake(time.Date(2025, 3, 1, 9, 0, 0, 0, time.UTC))
	r := prom.New(nil)
	p := &metrics.MeasuredProvider{Next: fixedProvider{clk}, Recorder: r, Clock: clk}
	for range 3 {
		if _, err := p.Send(context.Background(), provider.SendRequest{Account: "acct-b"}); err != nil {
			t.Fatal(err)
		}
	}
	wantLines(t, scrape(t, r),
		`qunfa_messages_sent_total{account="acct-b"} 3`,
		`qunfa_rate_limited_total{account="acct-b"} 3`,
		`qunfa_provider_latency_seconds_bucket{account="acct-b",le="0.025"} 0`,
		`qunfa_provider_latency_seconds_bucket{account="acct-b",le="0.05"} 3`,
		`qunfa_provider_latency_seconds_count{account="acct-b"} 3`,
	)
}

// TestPrometheusAccountSizing: the sender's sizing of each account is
// served as three gauges by account.
func TestPrometheusAccountSizing(t *testing.T) {
	t.Parallel()
	p := prom.New(nil)
	p.AccountSizing(context.Background(), "acct-a", 45, 3, 1800*time.Millisecond)
	p.AccountSizing(context.Background(), "acct-b", 80, 64, 20*time.Millisecond)
	p.AccountSizing(context.Background(), "acct-a", 40, 2, 1500*time.Millisecond)
	wantLines(t, scrape(t, p),
		`qunfa_account_batch_size{account="acct-a"} 40`,
		`qunfa_account_concurrency{account="acct-a"} 2`,
		`qunfa_account_p99_latency_seconds{account="acct-a"} 1.5`,
		`qunfa_account_batch_size{account="acct-b"} 80`,
		`qunfa_account_concurrency{account="acct-b"} 64`,
		`qunfa_account_p99_latency_seconds{account="acct-b"} 0.02`,
	)
}
