package sender

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/qunfa/qunfa/internal/alert"
	"github.com/qunfa/qunfa/internal/alert/alerttest"
	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/store"
)

var outcomesT0 = time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)

// TestOutcomeSizeBoundsItsJSON: outcomeSize never counts an outcome
// smaller than its JSON, whatever the length of each field, so that an
// event filled to maxOutcomesBytes stays within one 64 KB EventBridge
// chunk; and it counts a full outcome at most 64 bytes more than its JSON,
// so that events are not sent half empty.
func TestOutcomeSizeBoundsItsJSON(t *testing.T) {
	t.Parallel()
	// Characters JSON writes as they are (outcomeSize counts each once).
	// Every length is as likely as the longest, which rapid would seldom
	// draw otherwise.
	field := func(min, max int) *rapid.Generator[string] {
		return rapid.Custom(func(t *rapid.T) string {
			n := rapid.OneOf(rapid.IntRange(min, max), rapid.Just(max)).Draw(t, "len")
			return string(rapid.SliceOfN(rapid.RuneFrom([]rune("abcxyz0189-_.:@")), n, n).Draw(t, "runes"))
		})
	}
	rapid.Check(t, func(t *rapid.T) {
		o := alert.ItemOutcome{
			Seq:      rapid.Int64Range(0, 1<<40).Draw(t, "seq"),
			Account:  field(1, 300).Draw(t, "account"),
			To:       field(1, 300).Draw(t, "to"),
			Ref:      field(0, 300).Draw(t, "ref"),
			Status:   rapid.SampledFrom([]string{string(store.ItemConfirmed), string(store.ItemFailed), string(store.ItemAbandoned)}).Draw(t, "status"),
			Category: field(0, 300).Draw(t, "category"),
			Code:     field(0, 300).Draw(t, "code"),
			MsgID:    field(0, 300).Draw(t, "msgid"),
			At:       outcomesT0.Add(time.Duration(rapid.Int64Range(0, int64(400*24*time.Hour)).Draw(t, "at"))),
		}
		b, err := json.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		if got := outcomeSize(o); got < len(b) {
			t.Fatalf("outcomeSize %d < its JSON's %d bytes: %s", got, len(b), b)
		}
		if o.Ref != "" && o.Category != "" && o.Code != "" && o.MsgID != "" {
			if got := outcomeSize(o); got > len(b)+64 {
				t.Fatalf("outcomeSize %d > its JSON's %d bytes + 64: %s", got, len(b), b)
			}
		}
	})
}

// outcomesTurn is a turn of job "j" of tenant "t" whose outcomes go to a
// recorder, on a fake clock.
func outcomesTurn() (*turn, *alerttest.Recorder, *clock.Fake) {
	clk := clock.NewFake(outcomesT0)
	rec := &alerttest.Recorder{}
	tr := &turn{s: &Sender{Clock: clk, Outcomes: rec}, job: store.Job{ID: "j", Tenant: "t"}, log: slog.New(slog.DiscardHandler)}
	return tr, rec, clk
}

// outcomesOfSize are n outcomes, seq from first, at t, each of
// outcomeSize size bytes (at least 200).
func outcomesOfSize(first int64, n, size int, at time.Time) []alert.ItemOutcome {
	out := make([]alert.ItemOutcome, n)
	for i := range out {
		o := alert.ItemOutcome{Seq: first + int64(i), Account: "a", Status: string(store.ItemConfirmed), At: at}
		o.To = strings.Repeat("x", size-outcomeSize(o))
		out[i] = o
	}
	return out
}

// eventSeqs are the seqs of each ItemOutcomes event's items, and the
// outcomeSize sum of each event.
func eventSeqs(t *testing.T, rec *alerttest.Recorder) (seqs [][]int64, sizes []int) {
	t.Helper()
	for _, ev := range rec.Of(alert.ItemOutcomes) {
		d, ok := ev.Detail.(alert.ItemOutcomesDetail)
		if !ok || d.JobID != "j" || ev.Tenant != "t" {
			t.Fatalf("event %+v: want the outcomes of job j of tenant t", ev)
		}
		var s []int64
		size := 0
		for _, o := range d.Items {
			s = append(s, o.Seq)
			size += outcomeSize(o)
		}
		seqs, sizes = append(seqs, s), append(sizes, size)
	}
	return seqs, sizes
}

