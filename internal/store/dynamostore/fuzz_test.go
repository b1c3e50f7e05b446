package dynamostore

import (
	"errors"
	"testing"

	"github.com/qunfa/qunfa/internal/store"
)

// FuzzCursor decodes arbitrary (tampered) page cursors: never a panic, a
// bad one is ErrInvalidArgument (the API's 400, not a 500), a good one
// gives back the key it was made from.
func FuzzCursor(f *testing.F) {
	good, _ := encodeCursor(keyCursor{"pk": "T#tenant-a", "sk": "J#01"})
	f.Add(good, "pk", "T#x")
	f.Add("eyJwayI6MX0", "sk", "")
	f.Add("bnVsbA", "", "")
	f.Add("W10", "a", "b")
	f.Add("!!", "a", "b")
	f.Fuzz(func(t *testing.T, c, k, v string) {
		var kc keyCursor
		if err := decodeCursor(c, &kc); err != nil {
			if !errors.Is(err, store.ErrInvalidArgument) {
				t.Fatalf("decodeCursor(%q): %v, want ErrInvalidArgument", c, err)
			}
			return
		}
		_ = kc.key()
		enc, err := encodeCursor(keyCursor{k: v})
		if err != nil {
			t.Fatal(err)
		}
		var back keyCursor
		if err := decodeCursor(enc, &back); err != nil || len(back) != 1 {
			t.Fatalf("round trip: %v %v", back, err)
		}
	})
}
