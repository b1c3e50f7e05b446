package metrics

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/qunfa/qunfa/internal/clock"
)

// EMF limits: values of one metric in one document, and metrics in one
// directive.
const (
	emfMaxValues  = 100
	emfMaxMetrics = 100
)

// EMFOptions configures an EMF recorder.
type EMFOptions struct {
	// Namespace of the CloudWatch metrics (default "qunfa").
	Namespace string
	// Dimensions are added to every metric, for example
	// {"function": os.Getenv("AWS_LAMBDA_FUNCTION_NAME")} (default
	// {"service": "qunfa"}, so no metric is left without a dimension).
	Dimensions map[string]string
	// Clock stamps each document (default clock.System{}).
	Clock clock.Clock
}

// EMF is the Recorder of the Lambda functions: it buffers what is
// recorded and Flush writes it as CloudWatch Embedded Metric Format
// documents, one JSON line per set of dimension values, to its writer
// (the function's stdout, which CloudWatch Logs reads). Counters are the
// sums since the last flush, histograms the observed values (at most 100 a
// document, more spread over further documents), queue depths the last
// value set, and active shards the most worked at once since the last
// flush.
type EMF struct {
	opts EMFOptions

	mu     sync.Mutex
	w      io.Writer
	series map[string]*emfSeries // by dimension values
	active int                   // shard turns being worked now
	peak   int                   // most since the last flush
	moved  bool                  // active changed since the last flush
}

var _ Recorder = (*EMF)(nil)

// emfSeries is what one set of dimension values accumulated.
type emfSeries struct {
	dims    map[string]string
	counts  map[string]float64
	values  map[string][]float64
	gauges  map[string]float64
	ordered []string // metric names in first-recorded order
}

// NewEMF returns an EMF recorder writing to w.
func NewEMF(w io.Writer, opts EMFOptions) *EMF {
	if opts.Namespace == "" {
		opts.Namespace = "qunfa"
	}
	if len(opts.Dimensions) == 0 {
		opts.Dimensions = map[string]string{"service": "qunfa"}
	}
	if opts.Clock == nil {
		opts.Clock = clock.System{}
	}
	return &EMF{opts: opts, w: w, series: map[string]*emfSeries{}}
}

// seriesFor returns the series of the given label pairs; e.mu is held.
func (e *EMF) seriesFor(labels ...string) *emfSeries {
	var key strings.Builder
	for i := 0; i+1 < len(labels); i += 2 {
		fmt.Fprintf(&key, "%q=%q,", labels[i], labels[i+1])
	}
	s := e.series[key.String()]
	if s == nil {
		s = &emfSeries{dims: map[string]string{}, counts: map[string]float64{}, values: map[string][]float64{}, gauges: map[string]float64{}}
		for i := 0; i+1 < len(labels); i += 2 {
			s.dims[labels[i]] = labels[i+1]
		}
		e.series[key.String()] = s
	}
	return s
}

func (s *emfSeries) note(name string) {
	if !slices.Contains(s.ordered, name) {
		s.ordered = append(s.ordered, name)
	}
}

func (e *EMF) count(name string, n float64, labels ...string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.seriesFor(labels...)
	s.counts[name] += n
	s.note(name)
}

func (e *EMF) observe(name string, v float64, labels ...string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.seriesFor(labels...)
	s.values[name] = append(s.values[name], v)
	s.note(name)
}

// MessagesSent implements Recorder.
func (e *EMF) MessagesSent(_ context.Context, account string, n int) {
	if n > 0 {
		e.count(MessagesSent, float64(n), LabelAccount, account)
	}
}

// MessagesFailed implements Recorder.
func (e *EMF) MessagesFailed(_ context.Context, account, category string, n int) {
	if n > 0 {
		e.count(MessagesFailed, float64(n), LabelAccount, account, LabelCategory, category)
	}
}

// RateLimited implements Recorder.
func (e *EMF) RateLimited(_ context.Context, account string, n int) {
	if n > 0 {
		e.count(RateLimited, float64(n), LabelAccount, account)
	}
}

// ProviderLatency implements Recorder.
func (e *EMF) ProviderLatency(_ context.Context, account string, d time.Duration) {
	e.observe(ProviderLatency, d.Seconds(), LabelAccount, account)
}

// TokenWait implements Recorder.
func (e *EMF) TokenWait(_ context.Context, d time.Duration) {
	e.observe(TokenWait, d.Seconds())
}

// Handback implements Recorder.
func (e *EMF) Handback(context.Context) { e.count(Handbacks, 1) }

// QueueDepth implements Recorder.
func (e *EMF) QueueDepth(_ context.Context, queue string, visible, inFlight int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for state, n := range map[string]int{StateVisible: visible, StateInFlight: inFlight} {
		s := e.seriesFor(LabelQueue, queue, LabelState, state)
		s.gauges[QueueDepth] = float64(n)
		s.note(QueueDepth)
	}
}

