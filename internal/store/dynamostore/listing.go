package dynamostore

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/qunfa/qunfa/internal/store"
)

// listCursor is the position of ListItems: the last seq returned.
type listCursor struct {
	After int64 `json:"a"`
}

// shardPages iterates one shard's status pages in block order.
type shardPages struct {
	index int
	recs  []map[string]types.AttributeValue
	start map[string]types.AttributeValue
	done  bool
}

func (s *Store) nextPages(ctx context.Context, jobID string, sp *shardPages, fromBlock int64, limit int32) error {
	in := &dynamodb.QueryInput{
		TableName:              aws.String(s.table),
		KeyConditionExpression: aws.String("pk = :pk AND sk BETWEEN :a AND :b"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":pk": attrS(jobPK(jobID)), ":a": attrS(skPage(sp.index, fromBlock)),
			":b": attrS(fmt.Sprintf("P#%06d#~", sp.index)),
		},
		ConsistentRead:         aws.Bool(true),
		Limit:                  aws.Int32(limit),
		ExclusiveStartKey:      sp.start,
		ReturnConsumedCapacity: s.capacity(),
	}
	out, err := s.db.Query(ctx, in)
	if err != nil {
		return err
	}
	s.consumed("Query", out.ConsumedCapacity)
	sp.recs = append(sp.recs, out.Items...)
	sp.start = out.LastEvaluatedKey
	sp.done = len(out.LastEvaluatedKey) == 0
	return nil
}

// maxListPages bounds the status pages one ListItems call reads (each a
// consistent read of at most a few KB, ~1 read unit): a filter matching
// few items of a large job returns fewer items than asked for, or none,
// with a cursor to go on from, instead of reading the whole job. At least
// one block (one page per shard) is read per call.
const maxListPages = 32

// allDone says every shard's pages have been read to the end.
func allDone(shards []*shardPages) bool {
	for _, sp := range shards {
		if len(sp.recs) > 0 || !sp.done {
			return false
		}
	}
	return true
}

