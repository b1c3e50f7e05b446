package dynamostore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/qunfa/qunfa/internal/store"
)

const (
	submittedPK = "SUB"
	pageKeyFmt  = "%020d"
)

func duePK(jobID string, index int) string { return fmt.Sprintf("DUE#%s#%06d", jobID, index) }

// pageItem renders a status page record with its sparse index keys: due
// (present while the page holds pending items, keyed by their earliest
// NextAttemptAt) and submitted (present while pg.sub is set).
func (s *Store) pageItem(jobID string, index int, block int64, pg *page) map[string]types.AttributeValue {
	pg.compactClaims()
	if pg.base == 0 {
		pg.base = pg.firstTime()
	}
	m := map[string]types.AttributeValue{
		attrPK: attrS(jobPK(jobID)), attrSK: attrS(skPage(index, block)),
		"job": attrS(jobID), "idx": attrN(int64(index)), "blk": attrN(block),
		"n": attrN(int64(len(pg.slots))), "st": attrS(encodeSlots(pg.slots, pg.base)),
	}
	if pg.base != 0 {
		m["tb"] = attrN(pg.base)
	}
	if len(pg.msgs) > 0 {
		m["mb"] = &types.AttributeValueMemberB{Value: deflateMsgs(pg.msgs)}
	}
	if len(pg.segs) > 0 {
		m["ms"] = attrS(strings.Join(pg.segs, ","))
	}
	if len(pg.claims) > 0 {
		m["c"] = attrS(encodeClaims(pg.claims))
	}
	if next, ok := pg.minPendingNext(); ok {
		m["g3pk"] = attrS(duePK(jobID, index))
		m["g3sk"] = attrS(fmt.Sprintf(pageKeyFmt+"#%010d", max(next, 0), block))
	}
	if pg.sub != 0 {
		m["sub"] = attrN(pg.sub)
		m["g4pk"] = attrS(submittedPK)
		m["g4sk"] = attrS(fmt.Sprintf(pageKeyFmt+"#%s#%06d#%010d", max(pg.sub, 0), jobID, index, block))
	}
	return m
}

func pageFrom(rec map[string]types.AttributeValue) (*page, error) {
	base := getN(rec, "tb")
	slots, err := decodeSlots(getS(rec, "st"), int(getN(rec, "n")), base)
	if err != nil {
		return nil, err
	}
	claims, err := decodeClaims(getS(rec, "c"))
	if err != nil {
		return nil, err
	}
	msgs, err := inflateMsgs(getB(rec, "mb"))
	if err != nil {
		return nil, err
	}
	pg := &page{version: getN(rec, "v"), slots: slots, claims: claims, sub: getN(rec, "sub"), base: base, msgs: msgs}
	if ms := getS(rec, "ms"); ms != "" {
		pg.segs = strings.Split(ms, ",")
	}
	return pg, nil
}

// skMsgs is the key of one msgid record of a status page.
func skMsgs(index int, block int64, id string) string {
	return fmt.Sprintf("O#%06d#%010d#%s", index, block, id)
}

// writePage replaces a status page on condition its version is the one
// read; a lost race returns the raw ConditionalCheckFailedException.
//
// Message ids stay in the page while they fit in the write units the page
// costs anyway; when keeping them would cost one more unit on every write
// of the page, they move, all at once, to a new msgid record of the page
// (one write of at most ~1 KB) that the page then names. A msgid record
// whose page write lost is never named and never read.
func (s *Store) writePage(ctx context.Context, jobID string, index int, block int64, pg *page) error {
	if _, ok := pg.minSubmittedAt(); ok {
		if at, _ := pg.minSubmittedAt(); pg.sub == 0 || at < pg.sub {
			pg.sub = at
		}
	}
	item := s.pageItem(jobID, index, block, pg)
	const versionSize = len("v") + 20
	if mb := getB(item, "mb"); len(mb) > 0 {
		with := recordSize(item) + versionSize
		without := with - len("mb") - len(mb) + len(",") + segIDLen
		if len(pg.segs) == 0 {
			without += len("ms")
		}
		if writeUnits(with) > writeUnits(without) {
			id := newSegID()
			rec := map[string]types.AttributeValue{
				attrPK: attrS(jobPK(jobID)), attrSK: attrS(skMsgs(index, block, id)), "z": &types.AttributeValueMemberB{Value: mb},
			}
			if err := s.putItem(ctx, rec, "attribute_not_exists(pk)", nil, nil); err != nil {
				return err
			}
			pg.msgs, pg.segs = map[int]string{}, append(slices.Clip(pg.segs), id)
			item = s.pageItem(jobID, index, block, pg)
		}
	}
	item["v"] = attrN(pg.version + 1)
	err := s.putItem(ctx, item, "v = :v", nil, map[string]types.AttributeValue{":v": attrN(pg.version)})
	switch {
	case err == nil:
		pg.version++
		s.cache.putPage(jobID, index, block, item)
	case isConditionFailed(err):
		s.cache.dropPage(jobID, index, block)
	}
	return err
}

