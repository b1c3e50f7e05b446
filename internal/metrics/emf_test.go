package metrics_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/metrics"
)

var emfEpoch = time.Date(2025, 3, 1, 9, 0, 0, 0, time.UTC)

// emfDoc is one parsed EMF line, checked against the specification.
type emfDoc struct {
	root    map[string]any
	dims    map[string]string
	metrics map[string][]float64 // every value, a scalar as one
	units   map[string]string
}

// parseEMF parses the lines and checks each is a valid EMF document: a
// JSON object with _aws.Timestamp and CloudWatchMetrics directives whose
// dimensions are string members and whose metrics are numeric members
// (a number or at most 100 numbers).
func parseEMF(t *testing.T, out []byte) []emfDoc {
	t.Helper()
	var docs []emfDoc
	for _, line := range strings.Split(strings.TrimSuffix(string(out), "\n"), "\n") {
		if line == "" {
			continue
		}
		var root map[string]any
		if err := json.Unmarshal([]byte(line), &root); err != nil {
			t.Fatalf("EMF line is not a JSON object: %v\n%s", err, line)
		}
		aws, ok := root["_aws"].(map[string]any)
		if !ok {
			t.Fatalf("no _aws object: %s", line)
		}
		if ts, ok := aws["Timestamp"].(float64); !ok || int64(ts) != emfEpoch.UnixMilli() {
			t.Errorf("_aws.Timestamp = %v, want %d", aws["Timestamp"], emfEpoch.UnixMilli())
		}
		directives, ok := aws["CloudWatchMetrics"].([]any)
		if !ok || len(directives) == 0 {
			t.Fatalf("no CloudWatchMetrics directives: %s", line)
		}
		d := emfDoc{root: root, dims: map[string]string{}, metrics: map[string][]float64{}, units: map[string]string{}}
		for _, raw := range directives {
			dir := raw.(map[string]any)
			if ns, _ := dir["Namespace"].(string); ns == "" {
				t.Errorf("directive without a Namespace: %s", line)
			}
			sets, ok := dir["Dimensions"].([]any)
			if !ok || len(sets) == 0 {
				t.Fatalf("directive without Dimensions: %s", line)
			}
			for _, set := range sets {
				keys := set.([]any)
				if len(keys) == 0 || len(keys) > 30 {
					t.Errorf("dimension set of %d keys: %s", len(keys), line)
				}
				for _, k := range keys {
					v, ok := root[k.(string)].(string)
					if !ok {
						t.Errorf("dimension %q is not a string member of the root: %s", k, line)
					}
					d.dims[k.(string)] = v
				}
			}
			ms, ok := dir["Metrics"].([]any)
			if !ok || len(ms) == 0 || len(ms) > 100 {
				t.Fatalf("directive with %d metrics: %s", len(ms), line)
			}
			for _, raw := range ms {
				m := raw.(map[string]any)
				name, _ := m["Name"].(string)
				unit, _ := m["Unit"].(string)
				if unit != "Count" && unit != "Seconds" {
					t.Errorf("metric %q has unit %q", name, unit)
				}
				d.units[name] = unit
				switch v := root[name].(type) {
				case float64:
					d.metrics[name] = []float64{v}
				case []any:
					if len(v) == 0 || len(v) > 100 {
						t.Errorf("metric %q has %d values", name, len(v))
					}
					for _, x := range v {
						f, ok := x.(float64)
						if !ok {
							t.Errorf("metric %q has a non-numeric value %v", name, x)
						}
						d.metrics[name] = append(d.metrics[name], f)
					}
				default:
					t.Errorf("metric %q is not a numeric member of the root: %s", name, line)
				}
			}
		}
		docs = append(docs, d)
	}
	return docs
}

// find returns the values of name in the document with exactly dims
// (besides the static ones).
func find(docs []emfDoc, name string, dims map[string]string) []float64 {
	var out []float64
	for _, d := range docs {
		match := true
		for k, v := range dims {
			if d.dims[k] != v {
				match = false
			}
		}
		if match && len(d.dims) == len(dims)+1 { // + the static dimension
			out = append(out, d.metrics[name]...)
		}
	}
	return out
}

