package dynamostore

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzHashedRefs decodes arbitrary hashed look-up record bytes: never a
// panic, a bad record is errCorruptPage, and a good one's entries are in
// seq order within the block and encode back to the same bytes.
func FuzzHashedRefs(f *testing.F) {
	f.Add(int64(0), encodeHashedRefs(0, []hashedRefEntry{{seq: 0, shard: 0, tag: 1}, {seq: 7, shard: 300, tag: 0xffffff}}))
	f.Add(int64(3), encodeHashedRefs(3, []hashedRefEntry{{seq: 3*refWidth + 511, shard: 2, tag: 42}}))
	f.Add(int64(1), []byte{0x80})
	f.Add(int64(1), []byte{0, 0, 1})
	f.Fuzz(func(t *testing.T, block int64, b []byte) {
		if block < 0 || block > 1<<40 {
			return
		}
		es, err := decodeHashedRefs(block, b)
		if err != nil {
			if !errors.Is(err, errCorruptPage) {
				t.Fatalf("decodeHashedRefs: %v, want errCorruptPage", err)
			}
			return
		}
		for i, e := range es {
			if e.seq < block*refWidth || e.seq >= (block+1)*refWidth || (i > 0 && e.seq <= es[i-1].seq) || e.tag > 0xffffff {
				t.Fatalf("entry %d = %+v out of its block %d or order", i, e, block)
			}
		}
		if again := encodeHashedRefs(block, es); len(es) > 0 && !bytes.Equal(again, b) {
			// Varints have one canonical form the encoder writes; a
			// non-canonical input may decode, but what it decodes to
			// must encode and decode to the same entries.
			back, err := decodeHashedRefs(block, again)
			if err != nil || len(back) != len(es) {
				t.Fatalf("re-encoded entries do not decode back: %v, %v", back, err)
			}
		}
	})
}