// segIDLen is the length of a msgid record's name.
const segIDLen = 8

// newSegID names a new msgid record: random, so that writers racing on one
// page never share a record.
func newSegID() string {
	return fmt.Sprintf("%08x", rand.Uint32())
}

// msgIDOf resolves the message id of the slot at ord, marked as having
// one: from the page, else from the page's msgid records (segs, read by
// the caller, oldest first), the newest first.
func msgIDOf(pg *page, ord int, segs []map[int]string) string {
	if id, ok := pg.msgs[ord]; ok {
		return id
	}
	for i := len(segs) - 1; i >= 0; i-- {
		if id, ok := segs[i][ord]; ok {
			return id
		}
	}
	return ""
}

// loadPage reads a status page and its member list (cached once read). It
// returns nil, nil, nil when the page does not exist.
func (s *Store) loadPage(ctx context.Context, jobID string, index int, block int64) (*page, *members, error) {
	pk := jobPK(jobID)
	mID := pk + "\x00" + skMembers(index, block)
	s.membersMu.Lock()
	mem := s.members[mID]
	s.membersMu.Unlock()
	keys := []map[string]types.AttributeValue{key(pk, skPage(index, block))}
	if mem == nil {
		keys = append(keys, key(pk, skMembers(index, block)))
	}
	recs, err := s.batchGet(ctx, keys, true)
	if err != nil {
		return nil, nil, err
	}
	prec := recs[pk+"\x00"+skPage(index, block)]
	if prec == nil {
		return nil, nil, nil
	}
	s.cache.putPage(jobID, index, block, prec)
	return s.pageWithMembers(ctx, jobID, index, block, prec, recs[mID])
}

// pageToWrite returns the status page as this process last wrote or read
// it (cached true), else as read now. A cached page may be stale: it may
// only be the base of a conditional writePage, and a decision to write
// nothing must be taken again on a page read fresh (see recordCache).
func (s *Store) pageToWrite(ctx context.Context, jobID string, index int, block int64) (*page, *members, bool, error) {
	if rec := s.cache.page(jobID, index, block); rec != nil {
		pg, mem, err := s.pageWithMembers(ctx, jobID, index, block, rec, nil)
		if err == nil {
			return pg, mem, true, nil
		}
		s.cache.dropPage(jobID, index, block)
	}
	pg, mem, err := s.loadPage(ctx, jobID, index, block)
	return pg, mem, false, err
}

// pageWithMembers decodes a status page record read already and finds its
// member list: mrec when read with it, else the cache, else a read.
func (s *Store) pageWithMembers(ctx context.Context, jobID string, index int, block int64, prec, mrec map[string]types.AttributeValue) (*page, *members, error) {
	pk := jobPK(jobID)
	mID := pk + "\x00" + skMembers(index, block)
	s.membersMu.Lock()
	mem := s.members[mID]
	s.membersMu.Unlock()
	pg, err := pageFrom(prec)
	if err != nil {
		return nil, nil, fmt.Errorf("page %s/%d/%d: %w", jobID, index, block, err)
	}
	if mem == nil || len(mem.seqs) != len(pg.slots) {
		if mrec == nil {
			if mrec, err = s.getItem(ctx, pk, skMembers(index, block)); err != nil {
				return nil, nil, err
			}
		}
		if mrec == nil {
			return nil, nil, fmt.Errorf("page %s/%d/%d: %w: member list missing", jobID, index, block, errCorruptPage)
		}
		seqs, err := decodeMembers(block, getS(mrec, "m"))
		if err != nil {
			return nil, nil, err
		}
		mem = &members{account: getS(mrec, "a"), seqs: seqs, dataWidth: recordDataWidth(mrec)}
		if len(seqs) == len(pg.slots) {
			s.membersMu.Lock()
			if len(s.members) >= maxCachedMembers {
				clear(s.members)
			}
			s.members[mID] = mem
			s.membersMu.Unlock()
		}
	}
	if len(mem.seqs) != len(pg.slots) {
		return nil, nil, fmt.Errorf("page %s/%d/%d: %w: %d members, %d states", jobID, index, block, errCorruptPage, len(mem.seqs), len(pg.slots))
	}
	return pg, mem, nil
}

