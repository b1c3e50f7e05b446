package metrics

import (
	"context"
	"log/slog"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
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

// Prometheus is the Recorder of the local stack: it keeps the metrics in
// its own registry and serves them as Prometheus text (Handler).
type Prometheus struct {
	reg          *prometheus.Registry
	sent         *prometheus.CounterVec
	failed       *prometheus.CounterVec
	rateLimited  *prometheus.CounterVec
	latency      *prometheus.HistogramVec
	tokenWait    prometheus.Histogram
	handbacks    prometheus.Counter
	activeShards prometheus.Gauge
	queues       *queueCollector
	log          *slog.Logger
}

var _ Recorder = (*Prometheus)(nil)

// NewPrometheus returns a Prometheus recorder with every qunfa metric
// registered (and at zero where it has no labels). log receives scrape
// errors, such as a watched queue that cannot be read (nil: slog.Default()).
func NewPrometheus(log *slog.Logger) *Prometheus {
	if log == nil {
		log = slog.Default()
	}
	p := &Prometheus{
		reg: prometheus.NewRegistry(),
		sent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MessagesSent, Help: "Recipients the provider accepted.",
		}, []string{LabelAccount}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MessagesFailed, Help: "Recipients the provider refused or left unanswered, by provider category (rate limits excluded).",
		}, []string{LabelAccount, LabelCategory}),
		rateLimited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: RateLimited, Help: "Recipients the provider refused for frequency or concurrency.",
		}, []string{LabelAccount}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: ProviderLatency, Help: "Duration of provider send calls.", Buckets: ProviderLatencyBuckets,
		}, []string{LabelAccount}),
		tokenWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: TokenWait, Help: "Waits for rate-limit tokens.", Buckets: TokenWaitBuckets,
		}),
		handbacks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: Handbacks, Help: "Shard turns handed back to the queue to continue later.",
		}),
		activeShards: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: ActiveShards, Help: "Shard turns being worked.",
		}),
		queues: &queueCollector{
			desc: prometheus.NewDesc(QueueDepth, "Messages in a queue, visible or in flight.", []string{LabelQueue, LabelState}, nil),
			set:  map[string][2]int{},
		},
		log: log,
	}
	p.reg.MustRegister(p.sent, p.failed, p.rateLimited, p.latency, p.tokenWait, p.handbacks, p.activeShards, p.queues)
	return p
}

// Registry is the registry the metrics live in, for adding collectors
// (for example collectors.NewGoCollector()).
func (p *Prometheus) Registry() *prometheus.Registry { return p.reg }

// Handler serves the metrics as Prometheus text, for GET /metrics. A
// watched queue that cannot be read is logged and left out of that scrape.
func (p *Prometheus) Handler() http.Handler {
	return promhttp.HandlerFor(p.reg, promhttp.HandlerOpts{
		ErrorLog:      promLogger{p.log},
		ErrorHandling: promhttp.ContinueOnError,
	})
}

// WatchQueue makes every scrape read the named queue's depth through
// stats, so qunfa_queue_depth is current without anyone calling
// QueueDepth. A watched queue's depth replaces any set by QueueDepth.
func (p *Prometheus) WatchQueue(queue string, stats QueueStatsFunc) {
	p.queues.mu.Lock()
	defer p.queues.mu.Unlock()
	if p.queues.watched == nil {
		p.queues.watched = map[string]QueueStatsFunc{}
	}
	p.queues.watched[queue] = stats
}

// MessagesSent implements Recorder.
func (p *Prometheus) MessagesSent(_ context.Context, account string, n int) {
	if n > 0 {
		p.sent.WithLabelValues(account).Add(float64(n))
	}
}

// MessagesFailed implements Recorder.
func (p *Prometheus) MessagesFailed(_ context.Context, account, category string, n int) {
	if n > 0 {
		p.failed.WithLabelValues(account, category).Add(float64(n))
	}
}

// RateLimited implements Recorder.
func (p *Prometheus) RateLimited(_ context.Context, account string, n int) {
	if n > 0 {
		p.rateLimited.WithLabelValues(account).Add(float64(n))
	}
}

// ProviderLatency implements Recorder.
func (p *Prometheus) ProviderLatency(_ context.Context, account string, d time.Duration) {
	p.latency.WithLabelValues(account).Observe(d.Seconds())
}

// TokenWait implements Recorder.
func (p *Prometheus) TokenWait(_ context.Context, d time.Duration) {
	p.tokenWait.Observe(d.Seconds())
}

// Handback implements Recorder.
func (p *Prometheus) Handback(context.Context) { p.handbacks.Inc() }

// QueueDepth implements Recorder.
func (p *Prometheus) QueueDepth(_ context.Context, queue string, visible, inFlight int) {
	p.queues.mu.Lock()
	p.queues.set[queue] = [2]int{visible, inFlight}
	p.queues.mu.Unlock()
}

// AddActiveShards implements Recorder.
func (p *Prometheus) AddActiveShards(_ context.Context, delta int) {
	p.activeShards.Add(float64(delta))
}

// queueCollector serves qunfa_queue_depth: the depths set through
// QueueDepth, and those of watched queues read at each scrape.
type queueCollector struct {
	desc    *prometheus.Desc
	mu      sync.Mutex
	set     map[string][2]int
	watched map[string]QueueStatsFunc
}

func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	depths := make(map[string][2]int, len(c.set)+len(c.watched))
	for q, d := range c.set {
		depths[q] = d
	}
	watched := make(map[string]QueueStatsFunc, len(c.watched))
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
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(d[0]), q, StateVisible)
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(d[1]), q, StateInFlight)
	}
}

// promLogger adapts slog to promhttp's error log.
type promLogger struct{ log *slog.Logger }

func (l promLogger) Println(v ...any) {
	l.log.Warn("metrics scrape incomplete", slog.Any("err", v))
}
