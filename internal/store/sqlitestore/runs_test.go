package sqlitestore

import (
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"testing"

	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/store/storetest"
	"pgregory.net/rapid"
)

// TestRunBodyRoundTrip: a run's items come back from their encoding as
// they went in, also from the two bodies a claim cuts it into, and a body cut short, with bytes left over, or with seqs
// not increasing or past runSpan is refused, never misread.
func TestRunBodyRoundTrip(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(1, runMax).Draw(rt, "n")
		first := rapid.Int64Range(0, 1<<40).Draw(rt, "first")
		items := []entry{{seq: first}}
		for len(items) < n {
			next := items[len(items)-1].seq + rapid.Int64Range(1, 40).Draw(rt, "gap")
			if next-first > runSpan {
				break
			}
			items = append(items, entry{seq: next})
		}
		for i := range items {
			items[i].to = rapid.StringN(0, 40, -1).Draw(rt, "to")
			items[i].vars = rapid.SampledFrom([]string{"", `{"name":"x"}`}).Draw(rt, "vars")
			items[i].msgID = rapid.SampledFrom([]string{"", "m-1", "msg-with-a-longer-id"}).Draw(rt, "msgid")
		}
		b := encodeBody(items)
		got, err := decodeBody(first, len(items), b)
		if err != nil || !slices.Equal(got, items) {
			rt.Fatalf("round trip of %d items: %v, %v", len(items), got, err)
		}
		if _, err := decodeBody(first, len(items)+1, b); !errors.Is(err, errCorruptRun) {
			rt.Fatalf("one item more than encoded: %v", err)
		}
		if len(items) > 1 {
			if _, err := decodeBody(first, len(items)-1, b); !errors.Is(err, errCorruptRun) {
				rt.Fatalf("one item fewer than encoded: %v", err)
			}
		}
		if len(items) > 1 {
			// A claim's cut: the head and the rest decode as the items.
			k := rapid.IntRange(1, len(items)-1).Draw(rt, "k")
			raw := rawRun{first: first, n: len(items), span: items[len(items)-1].seq - first, body: b}
			head, headBody, restFirst, restBody, err := raw.split(k)
			if err != nil || !slices.Equal(head, items[:k]) || restFirst != items[k].seq {
				rt.Fatalf("split at %d: %v, rest from %d, %v", k, head, restFirst, err)
			}
			if got, err := decodeBody(first, k, headBody); err != nil || !slices.Equal(got, items[:k]) {
				rt.Fatalf("head of the split at %d: %v, %v", k, got, err)
			}
			if got, err := decodeBody(restFirst, len(items)-k, restBody); err != nil || !slices.Equal(got, items[k:]) {
				rt.Fatalf("rest of the split at %d: %v, %v", k, got, err)
			}
		}
		if cut := rapid.IntRange(0, len(b)-1).Draw(rt, "cut"); true {
			if _, err := decodeBody(first, len(items), b[:cut]); !errors.Is(err, errCorruptRun) {
				rt.Fatalf("body cut at %d of %d: %v", cut, len(b), err)
			}
		}
	})
	for name, items := range map[string][]entry{
		"repeated seq":  {{seq: 5}, {seq: 5}},
		"past the span": {{seq: 5}, {seq: 6 + runSpan}},
	} {
		if _, err := decodeBody(5, len(items), encodeBody(items)); !errors.Is(err, errCorruptRun) {
			t.Errorf("%s: %v, want errCorruptRun", name, err)
		}
	}
	// A row's count of items is checked before its body is read: a run of
	// none or of more than runMax is a damaged row, whatever its body.
	consecutive := func(n int) []entry {
		items := make([]entry, n)
		for i := range items {
			items[i] = entry{seq: 5 + int64(i), to: "u"}
		}
		return items
	}
	// A seq distance whose varint overflows 64 bits, first or later.
	overflow := []byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x02}
	one := encodeBody([]entry{{seq: 5, to: "u"}})
	for name, b := range map[string][]byte{"first": overflow, "second": append(one[:len(one):len(one)], overflow...)} {
		if _, err := decodeBody(5, 2, b); !errors.Is(err, errCorruptRun) {
			t.Errorf("an overflowing distance, %s item: %v, want errCorruptRun", name, err)
		}
		raw := rawRun{first: 5, n: 2, span: 1, body: b}
		if _, _, _, _, err := raw.split(1); !errors.Is(err, errCorruptRun) {
			t.Errorf("split of a run with an overflowing distance, %s item: %v, want errCorruptRun", name, err)
		}
	}
	if _, err := decodeBody(5, 0, nil); !errors.Is(err, errCorruptRun) {
		t.Errorf("a run of no items: %v, want errCorruptRun", err)
	}
	if _, err := decodeBody(5, runMax+1, encodeBody(consecutive(runMax+1))); !errors.Is(err, errCorruptRun) {
		t.Errorf("a run of %d items: %v, want errCorruptRun", runMax+1, err)
	}
	// The limits themselves are a valid run.
	for name, items := range map[string][]entry{
		"runMax items":     consecutive(runMax),
		"spanning runSpan": {{seq: 5}, {seq: 5 + runSpan}},
	} {
		if got, err := decodeBody(5, len(items), encodeBody(items)); err != nil || !slices.Equal(got, items) {
			t.Errorf("%s: %v, %v; want the items back", name, got, err)
		}
	}
}