// materialize builds the port's items for some slots of one page, reading
// their payload records and, for items with an error, their error records,
// and the page's msgid records when an item's message id is in one.
// With running (the job runs: its payloads are all written and never
// change again) payload records are taken from the cache when it holds
// every wanted item, and cached once read.
func (s *Store) materialize(ctx context.Context, jobID string, index int, pg *page, mem *members, ords []int, running bool) ([]store.Item, error) {
	pk := jobPK(jobID)
	width := mem.dataWidth
	datas := map[int64]map[string]payload{}
	if running {
		for _, o := range ords {
			seq := mem.seqs[o]
			d := seq / width
			if data, ok := datas[d]; ok && data == nil {
				continue // already known to lack an item
			}
			data := s.cache.payloadsOf(pk + "\x00" + skData(d))
			if _, ok := data[strconv.FormatInt(seq, 10)]; !ok {
				data = nil
			}
			datas[d] = data
		}
		for d, data := range datas {
			if data == nil {
				delete(datas, d)
			}
		}
	}
	var keys []map[string]types.AttributeValue
	needSegs := false
	for _, o := range ords {
		if _, ok := datas[mem.seqs[o]/width]; !ok {
			keys = append(keys, key(pk, skData(mem.seqs[o]/width)))
		}
		if pg.slots[o].category != "" {
			keys = append(keys, key(pk, skErr(index, mem.seqs[o])))
		}
		if _, inPage := pg.msgs[o]; pg.slots[o].msg && !inPage {
			needSegs = true
		}
	}
	block := int64(-1)
	if len(mem.seqs) > 0 {
		block = mem.seqs[0] / pageWidth
	}
	if needSegs {
		for _, id := range pg.segs {
			keys = append(keys, key(pk, skMsgs(index, block, id)))
		}
	}
	var recs map[string]map[string]types.AttributeValue
	if len(keys) > 0 {
		var err error
		if recs, err = s.batchGet(ctx, keys, true); err != nil {
			return nil, err
		}
	}
	var segs []map[int]string
	if needSegs {
		for _, id := range pg.segs {
			r := recs[pk+"\x00"+skMsgs(index, block, id)]
			if r == nil {
				return nil, fmt.Errorf("page %s/%d/%d: %w: msgid record %s missing", jobID, index, block, errCorruptPage, id)
			}
			m, err := inflateMsgs(getB(r, "z"))
			if err != nil {
				return nil, fmt.Errorf("msgid record %s/%d/%d/%s: %w", jobID, index, block, id, err)
			}
			segs = append(segs, m)
		}
	}
	items := make([]store.Item, 0, len(ords))
	for _, o := range ords {
		seq, sl := mem.seqs[o], pg.slots[o]
		d := seq / width
		if _, ok := datas[d]; !ok {
			data := map[string]payload{}
			if r := recs[pk+"\x00"+skData(d)]; r != nil {
				var err error
				if data, err = decodePayloads(r); err != nil {
					return nil, fmt.Errorf("payload record %s/%d: %w", jobID, d, err)
				}
				if running {
					s.cache.putPayloads(pk+"\x00"+skData(d), data)
				}
			}
			datas[d] = data
		}
		pl := datas[d][strconv.FormatInt(seq, 10)]
		it := store.Item{
			JobID: jobID, Shard: index, Seq: seq, Account: mem.account, To: pl.To, Vars: pl.Vars, Ref: pl.Ref,
			Status: statusOf(sl.status), Attempts: sl.attempts, NextAttemptAt: fromNanos(sl.next),
			SubmittedAt: fromSecs(sl.sub), FinishedAt: fromSecs(sl.fin),
		}
		if sl.status == 's' && sl.claim >= 0 && sl.claim < len(pg.claims) {
			it.ClaimID = pg.claims[sl.claim].id
			it.SubmittedAt = fromNanos(pg.claims[sl.claim].at)
		}
		if sl.msg {
			it.MsgID = msgIDOf(pg, o, segs)
		}
		if sl.category != "" {
			it.Error = &store.ItemError{Category: sl.category}
			if r := recs[pk+"\x00"+skErr(index, seq)]; r != nil && getS(r, "cat") == sl.category {
				it.Error.Code, it.Error.Message = getS(r, "code"), getS(r, "msg")
			}
		}
		items = append(items, it)
	}
	return items, nil
}

