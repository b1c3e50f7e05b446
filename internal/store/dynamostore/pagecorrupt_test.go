package dynamostore

import "testing"

// TestDecodeRejectsEmptyRuns: a status page whose state has a run without
// a state after its length, or a run of length zero beside runs that make
// up the member count, is corrupt — read as it is, it would shift every
// later item onto another item's state.
func TestDecodeRejectsEmptyRuns(t *testing.T) {
	t.Parallel()
	for _, enc := range []string{"2:", "0:p0;2:p0", "2:p0;0:s1"} {
		if _, err := decodeSlots(enc, 2, 0); err == nil {
			t.Errorf("decodeSlots(%q, 2) accepted a corrupt state", enc)
		}
	}
}
