package alert

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
)

// Log is a Publisher that writes one slog record per event: message
// "alert", attributes type, tenant, event_time (when set; "time" is the
// handler's own) and a "detail" group holding the detail's JSON fields. Only the fields of the published
// schema (DetailJSON) reach the log, the same ones EventBridge gets; the
// detail types carry no secrets, recipients or message bodies.
type Log struct {
	logger *slog.Logger
}

var _ Publisher = (*Log)(nil)

// NewLog returns a Log publisher writing to logger (slog.Default if nil).
func NewLog(logger *slog.Logger) *Log {
	if logger == nil {
		logger = slog.Default()
	}
	return &Log{logger: logger}
}

// Level is the slog level Log uses for an event type: Info for the
// ordinary course of a job, Warn for what an operator should look at,
// Error for what means qunfa itself may be wrong.
func Level(t Type) slog.Level {
	switch t {
	case JobStarted, JobFinished, BreakerClosed:
		return slog.LevelInfo
	case CountsMismatch:
		return slog.LevelError
	default:
		return slog.LevelWarn
	}
}

// Publish logs each event. An event whose detail cannot be rendered is
// still logged (without the detail) and its error returned.
func (l *Log) Publish(ctx context.Context, events ...Event) error {
	var errs []error
	for _, e := range events {
		attrs := []slog.Attr{
			slog.String("type", string(e.Type)),
			slog.String("tenant", e.Tenant),
		}
		if !e.Time.IsZero() {
			attrs = append(attrs, slog.Time("event_time", e.Time))
		}
		detail, err := detailAttrs(e)
		if err != nil {
			errs = append(errs, err)
			attrs = append(attrs, slog.String("detail_error", err.Error()))
		} else if len(detail) > 0 {
			attrs = append(attrs, slog.Attr{Key: "detail", Value: slog.GroupValue(detail...)})
		}
		l.logger.LogAttrs(ctx, Level(e.Type), "alert", attrs...)
	}
	return errors.Join(errs...)
}

// detailAttrs turns the detail's JSON fields (without the tenant, which is
// its own attribute) into attributes sorted by name.
func detailAttrs(e Event) ([]slog.Attr, error) {
	raw, err := DetailJSON(e)
	if err != nil {
		return nil, err
	}
	var fields map[string]any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&fields); err != nil {
		return nil, fmt.Errorf("%s detail: %w", e.Type, err)
	}
	delete(fields, "tenant")
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	attrs := make([]slog.Attr, 0, len(keys))
	for _, k := range keys {
		attrs = append(attrs, jsonAttr(k, fields[k]))
	}
	return attrs, nil
}

// jsonAttr maps a decoded JSON value to an attribute; objects become groups
// so handlers render them as nested fields.
func jsonAttr(key string, v any) slog.Attr {
	switch v := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		group := make([]slog.Attr, 0, len(keys))
		for _, k := range keys {
			group = append(group, jsonAttr(k, v[k]))
		}
		return slog.Attr{Key: key, Value: slog.GroupValue(group...)}
	case json.Number:
		if n, err := v.Int64(); err == nil {
			return slog.Int64(key, n)
		}
		if f, err := v.Float64(); err == nil {
			return slog.Float64(key, f)
		}
		return slog.String(key, v.String())
	default:
		return slog.Any(key, v)
	}
}
