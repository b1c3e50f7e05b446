package dynamostore_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/store/dynamostore"
)

// msgIDShapes are provider message ids of the shapes and lengths an
// encoding of them must keep exactly: random ones of several alphabets and
// lengths (numeric as WeChat's, base64url as WeCom's), hex with leading
// zeros and upper case, characters the page encodings use as separators,
// non-ASCII text, spaces, and long ones.
var msgIDShapes = []struct {
	name string
	id   func(seq int64) string
}{
	{"one character", func(seq int64) string { return randomString(base64URL, 1, 10, seq) }},
	{"19 digits", func(seq int64) string { return randomString(decimalDigits, 19, 11, seq) }},
	{"leading zeros", func(seq int64) string { return "000" + randomString(decimalDigits, 12, 12, seq) }},
	{"hex 32", func(seq int64) string { return randomString(hexDigits, 32, 13, seq) }},
	{"hex 32 upper case", func(seq int64) string { return strings.ToUpper(randomString(hexDigits, 32, 14, seq)) }},
	{"hex odd length", func(seq int64) string { return "0" + randomString(hexDigits, 30, 15, seq) }},
	{"base64url 32", func(seq int64) string { return randomString(base64URL, 32, 16, seq) }},
	{"base64url 64", func(seq int64) string { return randomString(base64URL, 64, 17, seq) }},
	{"base64 padded", func(seq int64) string { return randomString(base64URL[:62]+"+/", 22, 18, seq) + "==" }},
	{"separators", func(seq int64) string {
		return fmt.Sprintf(";=+,%%#|~^*!@:&?%d/", seq) + randomString(base64URL, 8, 19, seq)
	}},
	{"non-ASCII", func(seq int64) string {
		return fmt.Sprintf("消息-üñ-%d-", seq) + randomString(hexDigits, 8, 20, seq)
	}},
	{"spaces", func(seq int64) string { return " id " + randomString(hexDigits, 6, 21, seq) + " " }},
	{"200 characters", func(seq int64) string { return randomString(base64URL, 200, 22, seq) }},
}

// TestMessageIDsRoundTrip: every item of a job of 600 over two shards is
// confirmed with a message id of one of msgIDShapes (ten items of one
// call share an id), and the listing shows each item's own id, byte for
// byte, whether it stayed in its status page or moved to a msgid record.
func TestMessageIDsRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t, dynamostore.Options{})
	const n, shards = 600, 2
	jobID := putPendingJob(t, s, n, shards)
	want := func(seq int64) string {
		if seq >= 100 && seq < 120 && seq%2 == 0 { // one multi-recipient call
			return "shared-" + randomString(base64URL, 32, 23, 0)
		}
		return msgIDShapes[int(seq)%len(msgIDShapes)].id(seq)
	}
	t0 := time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)
	for index := range shards {
		for round := 0; ; round++ {
			now := t0.Add(time.Duration(round) * time.Second)
			claimID := fmt.Sprintf("c%d-%d", index, round)
			cl, err := s.ClaimItems(ctx, store.ClaimItemsParams{JobID: jobID, Index: index, Max: 10, Now: now, ClaimID: claimID})
			if err != nil {
				t.Fatalf("ClaimItems: %v", err)
			}
			if len(cl.Items) == 0 {
				break
			}
			var ups []store.ItemUpdate
			for _, it := range cl.Items {
				ups = append(ups, store.ItemUpdate{Seq: it.Seq, From: store.ItemSubmitted, ClaimID: claimID, To: store.ItemConfirmed, MsgID: want(it.Seq)})
			}
			if res, err := s.UpdateItems(ctx, store.UpdateItemsParams{JobID: jobID, Index: index, Updates: ups, At: now}); err != nil || len(res.Rejected) > 0 {
				t.Fatalf("UpdateItems = %+v, %v", res, err)
			}
		}
	}
	items := listAllItems(t, s, jobID)
	if len(items) != n {
		t.Fatalf("listed %d items, want %d", len(items), n)
	}
	for _, it := range items {
		if it.Status != store.ItemConfirmed || it.MsgID != want(it.Seq) {
			t.Errorf("item %d (%s): %s, MsgID %q, want confirmed %q", it.Seq, msgIDShapes[int(it.Seq)%len(msgIDShapes)].name, it.Status, it.MsgID, want(it.Seq))
		}
	}
}
