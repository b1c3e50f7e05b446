package sqlitestore

import (
	"errors"
	"slices"
	"testing"

	"github.com/qunfa/qunfa/internal/store"
)

// FuzzCursors decodes arbitrary page cursors (jobs and items use integer
// cursors, suppressions text ones): never a panic, a bad cursor is
// ErrInvalidArgument (the API's 400), and a cursor the store made decodes
// to what it was made of.
func FuzzCursors(f *testing.F) {
	f.Add(encodeCursor("jobs", 1740819600000000000, 42), int64(7), "acct-a", "u1")
	f.Add(encodeCursor("items", 3), int64(-1), "", "")
	f.Add(encodeTextCursor("supp", "acct-a", "u:1"), int64(0), "a\x00", "\"")
	f.Add("eyJ4IjoxfQ", int64(1), "x", "y")
	f.Add("%%%", int64(1), "x", "y")
	f.Fuzz(func(t *testing.T, c string, n int64, a, b string) {
		for kind, parts := range map[string]int{"jobs": 2, "items": 1} {
			if _, err := decodeCursor(c, kind, parts); err != nil && !errors.Is(err, store.ErrInvalidArgument) {
				t.Fatalf("decodeCursor(%q): %v, want ErrInvalidArgument", c, err)
			}
		}
		if _, err := decodeTextCursor(c, "supp"); err != nil && !errors.Is(err, store.ErrInvalidArgument) {
			t.Fatalf("decodeTextCursor(%q): %v", c, err)
		}
		if got, err := decodeCursor(encodeCursor("items", n), "items", 1); err != nil || got[0] != n {
			t.Fatalf("round trip of %d: %v, %v", n, got, err)
		}
		// (JSON replaces invalid UTF-8, so only the decoding is checked.)
		if _, err := decodeTextCursor(encodeTextCursor("supp", a, b), "supp"); err != nil {
			t.Fatalf("round trip of %q %q: %v", a, b, err)
		}
	})
}

// FuzzRunBody decodes arbitrary run bodies and variables, as a damaged
// file would hold them: never a panic; a body that decodes holds n items
// in increasing seqs within runSpan of the first, survives encoding, and
// cuts (as a claim does) into parts that decode to its items.
func FuzzRunBody(f *testing.F) {
	f.Add(int64(7), 3, encodeBody([]entry{{seq: 7, to: "a"}, {seq: 27, to: "b", vars: encodeVars(map[string]string{"k": "v"})}, {seq: 47, msgID: "m"}}), 1)
	f.Add(int64(0), 1, []byte{0, 0, 0, 0}, 1)
	f.Add(int64(5), 2, []byte{0, 1, 'x', 0, 0, 0x80}, 1)
	f.Fuzz(func(t *testing.T, first int64, n int, b []byte, k int) {
		items, err := decodeBody(first, n, b)
		if err != nil {
			if !errors.Is(err, errCorruptRun) {
				t.Fatalf("decodeBody: %v, want errCorruptRun", err)
			}
			return
		}
		if len(items) != n || items[0].seq != first || items[n-1].seq-first > runSpan {
			t.Fatalf("decoded %d items from %d to %d, asked %d from %d", len(items), items[0].seq, items[len(items)-1].seq, n, first)
		}
		for i := 1; i < n; i++ {
			if items[i].seq <= items[i-1].seq {
				t.Fatalf("seqs %d then %d", items[i-1].seq, items[i].seq)
			}
		}
		// (A varint may be longer than it needs: the encoding need not be
		// b itself.)
		if again, err := decodeBody(first, n, encodeBody(items)); err != nil || !slices.Equal(again, items) {
			t.Fatalf("%x decodes to items that do not survive encoding: %v", b, err)
		}
		for _, e := range items {
			if _, err := decodeVars(e.vars); err != nil && !errors.Is(err, errCorruptRun) {
				t.Fatalf("decodeVars: %v", err)
			}
		}
		if n > 1 {
			k = 1 + (k%(n-1)+(n-1))%(n-1)
			raw := rawRun{first: first, n: n, span: items[n-1].seq - first, body: b}
			head, headBody, restFirst, restBody, err := raw.split(k)
			if err != nil || !slices.Equal(head, items[:k]) || restFirst != items[k].seq {
				t.Fatalf("split at %d: %v, %v", k, head, err)
			}
			if got, err := decodeBody(first, k, headBody); err != nil || !slices.Equal(got, items[:k]) {
				t.Fatalf("head at %d: %v", k, err)
			}
			if got, err := decodeBody(restFirst, n-k, restBody); err != nil || !slices.Equal(got, items[k:]) {
				t.Fatalf("rest at %d: %v", k, err)
			}
		}
	})
}
