package sqlitestore

import (
	"errors"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// TestRunBodyRoundTrip: a run's items come back from their encoding as
// they went in, and a body cut short, with bytes left over, or with seqs
// not increasing or past runSpan is refused, never misread.
func TestRunBodyRoundTrip(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(1, runMax).Draw(rt, "n")
		first := rapid.Int64Range(0, 1<<40).Draw(rt, "first")
		items := []entry{{seq: first}}
		for len(items) < n {
			next := items[len(items)-1].seq + rapid.Int64Range(1, 40).Draw(rt, "gap")
			if next-first > runSpan {
				break
			}
			items = append(items, entry{seq: next})
		}
		for i := range items {
			items[i].to = rapid.StringN(0, 40, -1).Draw(rt, "to")
			items[i].vars = rapid.SampledFrom([]string{"", `{"name":"x"}`}).Draw(rt, "vars")
			items[i].msgID = rapid.SampledFrom([]string{"", "m-1", "msg-with-a-longer-id"}).Draw(rt, "msgid")
		}
		b := encodeBody(items)
		got, err := decodeBody(first, len(items), b)
		if err != nil || !slices.Equal(got, items) {
			rt.Fatalf("round trip of %d items: %v, %v", len(items), got, err)
		}
		if _, err := decodeBody(first, len(items)+1, b); !errors.Is(err, errCorruptRun) {
			rt.Fatalf("one item more than encoded: %v", err)
		}
		if len(items) > 1 {
			if _, err := decodeBody(first, len(items)-1, b); !errors.Is(err, errCorruptRun) {
				rt.Fatalf("one item fewer than encoded: %v", err)
			}
		}
		if cut := rapid.IntRange(0, len(b)-1).Draw(rt, "cut"); true {
			if _, err := decodeBody(first, len(items), b[:cut]); !errors.Is(err, errCorruptRun) {
				rt.Fatalf("body cut at %d of %d: %v", cut, len(b), err)
			}
		}
	})
	for name, items := range map[string][]entry{
		"repeated seq":  {{seq: 5}, {seq: 5}},
		"past the span": {{seq: 5}, {seq: 6 + runSpan}},
	} {
		if _, err := decodeBody(5, len(items), encodeBody(items)); !errors.Is(err, errCorruptRun) {
			t.Errorf("%s: %v, want errCorruptRun", name, err)
		}
	}
}

// TestFormRuns: items of equal state form runs of at most runMax items
// and runSpan seqs; a change of state, and an item with a ref, start a
// new run.
func TestFormRuns(t *testing.T) {
	fresh := runState{account: "a"}
	var items []flat
	for seq := int64(0); seq < 300; seq++ {
		items = append(items, flat{st: fresh, e: entry{seq: seq * 20}})
	}
	items[10].st.status = codeConfirmed
	items[11].st.ref = "r"
	items[12].st.ref = "r"
	var sizes []int
	for _, r := range formRuns(0, items) {
		if r.last()-r.first() > runSpan {
			t.Fatalf("run from %d spans %d", r.first(), r.last()-r.first())
		}
		sizes = append(sizes, len(r.items))
	}
	// 0-9, 10 (confirmed), 11 and 12 (refs), then 287 items in runs of at
	// most runSpan/20+1 = 205 seqs' worth, at most runMax.
	if want := []int{10, 1, 1, 1, 128, 128, 31}; !slices.Equal(sizes, want) {
		t.Fatalf("runs of %v items, want %v", sizes, want)
	}
	var spread []flat
	for seq := int64(0); seq < 10; seq++ {
		spread = append(spread, flat{st: fresh, e: entry{seq: seq * 1000}})
	}
	sizes = sizes[:0]
	for _, r := range formRuns(0, spread) {
		sizes = append(sizes, len(r.items))
	}
	if want := []int{5, 5}; !slices.Equal(sizes, want) {
		t.Fatalf("items 1000 apart: runs of %v, want %v (at most %d seqs a run)", sizes, want, runSpan)
	}
}
