package dynamostore

import (
	"cmp"
	"context"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/qunfa/qunfa/internal/store"
)

// Reference look-up records. The references of the items in one block of
// refWidth seqs are hashed into refBuckets records (JOB#<job>,
// R#<bucket 2h>#<block 10d>), each a deflated JSON map from reference to
// its items there. PutItems writes them with the snapshot: a page of 500
// items with a reference each touches at most 2 × refBuckets records,
// a few hundredths of a write unit per message, where a record per
// reference would add a whole unit. ListItems by ref queries its bucket's
// records in block order, from the cursor's block on, and stops once the
// page is full: one bucket holds 1/refBuckets of the job's references,
// about 1 KB per refWidth items.
const (
	refBuckets = 16
	refWidth   = 512
)

type refKey struct {
	bucket int
	block  int64
}

func refBucket(ref string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(ref))
	return int(h.Sum32() % refBuckets)
}

func skRef(k refKey) string { return fmt.Sprintf("R#%02x#%010d", k.bucket, k.block) }

// refEntry is one item of a reference.
type refEntry struct {
	seq   int64
	shard int
}

// encodeRefEntries renders entries, sorted by seq, as "seq.shard,...".
func encodeRefEntries(es []refEntry) string {
	var b strings.Builder
	for i, e := range es {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(e.seq, 10))
		b.WriteByte('.')
		b.WriteString(strconv.Itoa(e.shard))
	}
	return b.String()
}

func decodeRefEntries(s string) ([]refEntry, error) {
	if s == "" {
		return nil, nil
	}
	parts := strings.Split(s, ",")
	out := make([]refEntry, 0, len(parts))
	for _, p := range parts {
		seqText, shardText, ok := strings.Cut(p, ".")
		seq, err1 := strconv.ParseInt(seqText, 10, 64)
		shard, err2 := strconv.Atoi(shardText)
		if !ok || err1 != nil || err2 != nil || seq < 0 || shard < 0 {
			return nil, fmt.Errorf("%w: bad ref entry %q", errCorruptPage, p)
		}
		out = append(out, refEntry{seq: seq, shard: shard})
	}
	return out, nil
}

// mergeRefEntries adds add to cur (sorted by seq, one entry per seq) and
// reports whether anything was new.
func mergeRefEntries(cur, add []refEntry) ([]refEntry, bool) {
	merged := slices.Clone(cur)
	changed := false
	for _, e := range add {
		i, found := slices.BinarySearchFunc(merged, e.seq, func(x refEntry, seq int64) int { return cmp.Compare(x.seq, seq) })
		if !found {
			merged = slices.Insert(merged, i, e)
			changed = true
		}
	}
	return merged, changed
}

func encodeRefRecord(refs map[string][]refEntry) ([]byte, error) {
	m := make(map[string]string, len(refs))
	for ref, es := range refs {
		m[ref] = encodeRefEntries(es)
	}
	return deflateJSON(m)
}