func TestEMFDocuments(t *testing.T) {
	ctx := context.Background()
	var out bytes.Buffer
	e := metrics.NewEMF(&out, metrics.EMFOptions{Clock: clock.NewFake(emfEpoch), Dimensions: map[string]string{"function": "qunfa-sender"}})
	e.MessagesSent(ctx, "acct-a", 3)
	e.MessagesSent(ctx, "acct-a", 2)
	e.MessagesSent(ctx, "acct-b", 1)
	e.MessagesFailed(ctx, "acct-a", "permanent", 2)
	e.RateLimited(ctx, "acct-a", 4)
	e.ProviderLatency(ctx, "acct-a", 40*time.Millisecond)
	e.ProviderLatency(ctx, "acct-a", 1500*time.Millisecond)
	e.TokenWait(ctx, 250*time.Millisecond)
	e.Handback(ctx)
	e.QueueDepth(ctx, "work", 7, 2)
	e.AddActiveShards(ctx, 1)
	e.AddActiveShards(ctx, 1)
	e.AddActiveShards(ctx, -1)
	if err := e.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	docs := parseEMF(t, out.Bytes())
	for _, d := range docs {
		if d.dims["function"] != "qunfa-sender" {
			t.Errorf("document without the static dimension: %v", d.root)
		}
		if ns := d.root["_aws"].(map[string]any)["CloudWatchMetrics"].([]any)[0].(map[string]any)["Namespace"]; ns != "qunfa" {
			t.Errorf("namespace %v", ns)
		}
	}
	a := map[string]string{"account": "acct-a"}
	for _, c := range []struct {
		name string
		dims map[string]string
		want []float64
	}{
		{metrics.MessagesSent, a, []float64{5}},
		{metrics.MessagesSent, map[string]string{"account": "acct-b"}, []float64{1}},
		{metrics.MessagesFailed, map[string]string{"account": "acct-a", "category": "permanent"}, []float64{2}},
		{metrics.RateLimited, a, []float64{4}},
		{metrics.ProviderLatency, a, []float64{0.04, 1.5}},
		{metrics.TokenWait, nil, []float64{0.25}},
		{metrics.Handbacks, nil, []float64{1}},
		{metrics.QueueDepth, map[string]string{"queue": "work", "state": "visible"}, []float64{7}},
		{metrics.QueueDepth, map[string]string{"queue": "work", "state": "in_flight"}, []float64{2}},
		{metrics.ActiveShards, nil, []float64{2}}, // the most at once
	} {
		if got := find(docs, c.name, c.dims); !slices.Equal(got, c.want) {
			t.Errorf("%s %v = %v, want %v", c.name, c.dims, got, c.want)
		}
	}
	for _, d := range docs {
		for name, unit := range d.units {
			if want := map[bool]string{true: "Seconds", false: "Count"}[strings.HasSuffix(name, "_seconds")]; unit != want {
				t.Errorf("%s: unit %s, want %s", name, unit, want)
			}
		}
	}

	// A flush starts over: only the one shard still worked is reported.
	out.Reset()
	if err := e.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	docs = parseEMF(t, out.Bytes())
	if len(docs) != 1 || !slices.Equal(find(docs, metrics.ActiveShards, nil), []float64{1}) || len(docs[0].metrics) != 1 {
		t.Errorf("second flush: %+v", docs)
	}
	e.AddActiveShards(ctx, -1)
	out.Reset()
	_ = e.Flush(ctx) // reports the drop to 0 once
	_ = e.Flush(ctx)
	docs = parseEMF(t, out.Bytes())
	if len(docs) != 1 || !slices.Equal(find(docs, metrics.ActiveShards, nil), []float64{1}) {
		t.Errorf("after the last shard ended: %+v", docs)
	}
	out.Reset()
	if err := e.Flush(ctx); err != nil || out.Len() != 0 {
		t.Errorf("an idle flush wrote %q (%v)", out.String(), err)
	}
}

// More than 100 observations spread over several documents, none lost.
func TestEMFManyObservations(t *testing.T) {
	ctx := context.Background()
	var out bytes.Buffer
	e := metrics.NewEMF(&out, metrics.EMFOptions{Clock: clock.NewFake(emfEpoch)})
	for i := range 250 {
		e.ProviderLatency(ctx, "acct-a", time.Duration(i)*time.Millisecond)
	}
	e.MessagesSent(ctx, "acct-a", 250)
	if err := e.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	docs := parseEMF(t, out.Bytes())
	if len(docs) != 3 {
		t.Fatalf("%d documents, want 3", len(docs))
	}
	got := find(docs, metrics.ProviderLatency, map[string]string{"account": "acct-a"})
	if len(got) != 250 || got[249] != 0.249 {
		t.Errorf("%d values (last %v), want 250", len(got), got[len(got)-1])
	}
	if sent := find(docs, metrics.MessagesSent, map[string]string{"account": "acct-a"}); !slices.Equal(sent, []float64{250}) {
		t.Errorf("sent %v: a counter was repeated across documents", sent)
	}
	if docs[0].dims["service"] != "qunfa" {
		t.Errorf("default static dimension missing: %v", docs[0].dims)
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("stdout closed") }

func TestFlushAfter(t *testing.T) {
	ctx := context.Background()
	var out bytes.Buffer
	e := metrics.NewEMF(&out, metrics.EMFOptions{Clock: clock.NewFake(emfEpoch)})
	h := metrics.FlushAfter(e, nil, func(ctx context.Context, n int) (string, error) {
		e.MessagesSent(ctx, "acct-a", n)
		if n == 0 {
			return "", errors.New("handler failed")
		}
		return fmt.Sprint(n), nil
	})
	if got, err := h(ctx, 3); got != "3" || err != nil {
		t.Fatalf("h = %q, %v", got, err)
	}
	if got := find(parseEMF(t, out.Bytes()), metrics.MessagesSent, map[string]string{"account": "acct-a"}); !slices.Equal(got, []float64{3}) {
		t.Errorf("flushed %v, want [3]", got)
	}
	// The handler's error comes through; a failing flush does not fail the
	// invocation.
	broken := metrics.NewEMF(failingWriter{}, metrics.EMFOptions{Clock: clock.NewFake(emfEpoch)})
	hb := metrics.FlushAfter(broken, nil, func(ctx context.Context, n int) (int, error) {
		broken.Handback(ctx)
		return n, nil
	})
	if got, err := hb(ctx, 1); got != 1 || err != nil {
		t.Errorf("with a failing flush: %v, %v", got, err)
	}
	if err := broken.Flush(ctx); err != nil {
		t.Errorf("the failed flush left data behind: %v", err)
	}
	broken.Handback(ctx)
	if err := broken.Flush(ctx); err == nil {
		t.Error("Flush hid a write error")
	}
}

func TestNopIsRecorder(t *testing.T) {
	var r metrics.Recorder = metrics.Nop{}
	r.MessagesSent(context.Background(), "a", 1)
	r.AddActiveShards(context.Background(), 1)
}