// TestFormRuns: items of equal state form runs of at most runMax items
// and runSpan seqs; a change of state, and an item with a ref, start a
// new run.
func TestFormRuns(t *testing.T) {
	fresh := runState{account: "a"}
	var items []flat
	for seq := int64(0); seq < 300; seq++ {
		items = append(items, flat{st: fresh, e: entry{seq: seq * 20}})
	}
	items[10].st.status = codeConfirmed
	items[11].st.ref = "r"
	items[12].st.ref = "r"
	var sizes []int
	for _, r := range formRuns(0, items) {
		if r.last()-r.first() > runSpan {
			t.Fatalf("run from %d spans %d", r.first(), r.last()-r.first())
		}
		sizes = append(sizes, len(r.items))
	}
	// 0-9, 10 (confirmed), 11 and 12 (refs), then 287 items in runs of at
	// most runSpan/20+1 = 205 seqs' worth, at most runMax.
	if want := []int{10, 1, 1, 1, 128, 128, 31}; !slices.Equal(sizes, want) {
		t.Fatalf("runs of %v items, want %v", sizes, want)
	}
	var spread []flat
	for seq := int64(0); seq < 10; seq++ {
		spread = append(spread, flat{st: fresh, e: entry{seq: seq * runSpan / 4}})
	}
	sizes = sizes[:0]
	for _, r := range formRuns(0, spread) {
		sizes = append(sizes, len(r.items))
	}
	if want := []int{5, 5}; !slices.Equal(sizes, want) {
		t.Fatalf("items runSpan/4 apart: runs of %v, want %v (a run spans up to %d seqs, included)", sizes, want, runSpan)
	}
}