// TestFlushOutcomesFillsEventsToTheBound: the held outcomes go out in
// order, every one once, in events each filled up to maxOutcomesBytes and
// no more: outcomes that fill an event exactly go in one event.
func TestFlushOutcomesFillsEventsToTheBound(t *testing.T) {
	t.Parallel()
	const size = 256 // maxOutcomesBytes is a multiple
	per := maxOutcomesBytes / size
	tr, rec, clk := outcomesTurn()
	tr.holdOutcomes(clk.Now(), outcomesOfSize(0, 2*per+7, size, clk.Now())...)
	if !tr.flushOutcomes(context.Background()) {
		t.Fatal("flushOutcomes failed with a publisher that accepts everything")
	}
	seqs, sizes := eventSeqs(t, rec)
	if len(seqs) != 3 || len(seqs[0]) != per || len(seqs[1]) != per || len(seqs[2]) != 7 {
		t.Fatalf("events of %v outcomes (sizes %v), want %d, %d and 7 (%d bytes each at most)", lens(seqs), sizes, per, per, maxOutcomesBytes)
	}
	next := int64(0)
	for _, s := range seqs {
		for _, seq := range s {
			if seq != next {
				t.Fatalf("seq %d published where %d was due: %v", seq, next, seqs)
			}
			next++
		}
	}
	if len(tr.heldOutcomes) != 0 || tr.heldBytes != 0 {
		t.Errorf("after the flush %d outcomes (%d bytes) still held", len(tr.heldOutcomes), tr.heldBytes)
	}
}

func lens(s [][]int64) []int {
	var out []int
	for _, x := range s {
		out = append(out, len(x))
	}
	return out
}

// TestFlushOutcomesDueAtTheBoundAndTheHold: held outcomes are published
// as soon as they fill an event (exactly maxOutcomesBytes), or the first
// has waited exactly outcomesMaxHold; not a moment or a byte before.
func TestFlushOutcomesDueAtTheBoundAndTheHold(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("full", func(t *testing.T) {
		tr, rec, clk := outcomesTurn()
		per := maxOutcomesBytes / 256
		tr.holdOutcomes(clk.Now(), outcomesOfSize(0, per-1, 256, clk.Now())...)
		tr.flushOutcomesDue(ctx)
		if n := len(rec.Of(alert.ItemOutcomes)); n != 0 {
			t.Fatalf("%d events published one outcome short of a full event", n)
		}
		tr.holdOutcomes(clk.Now(), outcomesOfSize(int64(per-1), 1, 256, clk.Now())...)
		tr.flushOutcomesDue(ctx)
		if seqs, _ := eventSeqs(t, rec); len(seqs) != 1 || len(seqs[0]) != per {
			t.Fatalf("a full event's outcomes (%d bytes) published as events of %v, want one of %d", tr.heldBytes, lens(seqs), per)
		}
	})
	t.Run("held long enough", func(t *testing.T) {
		tr, rec, clk := outcomesTurn()
		tr.holdOutcomes(clk.Now(), outcomesOfSize(0, 3, 256, clk.Now())...)
		clk.Advance(outcomesMaxHold - time.Nanosecond)
		tr.holdOutcomes(clk.Now(), outcomesOfSize(3, 1, 256, clk.Now())...)
		tr.flushOutcomesDue(ctx)
		if n := len(rec.Of(alert.ItemOutcomes)); n != 0 {
			t.Fatalf("%d events published before the first outcome was held %v", n, outcomesMaxHold)
		}
		clk.Advance(time.Nanosecond)
		tr.flushOutcomesDue(ctx)
		if seqs, _ := eventSeqs(t, rec); len(seqs) != 1 || len(seqs[0]) != 4 {
			t.Fatalf("outcomes held %v published as events of %v, want one of 4", outcomesMaxHold, lens(seqs))
		}
	})
}

// TestOutcomesWatermarkIsBeforeTheFirstHeld: the watermark a fold records
// is before the earliest outcome held (that outcome is not out yet, so a
// replay from the watermark must include it), and now when nothing is held.
func TestOutcomesWatermarkIsBeforeTheFirstHeld(t *testing.T) {
	t.Parallel()
	tr, _, clk := outcomesTurn()
	now := clk.Now().Add(time.Minute)
	if got := tr.outcomesWatermark(now); !got.Equal(now) {
		t.Fatalf("watermark with nothing held %v, want now %v", got, now)
	}
	first := clk.Now().Add(time.Second)
	tr.holdOutcomes(clk.Now(), outcomesOfSize(0, 1, 256, first.Add(time.Second))...)
	tr.holdOutcomes(clk.Now(), outcomesOfSize(1, 1, 256, first)...)
	tr.holdOutcomes(clk.Now(), outcomesOfSize(2, 1, 256, first.Add(2*time.Second))...)
	if got := tr.outcomesWatermark(now); !got.Before(first) || got.Before(first.Add(-time.Millisecond)) {
		t.Fatalf("watermark %v, want just before the earliest held outcome at %v", got, first)
	}
	tr.s.Outcomes = nil
	if got := tr.outcomesWatermark(now); !got.IsZero() {
		t.Fatalf("watermark without a publisher %v, want zero (the shard's stays)", got)
	}
}
