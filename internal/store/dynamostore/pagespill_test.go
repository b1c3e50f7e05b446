package dynamostore

import (
	"context"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// acceptPuts answers every PutItem with success and keeps the sort keys
// written: a table that never refuses, for deciding on pages built in the
// test.
type acceptPuts struct {
	mu  sync.Mutex
	sks []string
}

func (a *acceptPuts) Do(r *http.Request) (*http.Response, error) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, err
	}
	var in struct {
		Item map[string]struct{ S string }
	}
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, err
	}
	a.mu.Lock()
	a.sks = append(a.sks, in.Item[attrSK].S)
	a.mu.Unlock()
	return &http.Response{
		StatusCode: http.StatusOK,
		Header:     http.Header{"Content-Type": []string{"application/x-amz-json-1.0"}},
		Body:       io.NopCloser(strings.NewReader("{}")),
		Request:    r,
	}, nil
}

func (a *acceptPuts) take() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	sks := a.sks
	a.sks = nil
	return sks
}

// clonePage copies what pageItem and writePage change.
func clonePage(p *page) *page {
	c := *p
	c.slots = slices.Clone(p.slots)
	c.claims = slices.Clone(p.claims)
	c.msgs = maps.Clone(p.msgs)
	c.segs = slices.Clone(p.segs)
	return &c
}

// TestMsgIDsMoveOutExactlyWhenTheyCostAWriteUnit: a status page's message
// ids stay in the page while the page costs no more write units with them
// than without them, and move to a msgid record (one write) exactly when
// keeping them would cost one more unit on every later write of the page.
// Sizes are the adapter's record sizes with the version counted at its
// largest (20 digits); the page grows a byte at a time across a write unit
// boundary, with and without earlier msgid records.
func TestMsgIDsMoveOutExactlyWhenTheyCostAWriteUnit(t *testing.T) {
	t.Parallel()
	tr := &acceptPuts{}
	s := New(dynamodb.New(dynamodb.Options{
		Region: "us-east-1", BaseEndpoint: aws.String("http://127.0.0.1:9"),
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
		HTTPClient:  tr, RetryMaxAttempts: 1,
	}), "pages", Options{})
	const job = "spill-job"
	ids := map[int]string{}
	for _, o := range []int{3, 40, 41, 77, 120, 199} {
		ids[o] = strings.Repeat("ab", 10) + "-" + strings.Repeat("7", o%13+10)
	}
	const versionSize = 21 // "v" and 20 digits
	size := func(p *page) int { return recordSize(s.pageItem(job, 0, 0, clonePage(p))) + versionSize }
	// near: within reach of the first write unit boundary, where the
	// decision changes.
	near := func(n int) bool { return n > 1024-64 && n <= 1024+64 }
	spills, stays := 0, 0
	for _, segs := range [][]string{nil, {"0a0b0c0d"}} {
		for k := 1; k < 2200; k++ {
			pg := &page{version: 7, slots: make([]slot, 200), msgs: maps.Clone(ids), segs: slices.Clone(segs)}
			for o := range pg.slots {
				pg.slots[o] = slot{status: 'c', attempts: 1, claim: -1, msg: ids[o] != ""}
			}
			// A failed item whose category grows the page a byte at a time.
			pg.slots[0] = slot{status: 'f', attempts: 1, claim: -1, category: strings.Repeat("x", k)}
			kept := size(pg)
			out := clonePage(pg)
			out.msgs, out.segs = map[int]string{}, append(out.segs, "12345678")
			without := size(out)
			if !near(kept) && !near(without) {
				continue
			}
			// The estimate counts a comma before the new record's name even
			// when it is the first: one byte more than the page without ids.
			slack := 0
			if len(segs) == 0 {
				slack = 1
			}
			if err := s.writePage(context.Background(), job, 0, 0, pg); err != nil {
				t.Fatalf("writePage: %v", err)
			}
			sks := tr.take()
			moved := len(pg.segs) == len(segs)+1
			records := 0
			for _, sk := range sks {
				if strings.HasPrefix(sk, "O#") {
					records++
				}
			}
			switch {
			case moved && (len(pg.msgs) != 0 || records != 1 || len(sks) != 2):
				t.Fatalf("page of %d bytes: ids moved, but %d left in the page, %d msgid records written, %d writes", kept, len(pg.msgs), records, len(sks))
			case moved && writeUnits(kept) <= writeUnits(without):
				t.Fatalf("page of %d bytes (%d write units) with its ids, %d without (%d): ids moved out though they cost no write unit (earlier records %v)",
					kept, writeUnits(kept), without, writeUnits(without), segs)
			case !moved && (len(pg.msgs) != len(ids) || records != 0 || len(sks) != 1):
				t.Fatalf("page of %d bytes: ids kept, but %d of %d in the page, %d msgid records written, %d writes", kept, len(pg.msgs), len(ids), records, len(sks))
			case !moved && writeUnits(kept) > writeUnits(without+slack):
				t.Fatalf("page of %d bytes (%d write units) with its ids, %d without (%d): ids kept though they cost a write unit on every write (earlier records %v)",
					kept, writeUnits(kept), without, writeUnits(without), segs)
			}
			if moved {
				spills++
			} else {
				stays++
			}
		}
	}
	if spills == 0 || stays == 0 {
		t.Fatalf("%d pages moved their ids, %d kept them: the sweep missed the boundaries", spills, stays)
	}
}

// TestSubmittedSlotWithoutItsClaimReads: a status page whose submitted item
// refers to no claim (its claim index missing or past the page's list — a
// page damaged or written by a faulty version) is still read: the item
// shows no claim id and its claim time from the slot, instead of crashing
// every reader of the page (a listing, the reconciler).
func TestSubmittedSlotWithoutItsClaimReads(t *testing.T) {
	t.Parallel()
	s := New(dynamodb.New(dynamodb.Options{
		Region: "us-east-1", BaseEndpoint: aws.String("http://127.0.0.1:9"),
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
		HTTPClient:  &acceptPuts{}, RetryMaxAttempts: 1,
	}), "pages", Options{})
	const sub = int64(1_900_000_000)
	pg := &page{
		slots: []slot{
			{status: 's', attempts: 1, claim: -1, sub: sub},
			{status: 's', attempts: 1, claim: 1, sub: sub},
			{status: 's', attempts: 1, claim: 0, sub: sub},
		},
		claims: []claimRef{{id: "c1", at: (sub + 5) * 1e9}},
	}
	mem := &members{account: "a", seqs: []int64{1, 2, 3}, dataWidth: 64}
	items, err := s.materialize(context.Background(), "job", 0, pg, mem, []int{0, 1, 2}, false)
	if err != nil || len(items) != 3 {
		t.Fatalf("materialize = %d items, %v", len(items), err)
	}
	for i, it := range items[:2] {
		if it.ClaimID != "" || !it.SubmittedAt.Equal(fromSecs(sub)) {
			t.Errorf("item %d without its claim: ClaimID %q SubmittedAt %v, want none and %v", i, it.ClaimID, it.SubmittedAt, fromSecs(sub))
		}
	}
	if it := items[2]; it.ClaimID != "c1" || !it.SubmittedAt.Equal(fromNanos((sub+5)*1e9)) {
		t.Errorf("item with its claim: ClaimID %q SubmittedAt %v, want c1 at %v", it.ClaimID, it.SubmittedAt, fromNanos((sub+5)*1e9))
	}
}