// TestMigrateItemsToRuns opens a file of schema 19, whose items are a row
// each (with vars, a ref, a message id): each is a run of one, listed,
// read by seq, claimed (a claim ending between them), settled and counted
// exactly as before, and rewritten as runs as it changes.
func TestMigrateItemsToRuns(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "store.db")
	old, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	qs := []string{schema}
	for v := 2; v <= 19; v++ {
		qs = append(qs, migrations[v])
	}
	qs = append(qs, "PRAGMA user_version = 19",
		`INSERT INTO jobs (no, id, tenant, idem_key, request_hash, name, template, status, pause_reason, total,
suppressed, shard_count, budget, budget_used, rate_per_sec, created_by, created_at, started_at, finished_at, meta)
VALUES (1, 'job-1', 'tenant', 'k', 'h', 'n', 't', 'running', '', 6, 0, 2, 0, 0, 0, 'me', 1, 1, 0, NULL)`,
		`INSERT INTO shards (job_no, idx, account, status, pause_reason, size, cursor, last_adv, n_pending,
n_submitted, n_confirmed, n_failed, n_abandoned, failures, slow_factor, turn, turn_message, dirty)
VALUES (1, 0, 'acct', 'running', '', 4, 0, 1, 3, 0, 1, 0, 0, NULL, 1, 0, '', 0),
       (1, 1, 'acct', 'running', '', 2, 0, 1, 2, 0, 0, 0, 0, NULL, 1, 0, '', 0)`,
		`INSERT INTO items (job_no, shard, seq, status, attempts, next_at, sub_at, claim, cat, code, msg, account, to_id, vars, ref, fin_at, msgid)
VALUES (1, 0, 1, 2, 1, 0, 5, 'c0', NULL, NULL, NULL, 'acct', 'u1', '{"name":"A"}', NULL, 7, 'm-1'),
       (1, 1, 2, 0, 0, 0, 0, '', NULL, NULL, NULL, 'acct', 'u2', NULL, 'r2', 0, NULL),
       (1, 0, 3, 0, 0, 0, 0, '', NULL, NULL, NULL, 'acct', 'u3', '{"name":"C"}', NULL, 0, NULL),
       (1, 1, 4, 0, 0, 0, 0, '', NULL, NULL, NULL, 'acct', 'u4', NULL, NULL, 0, NULL),
       (1, 0, 5, 0, 0, 0, 0, '', NULL, NULL, NULL, 'acct', 'u5', NULL, NULL, 0, NULL),
       (1, 0, 7, 0, 0, 0, 0, '', NULL, NULL, NULL, 'acct', 'u7', NULL, NULL, 0, NULL)`)
	for _, q := range qs {
		if _, err := old.ExecContext(ctx, q); err != nil {
			t.Fatalf("write version 19 file: %v", err)
		}
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	s := openTemp(t, path)
	page, err := s.ListItems(ctx, store.ListItemsParams{JobID: "job-1"})
	if err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprint(len(page.Items))
	for _, it := range page.Items {
		got += fmt.Sprintf(" %d:%d:%s:%s:%s:%s:%v", it.Seq, it.Shard, it.Status, it.To, it.Ref, it.MsgID, it.Vars)
	}
	want := "6 1:0:confirmed:u1::m-1:map[name:A] 2:1:pending:u2:r2::map[] 3:0:pending:u3:::map[name:C] 4:1:pending:u4:::map[] 5:0:pending:u5:::map[] 7:0:pending:u7:::map[]"
	if got != want {
		t.Fatalf("migrated items:\n%s\nwant\n%s", got, want)
	}
	c, err := s.ClaimItems(ctx, store.ClaimItemsParams{JobID: "job-1", Index: 0, Max: 2, Now: storetest.Epoch, ClaimID: "c1"})
	if err != nil || !slices.Equal(seqsOf(c.Items), []int64{3, 5}) || c.NextDueAt != storetest.Epoch {
		t.Fatalf("claim of 2 = %v (next due %v), %v; want 3 and 5, more due", seqsOf(c.Items), c.NextDueAt, err)
	}
	res, err := s.UpdateItems(ctx, store.UpdateItemsParams{JobID: "job-1", Index: 0, At: storetest.Epoch, Updates: []store.ItemUpdate{
		{Seq: 3, From: store.ItemSubmitted, ClaimID: "c1", To: store.ItemConfirmed, MsgID: "m-3"},
		{Seq: 5, From: store.ItemSubmitted, ClaimID: "c1", To: store.ItemConfirmed, MsgID: "m-5"},
		{Seq: 1, From: store.ItemSubmitted, To: store.ItemFailed},
	}})
	if err != nil || !slices.Equal(res.Rejected, []int64{1}) || res.Delta != (store.Counts{Submitted: -2, Confirmed: 2}) {
		t.Fatalf("settle = %+v, %v", res, err)
	}
	items, err := s.GetItems(ctx, store.GetItemsParams{JobID: "job-1", Shard: 0, Seqs: []int64{7, 5, 3, 2, 1}})
	if err != nil {
		t.Fatal(err)
	}
	got = ""
	for _, it := range items {
		got += fmt.Sprintf(" %d:%s:%s:%v", it.Seq, it.Status, it.MsgID, it.Vars)
	}
	if want := " 1:confirmed:m-1:map[name:A] 3:confirmed:m-3:map[name:C] 5:confirmed:m-5:map[] 7:pending::map[]"; got != want {
		t.Fatalf("GetItems after the claim:%s, want%s", got, want)
	}
	sh, err := s.RecountShard(ctx, "job-1", 0)
	if err != nil || sh.Counts != (store.Counts{Pending: 1, Confirmed: 3}) {
		t.Fatalf("recount of shard 0 = %+v, %v", sh.Counts, err)
	}
	var rows, bodies int
	if err := s.r.QueryRowContext(ctx, `SELECT count(*), count(body) FROM items WHERE job_no = 1 AND shard = 0`).Scan(&rows, &bodies); err != nil {
		t.Fatal(err)
	}
	// Rows are not joined: 3 and 5 were two, each rewritten as a run.
	if rows != 4 || bodies != 2 {
		t.Fatalf("shard 0 in %d rows (%d runs written since), want 4: items 1 and 7 as they were, 3 and 5 rewritten", rows, bodies)
	}
}

func seqsOf(items []store.Item) []int64 {
	out := make([]int64, len(items))
	for i, it := range items {
		out[i] = it.Seq
	}
	return out
}