// ListItems walks the status pages of the selected shards in block order
// (one Query per shard per 16 pages), merging shards block by block, and
// reads payloads and error records only for the items it returns. It
// reads at most maxListPages pages (more if a block has more shards).
func (s *Store) ListItems(ctx context.Context, p store.ListItemsParams) (store.ListItemsResult, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = 100
	}
	j, hashedRefs, err := s.getJobAndRefFormat(ctx, p.JobID)
	if err != nil {
		return store.ListItemsResult{}, err
	}
	after := int64(-1)
	if p.Cursor != "" {
		var c listCursor
		if err := decodeCursor(p.Cursor, &c); err != nil {
			return store.ListItemsResult{}, err
		}
		after = c.After
	}
	var statusFilter byte
	if p.Status != "" {
		var ok bool
		if statusFilter, ok = statusCode(p.Status); !ok {
			return store.ListItemsResult{}, fmt.Errorf("list items: %w: status %q", store.ErrInvalidArgument, p.Status)
		}
	}
	if p.Ref != "" {
		return s.listItemsByRef(ctx, p, hashedRefs, after, statusFilter, limit)
	}
	var shards []*shardPages
	if p.Shard != nil {
		if *p.Shard < 0 || *p.Shard >= j.ShardCount {
			return store.ListItemsResult{Items: []store.Item{}}, nil
		}
		shards = append(shards, &shardPages{index: *p.Shard})
	} else {
		for i := 0; i < j.ShardCount; i++ {
			shards = append(shards, &shardPages{index: i})
		}
	}
	if len(shards) == 0 {
		return store.ListItemsResult{Items: []store.Item{}}, nil
	}
	fromBlock := (after + 1) / pageWidth
	pagesRead, lastBlock := 0, int64(-1)
	// Each shard's Query reads its share of the budget at a time (every
	// page a Query returns is paid for, used or not).
	perShard := int32(min(16, max(1, maxListPages/len(shards))))
	type hit struct {
		index int
		pg    *page
		mem   *members
		ord   int
	}
	var hits []hit
	for len(hits) <= limit {
		if pagesRead >= maxListPages {
			break // the scan budget: the cursor says where the next call goes on
		}
		block := int64(-1)
		for _, sp := range shards {
			if len(sp.recs) == 0 && !sp.done {
				if err := s.nextPages(ctx, p.JobID, sp, fromBlock, perShard); err != nil {
					return store.ListItemsResult{}, fmt.Errorf("list items of %s: %w", p.JobID, err)
				}
			}
			if len(sp.recs) > 0 {
				if b := getN(sp.recs[0], "blk"); block < 0 || b < block {
					block = b
				}
			}
		}
		if block < 0 {
			break
		}
		var blockHits []hit
		for _, sp := range shards {
			if len(sp.recs) == 0 || getN(sp.recs[0], "blk") != block {
				continue
			}
			// The Query read the page consistently: decode it, do not read
			// it again.
			prec := sp.recs[0]
			sp.recs = sp.recs[1:]
			pagesRead++
			pg, mem, err := s.pageWithMembers(ctx, p.JobID, sp.index, block, prec, nil)
			if err != nil {
				return store.ListItemsResult{}, fmt.Errorf("list items of %s: %w", p.JobID, err)
			}
			for o, sl := range pg.slots {
				if mem.seqs[o] <= after || (statusFilter != 0 && sl.status != statusFilter) ||
					(p.Category != "" && sl.category != p.Category) {
					continue
				}
				blockHits = append(blockHits, hit{sp.index, pg, mem, o})
			}
		}
		sort.Slice(blockHits, func(a, b int) bool {
			return blockHits[a].mem.seqs[blockHits[a].ord] < blockHits[b].mem.seqs[blockHits[b].ord]
		})
		hits = append(hits, blockHits...)
		lastBlock = block
	}
	res := store.ListItemsResult{Items: []store.Item{}}
	switch {
	case len(hits) > limit:
		hits = hits[:limit]
		last := hits[limit-1]
		if res.NextCursor, err = encodeCursor(listCursor{After: last.mem.seqs[last.ord]}); err != nil {
			return store.ListItemsResult{}, err
		}
	case pagesRead >= maxListPages && !allDone(shards):
		// Out of scan budget with fewer matches than asked for: go on
		// after the last block read.
		if res.NextCursor, err = encodeCursor(listCursor{After: (lastBlock+1)*pageWidth - 1}); err != nil {
			return store.ListItemsResult{}, err
		}
	}
	// One materialize per page: the items of a page share payload records.
	type group struct {
		h    hit
		ords []int
	}
	var groups []*group
	byPage := map[*page]*group{}
	for _, h := range hits {
		g := byPage[h.pg]
		if g == nil {
			g = &group{h: h}
			byPage[h.pg] = g
			groups = append(groups, g)
		}
		g.ords = append(g.ords, h.ord)
	}
	for _, g := range groups {
		items, err := s.materialize(ctx, p.JobID, g.h.index, g.h.pg, g.h.mem, g.ords, false)
		if err != nil {
			return store.ListItemsResult{}, fmt.Errorf("list items of %s: %w", p.JobID, err)
		}
		res.Items = append(res.Items, items...)
	}
	sort.Slice(res.Items, func(a, b int) bool { return res.Items[a].Seq < res.Items[b].Seq })
	return res, nil
}

// submittedCursor is the position of ListSubmittedItems: the index key of
// the page being listed and the last seq returned from it.
type submittedCursor struct {
	Key   keyCursor `json:"k"`
	After int64     `json:"a"`
}

