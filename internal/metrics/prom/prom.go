// Package prom is the Prometheus metrics.Recorder of the local stack: it
// keeps qunfa's metrics in its own registry and serves them as Prometheus
// text at /metrics. It lives apart from package metrics so that the Lambda
// functions, which record through metrics.EMF, never link the Prometheus
// client.
package prom

import (
	"context"
	"log/slog"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/qunfa/qunfa/internal/metrics"
)

// Histogram buckets, in seconds.
var (
	// ProviderLatencyBuckets spans a fast provider call to a timeout.
	ProviderLatencyBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}
	// TokenWaitBuckets spans an in-handler wait to a long hand-back.
	TokenWaitBuckets = []float64{0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}
)

// queueStatsTimeout bounds reading one watched queue's depth at a scrape.
const queueStatsTimeout = 2 * time.Second

// Recorder is the metrics.Recorder of the local stack: it keeps the
// metrics in its own registry and serves them as Prometheus text (Handler).
type Recorder struct {
	reg          *prometheus.Registry
	sent         *prometheus.CounterVec
	failed       *prometheus.CounterVec
	rateLimited  *prometheus.CounterVec
	latency      *prometheus.HistogramVec
	tokenWait    prometheus.Histogram
	handbacks    prometheus.Counter
	activeShards prometheus.Gauge
	oldest       prometheus.Gauge
	batchSize    *prometheus.GaugeVec
	concurrency  *prometheus.GaugeVec
	p99          *prometheus.GaugeVec
	stuck        prometheus.Gauge
	queues       *queueCollector
	log          *slog.Logger
}

var (
	_ metrics.Recorder       = (*Recorder)(nil)
	_ metrics.SizingRecorder = (*Recorder)(nil)
)

// New returns a Recorder with every qunfa metric
// registered (and at zero where it has no labels). log receives scrape
// errors, such as a watched queue that cannot be read (nil: slog.Default()).
func New(log *slog.Logger) *Recorder {
	if log == nil {
		log = slog.Default()
	}
	p := &Recorder{
		reg: prometheus.NewRegistry(),
		sent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metrics.MessagesSent, Help: "Recipients the provider accepted.",
		}, []string{metrics.LabelAccount}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metrics.MessagesFailed, Help: "Recipients the provider refused or left unanswered, by provider category (rate limits excluded).",
		}, []string{metrics.LabelAccount, metrics.LabelCategory}),
		rateLimited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metrics.RateLimited, Help: "Recipients the provider refused for frequency or concurrency.",
		}, []string{metrics.LabelAccount}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: metrics.ProviderLatency, Help: "Duration of provider send calls.", Buckets: ProviderLatencyBuckets,
		}, []string{metrics.LabelAccount}),
		tokenWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: metrics.TokenWait, Help: "Waits for rate-limit tokens.", Buckets: TokenWaitBuckets,
		}),
		handbacks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: metrics.Handbacks, Help: "Shard turns handed back to the queue to continue later.",
		}),
		activeShards: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: metrics.ActiveShards, Help: "Shard turns being worked.",
		}),
		oldest: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: metrics.OldestSubmitted, Help: "Age of the oldest item left submitted (claimed, outcome not recorded), as the reconciler last saw it.",
		}),
		batchSize: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: metrics.AccountBatchSize, Help: "Recipients per call of identical content the sender chose for the account from its measured latency.",
		}, []string{metrics.LabelAccount}),
		concurrency: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: metrics.AccountConcurrency, Help: "Provider calls in flight the sender allows the account (Little's law on its measured latency).",
		}, []string{metrics.LabelAccount}),
		p99: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: metrics.AccountP99Latency, Help: "P99 provider call latency the account's sizing was chosen from.",
		}, []string{metrics.LabelAccount}),
		stuck: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: metrics.OldestStuckShard, Help: "Time without progress of the stalest running shard the reconciler last re-drove (0: none was stale).",
		}),
		queues: &queueCollector{
			desc: prometheus.NewDesc(metrics.QueueDepth, "Messages in a queue, visible or in flight.", []string{metrics.LabelQueue, metrics.LabelState}, nil),
			set:  map[string][2]int{},
		},
		log: log,
	}
	p.reg.MustRegister(p.sent, p.failed, p.rateLimited, p.latency, p.tokenWait, p.handbacks, p.activeShards, p.oldest, p.stuck,
		p.batchSize, p.concurrency, p.p99, p.queues)
	return p
}

// OldestSubmittedAge sets the reconciler's gauge of the oldest item left
// submitted.
func (p *Recorder) OldestSubmittedAge(_ context.Context, d time.Duration) { p.oldest.Set(d.Seconds()) }

