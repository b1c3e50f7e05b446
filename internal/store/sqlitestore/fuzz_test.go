package sqlitestore

import (
	"errors"
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