// ListSubmittedItems queries the submitted index for pages whose oldest
// submitted-at is before p.SubmittedBefore and lists their matching items.
// It also tidies the index: a page without submitted items leaves it, a
// page whose submitted items are all newer moves up to their oldest time.
func (s *Store) ListSubmittedItems(ctx context.Context, p store.ListSubmittedItemsParams) (store.ListItemsResult, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = 100
	}
	before := nanos(p.SubmittedBefore)
	in := &dynamodb.QueryInput{
		TableName:              aws.String(s.table),
		IndexName:              aws.String(indexSubmitted),
		KeyConditionExpression: aws.String("g4pk = :pk AND g4sk < :up"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":pk": attrS(submittedPK), ":up": attrS(fmt.Sprintf(pageKeyFmt, max(before, 0))),
		},
		Limit:                  aws.Int32(25),
		ReturnConsumedCapacity: s.capacity(),
	}
	var cur submittedCursor
	cur.After = -1
	var pageKeys []map[string]types.AttributeValue
	if p.Cursor != "" {
		if err := decodeCursor(p.Cursor, &cur); err != nil {
			return store.ListItemsResult{}, err
		}
		pageKeys = append(pageKeys, cur.Key.key())
		in.ExclusiveStartKey = cur.Key.key()
	}
	type hit struct {
		key  map[string]types.AttributeValue
		item store.Item
	}
	var hits []hit
	exhausted := false
	for len(hits) <= limit {
		if len(pageKeys) == 0 {
			if exhausted {
				break
			}
			out, err := s.db.Query(ctx, in)
			if err != nil {
				return store.ListItemsResult{}, fmt.Errorf("list submitted items: %w", err)
			}
			s.consumed("Query", out.ConsumedCapacity)
			pageKeys = out.Items
			in.ExclusiveStartKey = out.LastEvaluatedKey
			exhausted = len(out.LastEvaluatedKey) == 0
			continue
		}
		gk := pageKeys[0]
		pageKeys = pageKeys[1:]
		after := int64(-1)
		if cur.Key != nil && getS(gk, attrSK) == cur.Key[attrSK] && getS(gk, attrPK) == cur.Key[attrPK] {
			after = cur.After
		}
		items, err := s.submittedOfPage(ctx, gk, before, after)
		if err != nil {
			return store.ListItemsResult{}, fmt.Errorf("list submitted items: %w", err)
		}
		for _, it := range items {
			hits = append(hits, hit{gk, it})
		}
	}
	res := store.ListItemsResult{Items: []store.Item{}}
	if len(hits) > limit {
		hits = hits[:limit]
		last := hits[limit-1]
		c := submittedCursor{Key: toKeyCursor(last.key), After: last.item.Seq}
		var err error
		if res.NextCursor, err = encodeCursor(c); err != nil {
			return store.ListItemsResult{}, err
		}
	}
	for _, h := range hits {
		res.Items = append(res.Items, h.item)
	}
	return res, nil
}

// submittedOfPage lists a page's items submitted before `before` with seq
// greater than after, and tidies the page's submitted index key.
func (s *Store) submittedOfPage(ctx context.Context, gk map[string]types.AttributeValue, before, after int64) ([]store.Item, error) {
	parts := strings.Split(getS(gk, attrSK), "#") // P#<idx>#<block>
	if len(parts) != 3 {
		return nil, nil
	}
	index, _ := strconv.Atoi(parts[1])
	block, _ := strconv.ParseInt(parts[2], 10, 64)
	jobID := strings.TrimPrefix(getS(gk, attrPK), "JOB#")
	pg, mem, err := s.loadPage(ctx, jobID, index, block)
	if err != nil || pg == nil {
		return nil, err
	}
	var ords []int
	for o, sl := range pg.slots {
		if sl.status == 's' && sl.claim >= 0 && pg.claims[sl.claim].at < before && mem.seqs[o] > after {
			ords = append(ords, o)
		}
	}
	if oldest, ok := pg.minSubmittedAt(); !ok || oldest >= before {
		// Tidy the sticky index key; losing a race here is harmless.
		pg.sub = 0
		if err := s.writePage(ctx, jobID, index, block, pg); err != nil && !isConditionFailed(err) {
			return nil, err
		}
	}
	if len(ords) == 0 {
		return nil, nil
	}
	return s.materialize(ctx, jobID, index, pg, mem, ords, false)
}

var _ store.ItemGetter = (*Store)(nil)

// GetItems reads items of a shard by seq: the status page of each seq's
// block, then the payloads of the items found.
func (s *Store) GetItems(ctx context.Context, p store.GetItemsParams) ([]store.Item, error) {
	if len(p.Seqs) > store.MaxPutItems {
		return nil, fmt.Errorf("get items: %w: %d seqs, at most %d", store.ErrInvalidArgument, len(p.Seqs), store.MaxPutItems)
	}
	if _, err := s.getJobRecord(ctx, p.JobID); err != nil {
		return nil, err
	}
	seqs := slices.Clone(p.Seqs)
	slices.Sort(seqs)
	seqs = slices.Compact(seqs)
	items := []store.Item{}
	for start := 0; start < len(seqs); {
		block := seqs[start] / pageWidth
		end := start
		for end < len(seqs) && seqs[end]/pageWidth == block {
			end++
		}
		pg, mem, err := s.loadPage(ctx, p.JobID, p.Shard, block)
		if err != nil {
			return nil, fmt.Errorf("get items of job %s: %w", p.JobID, err)
		}
		if pg != nil {
			var ords []int
			for _, seq := range seqs[start:end] {
				if o := mem.ordinal(seq); o >= 0 {
					ords = append(ords, o)
				}
			}
			if len(ords) > 0 {
				got, err := s.materialize(ctx, p.JobID, p.Shard, pg, mem, ords, false)
				if err != nil {
					return nil, err
				}
				items = append(items, got...)
			}
		}
		start = end
	}
	return items, nil
}