// TestVarsRoundTrip: an item's variables come back from their encoding
// as they went in (none as nil), and a cut or padded encoding is refused,
// as is a count of no pairs (encodeVars writes "" for none).
func TestVarsRoundTrip(t *testing.T) {
	if got, err := decodeVars("\x00"); !errors.Is(err, errCorruptRun) {
		t.Fatalf("encoding of zero pairs decoded as %v, %v; want it refused as corrupt", got, err)
	}
	rapid.Check(t, func(rt *rapid.T) {
		m := rapid.MapOfN(rapid.StringN(0, 20, -1), rapid.StringN(0, 60, -1), 0, 8).Draw(rt, "vars")
		enc := encodeVars(m)
		got, err := decodeVars(enc)
		if err != nil || !maps.Equal(got, m) || (len(m) == 0) != (got == nil) {
			rt.Fatalf("round trip of %v: %v, %v", m, got, err)
		}
		if len(m) == 0 {
			return
		}
		// ("" is no variables.)
		if cut := rapid.IntRange(1, len(enc)-1).Draw(rt, "cut"); cut > 0 {
			if _, err := decodeVars(enc[:cut]); !errors.Is(err, errCorruptRun) {
				rt.Fatalf("encoding of %v cut at %d: %v", m, cut, err)
			}
		}
		if _, err := decodeVars(enc + "x"); !errors.Is(err, errCorruptRun) {
			rt.Fatalf("padded encoding of %v: %v", m, err)
		}
	})
}

// TestDamagedRunRowsAreRefused: a row of items whose count, span or body
// a damaged file has changed is reported as corrupt by a listing and by a
// claim (which changes nothing then), never read as other items (items
// lost, or one sent twice).
func TestDamagedRunRowsAreRefused(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := openTemp(t, filepath.Join(t.TempDir(), "store.db"))
	p, items := storetest.NewJob("tenant", 1, 20)
	if _, err := s.CreateJob(ctx, p); err != nil {
		t.Fatal(err)
	}
	if err := s.PutItems(ctx, store.PutItemsParams{JobID: p.Job.ID, Items: items}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.TransitionJob(ctx, store.TransitionJobParams{JobID: p.Job.ID, To: store.JobRunning, At: storetest.Epoch}); err != nil {
		t.Fatal(err)
	}
	var no, first, n, span int64
	var body []byte
	err := s.write(ctx, func(tx *sql.Tx) error {
		return tx.QueryRowContext(ctx, `SELECT i.job_no, i.seq, i.n, i.span, i.body FROM items i JOIN jobs j ON j.no = i.job_no WHERE j.id = ?`, p.Job.ID).
			Scan(&no, &first, &n, &span, &body)
	})
	if err != nil || n != 20 || body == nil {
		t.Fatalf("the job's 20 items are not one run: n %d, body %d bytes, %v", n, len(body), err)
	}
	set := func(n, span int64, body []byte) {
		t.Helper()
		err := s.write(ctx, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `UPDATE items SET n = ?, span = ?, body = ? WHERE job_no = ? AND seq = ?`, n, span, body, no, first)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name    string
		n, span int64
		body    []byte
		// claim: a claim refuses the row too (a claim does not decode
		// the items it leaves, so a span that only disagrees with the
		// body is found by the next listing).
		claim bool
	}{
		{"no items", 0, span, body, true},
		{"more than runMax items", runMax + 1, span, body, true},
		{"a negative span", n, -1, body, true},
		{"a span past runSpan", n, runSpan + 1, body, true},
		{"a span the body does not reach", n, span + 1, body, false},
		{"items but no body", n, span, nil, true},
		{"items in no span and no body", n, 0, nil, true},
	} {
		set(tc.n, tc.span, tc.body)
		if res, err := s.ListItems(ctx, store.ListItemsParams{JobID: p.Job.ID, Limit: 50}); !errors.Is(err, errCorruptRun) {
			t.Errorf("%s: listed %d items, %v; want %v", tc.name, len(res.Items), err, errCorruptRun)
		}
		// A claim reads the row without decoding it all, and cuts it.
		if !tc.claim {
			continue
		}
		if res, err := s.ClaimItems(ctx, store.ClaimItemsParams{JobID: p.Job.ID, Index: 0, Max: 5, Now: storetest.Epoch, ClaimID: "c"}); !errors.Is(err, errCorruptRun) {
			t.Errorf("%s: claimed %d items, %v; want %v", tc.name, len(res.Items), err, errCorruptRun)
		}
	}
	set(n, span, body)
	if res, err := s.ListItems(ctx, store.ListItemsParams{JobID: p.Job.ID, Limit: 50}); err != nil || len(res.Items) != 20 {
		t.Fatalf("the row restored: %d items, %v; want 20", len(res.Items), err)
	}
}