// ClaimItems finds the shard's first page with due items through the due
// index, and claims up to p.Max of them with one conditional write of that
// page (retrying on a lost race).
func (s *Store) ClaimItems(ctx context.Context, p store.ClaimItemsParams) (store.ClaimItemsResult, error) {
	if p.Max <= 0 || p.ClaimID == "" || p.JobID == "" || p.Index < 0 {
		return store.ClaimItemsResult{}, fmt.Errorf("claim items of %s/%d: %w: max > 0 and a claim id are required", p.JobID, p.Index, store.ErrInvalidArgument)
	}
	now := nanos(p.Now)
	for attempt := 0; attempt < s.opts.MaxRetries; attempt++ {
		cands, err := s.query(ctx, &dynamodb.QueryInput{
			IndexName:                 aws.String(indexDue),
			KeyConditionExpression:    aws.String("g3pk = :pk"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":pk": attrS(duePK(p.JobID, p.Index))},
		}, 4)
		if err != nil {
			return store.ClaimItemsResult{}, fmt.Errorf("claim items of %s/%d: %w", p.JobID, p.Index, err)
		}
		if len(cands) == 0 {
			if _, err := s.readShard(ctx, p.JobID, p.Index); err != nil {
				return store.ClaimItemsResult{}, err
			}
			return store.ClaimItemsResult{}, nil
		}
		res, done, err := s.claimFrom(ctx, p, now, cands)
		if err != nil {
			return store.ClaimItemsResult{}, fmt.Errorf("claim items of %s/%d: %w", p.JobID, p.Index, err)
		}
		if done {
			return res, nil
		}
	}
	return store.ClaimItemsResult{}, fmt.Errorf("claim items of %s/%d: %w", p.JobID, p.Index, store.ErrConflict)
}

// dueKey splits a due index key into its time and block.
func dueKey(rec map[string]types.AttributeValue) (next, block int64) {
	t, b, _ := strings.Cut(getS(rec, "g3sk"), "#")
	next, _ = strconv.ParseInt(t, 10, 64)
	block, _ = strconv.ParseInt(b, 10, 64)
	return next, block
}

// claimFrom tries the candidate pages in index order; done is false when a
// conditional write lost and the caller should look again.
func (s *Store) claimFrom(ctx context.Context, p store.ClaimItemsParams, now int64, cands []map[string]types.AttributeValue) (store.ClaimItemsResult, bool, error) {
	var res store.ClaimItemsResult
	for ci, c := range cands {
		next, block := dueKey(c)
		if next > now {
			res.NextDueAt = fromNanos(next)
			return res, true, nil
		}
		pg, mem, ords, lost, err := s.claimPage(ctx, p, now, block)
		if err != nil || lost {
			return res, false, err
		}
		if pg == nil {
			continue // gone, or the index lags behind the page
		}
		for range ords {
			res.Delta.Move(store.ItemPending, store.ItemSubmitted)
		}
		if res.Items, err = s.materialize(ctx, p.JobID, p.Index, pg, mem, ords, true); err != nil {
			return res, false, err
		}
		var nextDue int64
		found := false
		if n, ok := pg.minPendingNext(); ok {
			nextDue, found = n, true
		}
		for _, o := range cands[ci+1:] {
			if n, b := dueKey(o); b != block && (!found || n < nextDue) {
				nextDue, found = n, true
			}
		}
		if found {
			res.NextDueAt = fromNanos(nextDue)
		}
		return res, true, nil
	}
	// Every candidate was due by the index but had nothing due on reading
	// (the index lags on AWS): report nothing claimed; the next call looks again.
	return res, true, nil
}