// AccountSizing sets the account's sizing gauges.
func (p *Recorder) AccountSizing(_ context.Context, account string, batchSize, concurrency int, p99 time.Duration) {
	p.batchSize.WithLabelValues(account).Set(float64(batchSize))
	p.concurrency.WithLabelValues(account).Set(float64(concurrency))
	p.p99.WithLabelValues(account).Set(p99.Seconds())
}

// OldestStuckShardAge sets the reconciler's gauge of the stalest
// re-driven shard.
func (p *Recorder) OldestStuckShardAge(_ context.Context, d time.Duration) { p.stuck.Set(d.Seconds()) }

// Registry is the registry the metrics live in, for adding collectors
// (for example collectors.NewGoCollector()).
func (p *Recorder) Registry() *prometheus.Registry { return p.reg }

// Handler serves the metrics as Prometheus text, for GET /metrics. A
// watched queue that cannot be read is logged and left out of that scrape.
func (p *Recorder) Handler() http.Handler {
	return promhttp.HandlerFor(p.reg, promhttp.HandlerOpts{
		ErrorLog:      promLogger{p.log},
		ErrorHandling: promhttp.ContinueOnError,
	})
}

// WatchQueue makes every scrape read the named queue's depth through
// stats, so qunfa_queue_depth is current without anyone calling
// QueueDepth. A watched queue's depth replaces any set by QueueDepth.
func (p *Recorder) WatchQueue(queue string, stats metrics.QueueStatsFunc) {
	p.queues.mu.Lock()
	defer p.queues.mu.Unlock()
	if p.queues.watched == nil {
		p.queues.watched = map[string]metrics.QueueStatsFunc{}
	}
	p.queues.watched[queue] = stats
}

// MessagesSent implements metrics.Recorder.
func (p *Recorder) MessagesSent(_ context.Context, account string, n int) {
	if n > 0 {
		p.sent.WithLabelValues(account).Add(float64(n))
	}
}

// MessagesFailed implements metrics.Recorder.
func (p *Recorder) MessagesFailed(_ context.Context, account, category string, n int) {
	if n > 0 {
		p.failed.WithLabelValues(account, category).Add(float64(n))
	}
}

// RateLimited implements metrics.Recorder.
func (p *Recorder) RateLimited(_ context.Context, account string, n int) {
	if n > 0 {
		p.rateLimited.WithLabelValues(account).Add(float64(n))
	}
}

// ProviderLatency implements metrics.Recorder.
func (p *Recorder) ProviderLatency(_ context.Context, account string, d time.Duration) {
	p.latency.WithLabelValues(account).Observe(d.Seconds())
}

// TokenWait implements metrics.Recorder.
func (p *Recorder) TokenWait(_ context.Context, d time.Duration) {
	p.tokenWait.Observe(d.Seconds())
}

// Handback implements metrics.Recorder.
func (p *Recorder) Handback(context.Context) { p.handbacks.Inc() }

// QueueDepth implements metrics.Recorder.
func (p *Recorder) QueueDepth(_ context.Context, queue string, visible, inFlight int) {
	p.queues.mu.Lock()
	p.queues.set[queue] = [2]int{visible, inFlight}
	p.queues.mu.Unlock()
}

// AddActiveShards implements metrics.Recorder.
func (p *Recorder) AddActiveShards(_ context.Context, delta int) {
	p.activeShards.Add(float64(delta))
}

// queueCollector serves qunfa_queue_depth: the depths set through
// QueueDepth, and those of watched queues read at each scrape.
type queueCollector struct {
	desc    *prometheus.Desc
	mu      sync.Mutex
	set     map[string][2]int
	watched map[string]metrics.QueueStatsFunc
}

func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	depths := make(map[string][2]int, len(c.set)+len(c.watched))
	for q, d := range c.set {
		depths[q] = d
	}
	watched := make(map[string]metrics.QueueStatsFunc, len(c.watched))
	for q, f := range c.watched {
		watched[q] = f
	}
	c.mu.Unlock()
	for q, stats := range watched {
		ctx, cancel := context.WithTimeout(context.Background(), queueStatsTimeout)
		visible, inFlight, err := stats(ctx)
		cancel()
		if err != nil {
			delete(depths, q)
			ch <- prometheus.NewInvalidMetric(c.desc, err)
			continue
		}
		depths[q] = [2]int{visible, inFlight}
	}
	names := make([]string, 0, len(depths))
	for q := range depths {
		names = append(names, q)
	}
	sort.Strings(names)
	for _, q := range names {
		d := depths[q]
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(d[0]), q, metrics.StateVisible)
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(d[1]), q, metrics.StateInFlight)
	}
}

// promLogger adapts slog to promhttp's error log.
type promLogger struct{ log *slog.Logger }

func (l promLogger) Println(v ...any) {
	l.log.Warn("metrics scrape incomplete", slog.Any("err", v))
}