func decodeRefRecord(rec map[string]types.AttributeValue) (map[string][]refEntry, error) {
	out := map[string][]refEntry{}
	z, ok := rec["z"].(*types.AttributeValueMemberB)
	if !ok {
		return out, nil
	}
	m := map[string]string{}
	if err := inflateJSON(z.Value, &m); err != nil {
		return nil, err
	}
	for ref, text := range m {
		var err error
		if out[ref], err = decodeRefEntries(text); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// maxRefRecords bounds the look-up records one by-ref ListItems call
// reads (each at most a few KB): with maxListPages status pages, a call
// reads a bounded number of units whatever the job's size; a reference
// with few items in a large job is listed over several calls, each with
// a cursor.
const maxRefRecords = 32

// refItems returns the items of ref with seq after after, in seq order,
// reading the ref's bucket records from after's block on, until it has
// more than want or has read budget records. coveredTo is the last seq
// the records read cover; done says the bucket has no more records.
func (s *Store) refItems(ctx context.Context, jobID, ref string, hashed bool, after int64, want, budget int) (out []refEntry, coveredTo int64, done bool, read int, err error) {
	from := refKey{refBucket(ref), max(after, 0) / refWidth}
	lo, hi, prefix := skRef(from), fmt.Sprintf("R#%02x#~", from.bucket), len("R#00#")
	h := refHash(ref)
	if hashed {
		from.bucket = hashedRefBucket(h)
		lo, hi, prefix = skHashedRef(from), fmt.Sprintf("H#%x#~", from.bucket), len("H#0#")
	}
	in := &dynamodb.QueryInput{
		TableName:              aws.String(s.table),
		KeyConditionExpression: aws.String("pk = :pk AND sk BETWEEN :lo AND :hi"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":pk": attrS(jobPK(jobID)), ":lo": attrS(lo), ":hi": attrS(hi),
		},
		ConsistentRead:         aws.Bool(true),
		ReturnConsumedCapacity: s.capacity(),
	}
	coveredTo = after
	for {
		in.Limit = aws.Int32(int32(max(1, min(16, budget-read))))
		res, err := s.db.Query(ctx, in)
		if err != nil {
			return nil, 0, false, read, err
		}
		s.consumed("Query", res.ConsumedCapacity)
		for _, rec := range res.Items {
			read++
			blk, err := strconv.ParseInt(getS(rec, attrSK)[prefix:], 10, 64)
			if err != nil {
				return nil, 0, false, read, fmt.Errorf("%w: ref record key %s", errCorruptPage, getS(rec, attrSK))
			}
			coveredTo = max(coveredTo, (blk+1)*refWidth-1)
			if hashed {
				es, err := hashedRefsOf(rec, blk)
				if err != nil {
					return nil, 0, false, read, fmt.Errorf("hashed ref record %s: %w", getS(rec, attrSK), err)
				}
				for _, e := range es {
					if e.seq > after && e.tag == refTag(h) {
						out = append(out, refEntry{seq: e.seq, shard: e.shard})
					}
				}
				continue
			}
			refs, err := decodeRefRecord(rec)
			if err != nil {
				return nil, 0, false, read, fmt.Errorf("ref record %s: %w", getS(rec, attrSK), err)
			}
			for _, e := range refs[ref] {
				if e.seq > after {
					out = append(out, e)
				}
			}
		}
		done = len(res.LastEvaluatedKey) == 0
		if done || len(out) > want || read >= budget {
			slices.SortFunc(out, func(a, b refEntry) int { return int(a.seq - b.seq) })
			return out, coveredTo, done, read, nil
		}
		in.ExclusiveStartKey = res.LastEvaluatedKey
	}
}

// listItemsByRef lists the items of one reference: its bucket's look-up
// records (see refBuckets), then the status pages of its items after the
// cursor (each page read once), filtered like ListItems. A call reads at
// most maxRefRecords look-up records and maxListPages status pages; out
// of budget with fewer matches than asked for, it answers them with a
// cursor to go on from.
func (s *Store) listItemsByRef(ctx context.Context, p store.ListItemsParams, hashed bool, after int64, statusFilter byte, limit int) (store.ListItemsResult, error) {
	res := store.ListItemsResult{Items: []store.Item{}}
	type loaded struct {
		pg  *page
		mem *members
	}
	pages := map[pageKey]loaded{}
	type hit struct {
		index int
		pg    *page
		mem   *members
		ord   int
	}
	var hits []hit
	recordsRead := 0
	more := false // out of budget before the end: the cursor goes on from after
scan:
	for len(hits) <= limit {
		entries, coveredTo, done, n, err := s.refItems(ctx, p.JobID, p.Ref, hashed, after, limit-len(hits), maxRefRecords-recordsRead)
		if err != nil {
			return res, fmt.Errorf("list items of %s by ref: %w", p.JobID, err)
		}
		recordsRead += n
		for _, e := range entries {
			if p.Shard != nil && *p.Shard != e.shard {
				after = e.seq
				continue
			}
			k := pageKey{e.shard, e.seq / pageWidth}
			l, ok := pages[k]
			if !ok {
				if len(pages) >= maxListPages {
					more = true
					break scan
				}
				pg, mem, err := s.loadPage(ctx, p.JobID, e.shard, k.block)
				if err != nil {
					return res, fmt.Errorf("list items of %s by ref: %w", p.JobID, err)
				}
				l = loaded{pg, mem}
				pages[k] = l
			}
			after = e.seq
			if l.pg == nil {
				continue
			}
			o, found := slices.BinarySearch(l.mem.seqs, e.seq)
			if !found {
				continue
			}
			sl := l.pg.slots[o]
			if (statusFilter != 0 && sl.status != statusFilter) || (p.Category != "" && sl.category != p.Category) {
				continue
			}
			hits = append(hits, hit{e.shard, l.pg, l.mem, o})
			if len(hits) > limit {
				break scan
			}
		}
		if len(hits) <= limit {
			after = max(after, coveredTo)
		}
		if done {
			break
		}
		if recordsRead >= maxRefRecords {
			more = true
			break
		}
	}
	var err error
	switch {
	case len(hits) > limit:
		hits = hits[:limit]
		res.NextCursor, err = encodeCursor(listCursor{After: hits[limit-1].mem.seqs[hits[limit-1].ord]})
	case more:
		res.NextCursor, err = encodeCursor(listCursor{After: after})
	}
	if err != nil {
		return res, err
	}
	for _, h := range hits {
		items, err := s.materialize(ctx, p.JobID, h.index, h.pg, h.mem, []int{h.ord}, false)
		if err != nil {
			return res, fmt.Errorf("list items of %s by ref: %w", p.JobID, err)
		}
		for _, it := range items {
			// A hashed entry's tag may be another reference's; an R#
			// entry may be an item's former reference.
			if it.Ref == p.Ref {
				res.Items = append(res.Items, it)
			}
		}
	}
	return res, nil
}