// claimPage claims up to p.Max due items of one status page with a
// conditional write, on the page as last written here when cached, else
// (or when that write loses, or the cached page has nothing due) on the
// page read fresh. It returns the page as written and the claimed slots;
// a nil page when the page does not exist or has nothing due; lost when
// the write on the fresh page lost a race (the caller looks again).
func (s *Store) claimPage(ctx context.Context, p store.ClaimItemsParams, now, block int64) (pg *page, mem *members, ords []int, lost bool, err error) {
	pg, mem, cached, err := s.pageToWrite(ctx, p.JobID, p.Index, block)
	for {
		if err != nil || pg == nil {
			return nil, nil, nil, false, err
		}
		ords = ords[:0]
		for o, sl := range pg.slots {
			if len(ords) == p.Max {
				break
			}
			if sl.status == 'p' && sl.next <= now {
				ords = append(ords, o)
			}
		}
		if len(ords) > 0 {
			claim := pg.addClaim(p.ClaimID, now)
			for _, o := range ords {
				sl := &pg.slots[o]
				sl.status, sl.attempts, sl.claim, sl.sub = 's', sl.attempts+1, claim, secs(p.Now)
			}
			err = s.writePage(ctx, p.JobID, p.Index, block, pg)
			switch {
			case err == nil:
				return pg, mem, ords, false, nil
			case !isConditionFailed(err):
				return nil, nil, nil, false, err
			case !cached:
				return nil, nil, nil, true, nil
			}
		} else if !cached {
			return nil, nil, nil, false, nil
		}
		// The cached page was stale (or says nothing is due): decide on
		// the page as it is now.
		s.cache.dropPage(p.JobID, p.Index, block)
		pg, mem, err = s.loadPage(ctx, p.JobID, p.Index, block)
		cached = false
	}
}

// UpdateItems applies the updates page by page: read the page, check each
// update's condition, write the error records of accepted failures, then
// write the page on condition of its version (redoing the page on a lost
// race).
func (s *Store) UpdateItems(ctx context.Context, p store.UpdateItemsParams) (store.UpdateItemsResult, error) {
	res := store.UpdateItemsResult{FailuresDelta: map[string]int64{}}
	if p.JobID == "" || p.Index < 0 {
		return res, fmt.Errorf("update items of %s/%d: %w", p.JobID, p.Index, store.ErrNotFound)
	}
	byBlock := map[int64][]store.ItemUpdate{}
	var blocks []int64
	for _, u := range p.Updates {
		if _, ok := statusCode(u.From); !ok {
			return res, fmt.Errorf("update item %d: %w: from %q", u.Seq, store.ErrInvalidArgument, u.From)
		}
		if _, ok := statusCode(u.To); !ok {
			return res, fmt.Errorf("update item %d: %w: to %q", u.Seq, store.ErrInvalidArgument, u.To)
		}
		b := u.Seq / pageWidth
		if u.Seq < 0 {
			b = -1
		}
		if _, ok := byBlock[b]; !ok {
			blocks = append(blocks, b)
		}
		byBlock[b] = append(byBlock[b], u)
	}
	sort.Slice(blocks, func(i, j int) bool { return blocks[i] < blocks[j] })
	anyPage := false
	for _, b := range blocks {
		ok, err := s.updatePage(ctx, p, b, byBlock[b], &res)
		if err != nil {
			return store.UpdateItemsResult{}, fmt.Errorf("update items of %s/%d: %w", p.JobID, p.Index, err)
		}
		anyPage = anyPage || ok
	}
	if !anyPage && len(p.Updates) > 0 {
		if _, err := s.readShard(ctx, p.JobID, p.Index); err != nil {
			return store.UpdateItemsResult{}, err
		}
	}
	for c, n := range res.FailuresDelta {
		if n == 0 {
			delete(res.FailuresDelta, c)
		}
	}
	return res, nil
}

