package store

import (
	"slices"
	"testing"
)

func TestSeqsRoundTripAsRuns(t *testing.T) {
	for _, seqs := range [][]int64{{0}, {5, 1, 2, 3, 4}, {1, 3, 5}, {10, 11, 13, 14, 15, 100}, {2, 2, 3}} {
		enc := EncodeSeqs(seqs)
		got, err := DecodeSeqs(enc)
		want := slices.Compact(slices.Sorted(slices.Values(seqs)))
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("%v -> %q -> %v, %v; want %v", seqs, enc, got, err, want)
		}
	}
	if enc := EncodeSeqs([]int64{1, 2, 3, 4, 9}); enc != "1-4,9" {
		t.Fatalf("EncodeSeqs = %q, want runs 1-4,9", enc)
	}
	for _, bad := range []string{"", "x", "5-2", "1-20000", "1,,2"} {
		if _, err := DecodeSeqs(bad); err == nil {
			t.Errorf("DecodeSeqs(%q) accepted", bad)
		}
	}
}
