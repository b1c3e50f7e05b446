package dynamostore

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"pgregory.net/rapid"
)

func TestSlotsRoundTrip(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(0, pageWidth).Draw(t, "n")
		base := rapid.Int64Range(1, 1<<40).Draw(t, "base")
		times := []int64{0, base, base + 1, base + 86400, base - 5}
		cats := []string{"", "retryable", "uncertain", "a;b!c#d@e:f|g%", "永久"}
		slots := make([]slot, n)
		for i := range slots {
			st := rapid.SampledFrom([]byte("pscfa")).Draw(t, "status")
			s := slot{status: st, attempts: rapid.IntRange(0, 40).Draw(t, "attempts"), claim: -1,
				next: rapid.Int64Range(0, 1<<62).Draw(t, "next"), category: rapid.SampledFrom(cats).Draw(t, "cat")}
			if st == 's' {
				s.claim = rapid.IntRange(0, 3).Draw(t, "claim")
			}
			s.sub, s.fin = rapid.SampledFrom(times).Draw(t, "sub"), rapid.SampledFrom(times).Draw(t, "fin")
			s.msg = rapid.Bool().Draw(t, "msg")
			if rapid.Bool().Draw(t, "repeat") && i > 0 {
				s = slots[i-1]
			}
			slots[i] = s
		}
		got, err := decodeSlots(encodeSlots(slots, base), n, base)
		if err != nil {
			t.Fatalf("decode: %v", err)
		}
		if !slices.Equal(got, slots) {
			t.Fatalf("round trip changed the slots:\n%v\n%v", slots, got)
		}
		claims := []claimRef{{id: "c|1;x", at: 5}, {id: "", at: 0}, {id: "πλ", at: 1 << 60}}
		gotClaims, err := decodeClaims(encodeClaims(claims))
		if err != nil || !slices.Equal(gotClaims, claims) {
			t.Fatalf("claims round trip = %v, %v", gotClaims, err)
		}
	})
}

func TestMsgsRoundTrip(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		ids := []string{"m1", "m2", "a=b;c+d%", "消息"}
		m := map[int]string{}
		for o := 0; o < pageWidth; o++ {
			if rapid.Bool().Draw(t, "has") {
				m[o] = rapid.SampledFrom(ids).Draw(t, "id")
			}
		}
		got, err := decodeMsgs(encodeMsgs(m))
		if err != nil || !maps.Equal(got, m) {
			t.Fatalf("msgs round trip = %v, %v; want %v", got, err, m)
		}
	})
	// One id for 100 recipients of one call is written once.
	one := map[int]string{}
	for o := 100; o < 200; o++ {
		one[o] = "msgid-of-the-call"
	}
	if enc := encodeMsgs(one); enc != "100+100=msgid-of-the-call" {
		t.Errorf("encodeMsgs of one call's id = %q", enc)
	}
	// A whole page of one call's recipients.
	all := map[int]string{}
	for o := range pageWidth {
		all[o] = "mass"
	}
	if got, err := decodeMsgs(encodeMsgs(all)); err != nil || !maps.Equal(got, all) {
		t.Errorf("a page of one id: round trip %d ids, %v", len(got), err)
	}
	// A gap, or another id, starts a new run; a single one has no length.
	if enc := encodeMsgs(map[int]string{0: "a", 1: "a", 2: "a", 4: "a", 5: "b"}); enc != "0+3=a;4=a;5=b" {
		t.Errorf("encodeMsgs = %q, want %q", enc, "0+3=a;4=a;5=b")
	}
}

func TestMembersRoundTrip(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		block := rapid.Int64Range(0, 1<<30).Draw(t, "block")
		var seqs []int64
		for off := int64(0); off < pageWidth; off++ {
			if rapid.Bool().Draw(t, "member") {
				seqs = append(seqs, block*pageWidth+off)
			}
		}
		got, err := decodeMembers(block, encodeMembers(block, seqs))
		if err != nil || !slices.Equal(got, seqs) {
			t.Fatalf("members round trip = %v, %v; want %v", got, err, seqs)
		}
		m := members{seqs: seqs}
		for i, s := range seqs {
			if m.ordinal(s) != i {
				t.Fatalf("ordinal(%d) = %d, want %d", s, m.ordinal(s), i)
			}
		}
	})
}

// TestMembersStayCompact: a page's members are written as offsets from
// its block, consecutive ones as one run "<start>+<len>", a single one
// without a length: the page item stays small (its size is what a write
// costs).
func TestMembersStayCompact(t *testing.T) {
	t.Parallel()
	base := int64(3 * pageWidth)
	seqs := []int64{base + 0, base + 1, base + 2, base + 5, base + 7, base + 8}
	if got, want := encodeMembers(3, seqs), "0+3,5,7+2"; got != want {
		t.Fatalf("encodeMembers = %q, want %q", got, want)
	}
}

