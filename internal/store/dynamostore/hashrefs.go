package dynamostore

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"slices"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Hashed reference look-up records, the format of jobs created since
// (their job record has rf = 1; older jobs keep the R# records of
// refs.go). A record (JOB#<job>, H#<bucket 1h>#<block 10d>) lists, for
// the items of one block of refWidth seqs whose reference hashes to the
// bucket, each item's seq, shard and a 24-bit tag of the reference's
// hash: about 5 bytes an item where an R# record held the reference
// itself (19 to 36 characters for an order number or a UUID), so a block
// takes hashedRefBuckets records of under 1 KB instead of refBuckets
// (16) records each written whole for its few references. A by-ref
// listing reads its bucket's records (a quarter of the job's entries),
// takes the entries whose tag matches, and keeps the items whose payload
// holds the reference (a tag matches another reference once in 2^24).
const hashedRefBuckets = 4

// refFormatHashed is the job record's rf of a job with hashed look-up
// records.
const refFormatHashed = 1

// refHash is the reference's 64-bit FNV-1a hash: its high half chooses
// the bucket, its low 24 bits are the tag.
func refHash(ref string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(ref))
	return h.Sum64()
}

func hashedRefBucket(h uint64) int { return int((h >> 32) % hashedRefBuckets) }

func refTag(h uint64) uint32 { return uint32(h) & 0xffffff }

func skHashedRef(k refKey) string { return fmt.Sprintf("H#%x#%010d", k.bucket, k.block) }

// hashedRefEntry is one item of a hashed look-up record.
type hashedRefEntry struct {
	seq   int64
	shard int
	tag   uint32
}

// encodeHashedRefs writes entries sorted by seq: per entry the seq's
// distance from the previous one (from the block's first seq for the
// first), the shard (both unsigned varints) and the 3-byte tag.
func encodeHashedRefs(block int64, es []hashedRefEntry) []byte {
	out := make([]byte, 0, len(es)*6)
	prev := block * refWidth
	for _, e := range es {
		out = binary.AppendUvarint(out, uint64(e.seq-prev))
		out = binary.AppendUvarint(out, uint64(e.shard))
		out = append(out, byte(e.tag>>16), byte(e.tag>>8), byte(e.tag))
		prev = e.seq
	}
	return out
}

func decodeHashedRefs(block int64, b []byte) ([]hashedRefEntry, error) {
	var out []hashedRefEntry
	prev := block * refWidth
	for len(b) > 0 {
		d, n := binary.Uvarint(b)
		if n <= 0 || d >= refWidth {
			return nil, fmt.Errorf("%w: hashed ref entry seq", errCorruptPage)
		}
		b = b[n:]
		shard, n := binary.Uvarint(b)
		if n <= 0 || shard > 1<<31 || len(b) < n+3 {
			return nil, fmt.Errorf("%w: hashed ref entry shard", errCorruptPage)
		}
		b = b[n:]
		seq := prev + int64(d)
		if (len(out) > 0 && d == 0) || seq >= (block+1)*refWidth {
			return nil, fmt.Errorf("%w: hashed ref entries out of order", errCorruptPage)
		}
		out = append(out, hashedRefEntry{seq: seq, shard: int(shard), tag: uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2])})
		b = b[3:]
		prev = seq
	}
	return out, nil
}

// hashedRefsOf decodes a hashed look-up record (none: no entries).
func hashedRefsOf(rec map[string]types.AttributeValue, block int64) ([]hashedRefEntry, error) {
	if rec == nil {
		return nil, nil
	}
	return decodeHashedRefs(block, getB(rec, "h"))
}

// mergeHashedRefs sets add's entries into cur (one entry per seq, a new
// one replacing an item's old: its reference changed) and reports whether
// anything changed.
func mergeHashedRefs(cur, add []hashedRefEntry) ([]hashedRefEntry, bool) {
	merged := slices.Clone(cur)
	changed := false
	for _, e := range add {
		i, found := slices.BinarySearchFunc(merged, e.seq, func(x hashedRefEntry, seq int64) int { return cmp.Compare(x.seq, seq) })
		switch {
		case !found:
			merged = slices.Insert(merged, i, e)
			changed = true
		case merged[i] != e:
			merged[i] = e
			changed = true
		}
	}
	return merged, changed
}