func (s *Store) updatePage(ctx context.Context, p store.UpdateItemsParams, block int64, updates []store.ItemUpdate, res *store.UpdateItemsResult) (bool, error) {
	reject := func() {
		for _, u := range updates {
			res.Rejected = append(res.Rejected, u.Seq)
		}
	}
	if block < 0 {
		reject()
		return false, nil
	}
	at := nanos(p.At)
	useCache := true
	for attempt := 0; attempt < s.opts.MaxRetries; attempt++ {
		var pg *page
		var mem *members
		var cached bool
		var err error
		if useCache {
			pg, mem, cached, err = s.pageToWrite(ctx, p.JobID, p.Index, block)
		} else {
			pg, mem, err = s.loadPage(ctx, p.JobID, p.Index, block)
		}
		if err != nil {
			return false, err
		}
		if pg == nil {
			reject()
			return false, nil
		}
		var (
			delta    store.Counts
			failures = map[string]int64{}
			rejected []int64
			errRecs  []types.WriteRequest
			applied  int
		)
		for _, u := range updates {
			o := mem.ordinal(u.Seq)
			if o < 0 {
				rejected = append(rejected, u.Seq)
				continue
			}
			old := pg.slots[o]
			from, _ := statusCode(u.From)
			to, _ := statusCode(u.To)
			if old.status != from || (u.ClaimID != "" && (old.status != 's' || old.claim < 0 || pg.claims[old.claim].id != u.ClaimID)) {
				rejected = append(rejected, u.Seq)
				continue
			}
			nw := old
			nw.status = to
			if u.ResetAttempts {
				nw.attempts = 0
			}
			nw.attempts = max(0, nw.attempts+u.AttemptsDelta)
			if to == 'p' {
				nw.next = nanos(u.NextAttemptAt)
			}
			switch {
			case u.Error != nil:
				nw.category = u.Error.Category
				errRecs = append(errRecs, types.WriteRequest{PutRequest: &types.PutRequest{Item: map[string]types.AttributeValue{
					attrPK: attrS(jobPK(p.JobID)), attrSK: attrS(skErr(p.Index, u.Seq)),
					"cat": attrS(u.Error.Category), "code": attrS(u.Error.Code), "msg": attrS(u.Error.Message),
				}}})
			case !u.KeepError:
				nw.category = ""
			}
			switch {
			case to != 's':
				nw.claim = -1
			case old.status != 's':
				nw.claim = pg.addClaim(u.ClaimID, at)
			}
			// Outcome details as the SQLite store keeps them: entering a
			// final status sets the finish time, leaving one clears it and
			// the message id; a confirmation carries the provider's id.
			switch {
			case !terminalCode(to):
				nw.fin, nw.msg = 0, false
				delete(pg.msgs, o)
			case !terminalCode(old.status):
				nw.fin = secs(p.At)
			}
			if to == 'c' && u.MsgID != "" {
				if pg.msgs == nil {
					pg.msgs = map[int]string{}
				}
				nw.msg, pg.msgs[o] = true, u.MsgID
			}
			pg.slots[o] = nw
			delta.Move(u.From, u.To)
			if carriesFailure(old) {
				failures[old.category]--
			}
			if carriesFailure(nw) {
				failures[nw.category]++
			}
			if store.ConfirmedAfterRetry(u.From, old.attempts) {
				failures[store.TallyConfirmedAfterRetry]--
			}
			if store.ConfirmedAfterRetry(u.To, nw.attempts) {
				failures[store.TallyConfirmedAfterRetry]++
			}
			applied++
		}
		if cached && (len(rejected) > 0 || len(errRecs) > 0) {
			// Neither a rejection nor an error record is written on a
			// page that may be stale: decide again on the page as it is.
			s.cache.dropPage(p.JobID, p.Index, block)
			useCache = false
			attempt--
			continue
		}
		if applied > 0 {
			if err := s.batchWrite(ctx, errRecs); err != nil {
				return true, err
			}
			if err := s.writePage(ctx, p.JobID, p.Index, block, pg); err != nil {
				if isConditionFailed(err) {
					if cached {
						attempt-- // the cache was stale: not a lost race
					}
					useCache = false
					continue
				}
				return true, err
			}
		}
		res.Rejected = append(res.Rejected, rejected...)
		res.Delta = res.Delta.Add(delta)
		for c, n := range failures {
			res.FailuresDelta[c] += n
		}
		return true, nil
	}
	return true, store.ErrConflict
}