func TestDecodeRejectsCorruptState(t *testing.T) {
	t.Parallel()
	for _, enc := range []string{"3:p0", "x:p0", "2:p", "2:pz", "2:p0@!!", "0:p0", "2:s1#q"} {
		if _, err := decodeSlots(enc, 2, 0); err == nil {
			t.Errorf("decodeSlots(%q, 2) accepted a corrupt state", enc)
		}
	}
	if _, err := decodeMembers(0, "5,3"); err == nil {
		t.Errorf("decodeMembers accepted members out of order")
	}
	for _, enc := range []string{"5", "x=a", "-1=a", "5+0=a", "5+-1=a", "5+x=a", "5+257=a", "5=%zz"} {
		if _, err := decodeMsgs(enc); err == nil {
			t.Errorf("decodeMsgs accepted %q", enc)
		}
	}
	for _, enc := range []string{"5+0", "5+-2", "5+x", "5,5", "3+3,4"} {
		if _, err := decodeMembers(0, enc); err == nil {
			t.Errorf("decodeMembers accepted the run %q", enc)
		}
	}
}

// TestStatusPageSize checks what dynalite cannot: the status page stays far
// below DynamoDB's 400 KB item limit in the worst case and within one write
// unit (1 KB) in the sender's steady state.
func TestStatusPageSize(t *testing.T) {
	t.Parallel()
	s := &Store{}
	const job = "0123456789abcdef0123456789abcdef" // a long job id
	fresh := &page{slots: make([]slot, pageWidth)}
	for i := range fresh.slots {
		fresh.slots[i] = slot{status: 'p', claim: -1}
	}
	if n := recordSize(s.pageItem(job, 999, 1<<20, fresh)); n > 300 {
		t.Errorf("fresh page of %d items is %d bytes", pageWidth, n)
	}

	// Steady state: confirmed so far, one claim of 10 in flight, rest fresh,
	// a few failures.
	steady := &page{slots: make([]slot, pageWidth)}
	for i := range steady.slots {
		switch {
		case i < 100:
			steady.slots[i] = slot{status: 'c', attempts: 1, claim: -1}
		case i < 110:
			steady.slots[i] = slot{status: 's', attempts: 1, claim: steady.addClaim("claim-"+strings.Repeat("x", 30), 1<<60)}
		default:
			steady.slots[i] = slot{status: 'p', claim: -1}
		}
	}
	for _, i := range []int{7, 42, 77} {
		steady.slots[i] = slot{status: 'f', attempts: 1, claim: -1, category: "permanent"}
	}
	steady.sub = 1 << 60
	n := recordSize(s.pageItem(job, 999, 1<<20, steady))
	t.Logf("steady-state status page: %d bytes", n)
	if n > 1024 {
		t.Errorf("steady-state page is %d bytes, want ≤ 1 KB (one write unit)", n)
	}

	// A full page of the sender's steady state: every item confirmed, ten
	// per claim, each claim a second apart and confirmed a second later,
	// all with message ids of which the last 20 are still in the page and
	// the rest in 16 msgid records.
	full := &page{slots: make([]slot, pageWidth), msgs: map[int]string{}}
	t0 := int64(1 << 31)
	for i := range full.slots {
		sub := t0 + int64(i/10)
		full.slots[i] = slot{status: 'c', attempts: 1, claim: -1, sub: sub, fin: sub + 1, msg: true}
		if i >= pageWidth-20 {
			full.msgs[i] = fmt.Sprintf("m%08x-%d", 0xdeadbeef, 100000+i)
		}
	}
	for i := range 16 {
		full.segs = append(full.segs, fmt.Sprintf("%08x", i))
	}
	n = recordSize(s.pageItem(job, 999, 1<<20, full))
	t.Logf("full status page with outcome details: %d bytes", n)
	if n > 1024 {
		t.Errorf("full page with outcome details is %d bytes, want ≤ 1 KB (one write unit)", n)
	}

	// Worst case: every item in its own run, every one submitted under its
	// own claim with a long id.
	worst := &page{slots: make([]slot, pageWidth)}
	for i := range worst.slots {
		worst.slots[i] = slot{status: 's', attempts: i % 50, next: 1<<62 + int64(i),
			claim: worst.addClaim(fmt.Sprintf("%064d", i), 1<<62+int64(i)), category: "rate_limited"}
	}
	worst.sub = 1 << 62
	n = recordSize(s.pageItem(job, 999, 1<<20, worst))
	t.Logf("worst-case status page: %d bytes", n)
	if n > 100*1024 {
		t.Errorf("worst-case page is %d bytes, want ≤ 100 KB (item limit 400 KB)", n)
	}
}

func TestPayloadCompression(t *testing.T) {
	t.Parallel()
	data := map[string]payload{}
	for i := range dataWidth {
		data[fmt.Sprint(i)] = payload{To: fmt.Sprintf("user-%06d", i), Vars: map[string]string{"name": fmt.Sprintf("Name %d", i)}}
	}
	z, err := encodePayloads(data)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodePayloads(map[string]types.AttributeValue{"z": &types.AttributeValueMemberB{Value: z}})
	if err != nil || len(got) != len(data) || got["7"].To != "user-000007" || got["7"].Vars["name"] != "Name 7" {
		t.Fatalf("payload round trip = %v, %v", got, err)
	}
	if len(z) > 1024 {
		t.Errorf("payload record of %d typical items is %d bytes compressed, want ≤ 1 KB", dataWidth, len(z))
	}
}