// OldestSubmittedAge sets the age of the oldest item left submitted (the
// reconciler's gauge).
func (e *EMF) OldestSubmittedAge(_ context.Context, d time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.seriesFor()
	s.gauges[OldestSubmitted] = d.Seconds()
	s.note(OldestSubmitted)
}

// AccountSizing implements SizingRecorder.
func (e *EMF) AccountSizing(_ context.Context, account string, batchSize, concurrency int, p99 time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.seriesFor(LabelAccount, account)
	s.gauges[AccountBatchSize] = float64(batchSize)
	s.gauges[AccountConcurrency] = float64(concurrency)
	s.gauges[AccountP99Latency] = p99.Seconds()
	s.note(AccountBatchSize)
	s.note(AccountConcurrency)
	s.note(AccountP99Latency)
}

var _ SizingRecorder = (*EMF)(nil)

// OldestStuckShardAge sets how long the stalest re-driven shard had gone
// without progress (the reconciler's gauge).
func (e *EMF) OldestStuckShardAge(_ context.Context, d time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.seriesFor()
	s.gauges[OldestStuckShard] = d.Seconds()
	s.note(OldestStuckShard)
}

// AddActiveShards implements Recorder.
func (e *EMF) AddActiveShards(_ context.Context, delta int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.active += delta
	e.peak = max(e.peak, e.active)
	e.moved = true
}

// Flush writes everything recorded since the last flush and starts over.
// Call it at the end of every invocation (FlushAfter does), and whenever a
// long invocation should report early.
func (e *EMF) Flush(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.moved || e.active > 0 {
		s := e.seriesFor()
		s.gauges[ActiveShards] = float64(e.peak)
		s.note(ActiveShards)
	}
	var buf bytes.Buffer
	ts := e.opts.Clock.Now().UnixMilli()
	keys := slices.Sorted(maps.Keys(e.series))
	for _, k := range keys {
		for _, doc := range e.documents(e.series[k], ts) {
			b, err := json.Marshal(doc)
			if err != nil {
				return fmt.Errorf("metrics: encode EMF document: %w", err)
			}
			buf.Write(b)
			buf.WriteByte('\n')
		}
	}
	e.series = map[string]*emfSeries{}
	e.peak, e.moved = e.active, false
	if buf.Len() == 0 {
		return nil
	}
	if _, err := e.w.Write(buf.Bytes()); err != nil {
		return fmt.Errorf("metrics: write EMF: %w", err)
	}
	return nil
}

// documents renders one series as EMF documents: the first holds every
// metric, further ones the histogram values beyond 100 per document.
func (e *EMF) documents(s *emfSeries, ts int64) []map[string]any {
	dimKeys := slices.Sorted(maps.Keys(e.opts.Dimensions))
	for _, k := range slices.Sorted(maps.Keys(s.dims)) {
		if !slices.Contains(dimKeys, k) {
			dimKeys = append(dimKeys, k)
		}
	}
	var docs []map[string]any
	offset := 0
	for {
		doc := map[string]any{}
		var metrics []map[string]string
		for _, name := range s.ordered {
			if len(metrics) == emfMaxMetrics {
				break
			}
			var v any
			if vals, ok := s.values[name]; ok {
				if offset >= len(vals) {
					continue
				}
				v = vals[offset:min(len(vals), offset+emfMaxValues)]
			} else if offset > 0 {
				continue
			} else if c, ok := s.counts[name]; ok {
				v = c
			} else if g, ok := s.gauges[name]; ok {
				v = g
			} else {
				continue
			}
			doc[name] = v
			metrics = append(metrics, map[string]string{"Name": name, "Unit": unitOf(name)})
		}
		if len(metrics) == 0 {
			return docs
		}
		for k, v := range e.opts.Dimensions {
			doc[k] = v
		}
		for k, v := range s.dims {
			doc[k] = v
		}
		doc["_aws"] = map[string]any{
			"Timestamp": ts,
			"CloudWatchMetrics": []map[string]any{{
				"Namespace":  e.opts.Namespace,
				"Dimensions": [][]string{dimKeys},
				"Metrics":    metrics,
			}},
		}
		docs = append(docs, doc)
		offset += emfMaxValues
	}
}

// unitOf is the CloudWatch unit of a metric.
func unitOf(name string) string {
	if strings.HasSuffix(name, "_seconds") {
		return "Seconds"
	}
	return "Count"
}

// FlushAfter wraps a Lambda handler so that e is flushed at the end of
// every invocation, whatever the handler returned. A failed flush is
// logged to log (nil: slog.Default()), never returned: metrics do not fail
// an invocation.
func FlushAfter[In, Out any](e *EMF, log *slog.Logger, h func(context.Context, In) (Out, error)) func(context.Context, In) (Out, error) {
	if log == nil {
		log = slog.Default()
	}
	return func(ctx context.Context, in In) (Out, error) {
		out, err := h(ctx, in)
		if ferr := e.Flush(context.WithoutCancel(ctx)); ferr != nil {
			log.Warn("metrics flush failed", slog.Any("err", ferr))
		}
		return out, err
	}
}
