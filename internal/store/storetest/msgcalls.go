package storetest

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/store"
)

// testMsgCalls checks the provider-message-id aggregate
// (store.MsgCallStore): a call is found by its account's message id and
// among its job's calls with every seq it holds; the same id of another
// account is another call; storing an id again replaces it; bad calls are
// refused.
func testMsgCalls(t *testing.T, s store.Store, _ Capabilities) {
	ms, ok := s.(store.MsgCallStore)
	if !ok {
		t.Fatalf("%T does not implement store.MsgCallStore", s)
	}
	ctx := ctxOf(t)
	big := make([]int64, store.MaxMsgCallSeqs)
	for i := range big {
		big[i] = int64(i) * 2 // no runs: the longest encoding
	}
	a := store.MsgCall{Account: "wx-a", MsgID: "1000001", JobID: "job-mc-1", Shard: 3, ClaimID: "claim-1",
		Seqs: []int64{7, 1, 2, 3, 9}, At: at(time.Second)}
	b := store.MsgCall{Account: "wx-b", MsgID: "1000001", JobID: "job-mc-1", Shard: 0, ClaimID: "claim-2", Seqs: big, At: at(2 * time.Second)}
	other := store.MsgCall{Account: "wx-a", MsgID: "1000002", JobID: "job-mc-2", Shard: 1, ClaimID: "claim-3", Seqs: []int64{0}, At: at(3 * time.Second)}
	for _, c := range []store.MsgCall{a, b, other} {
		if err := ms.PutMsgCall(ctx, c); err != nil {
			t.Fatalf("PutMsgCall(%s/%s): %v", c.Account, c.MsgID, err)
		}
	}
	same := func(got, want store.MsgCall) bool {
		w := slices.Clone(want.Seqs)
		slices.Sort(w)
		return got.Account == want.Account && got.MsgID == want.MsgID && got.JobID == want.JobID && got.Shard == want.Shard &&
			got.ClaimID == want.ClaimID && slices.Equal(got.Seqs, w) && got.At.Equal(want.At)
	}
	for _, want := range []store.MsgCall{a, b, other} {
		got, err := ms.GetMsgCall(ctx, want.Account, want.MsgID)
		if err != nil || !same(got, want) {
			t.Fatalf("GetMsgCall(%s, %s) = %+v (%d seqs), %v; want %s of job %s with %d seqs", want.Account, want.MsgID,
				got.JobID, len(got.Seqs), err, want.ClaimID, want.JobID, len(want.Seqs))
		}
	}
	if _, err := ms.GetMsgCall(ctx, "wx-c", "1000001"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetMsgCall of an unknown account's id: %v, want ErrNotFound", err)
	}
	list, err := ms.ListMsgCalls(ctx, "job-mc-1")
	if err != nil || len(list) != 2 {
		t.Fatalf("ListMsgCalls(job-mc-1) = %d calls, %v; want 2", len(list), err)
	}
	for _, got := range list {
		want := a
		if got.Account == "wx-b" {
			want = b
		}
		if !same(got, want) {
			t.Fatalf("ListMsgCalls gave %+v, want %+v", got, want)
		}
	}
	if list, err := ms.ListMsgCalls(ctx, "job-mc-none"); err != nil || len(list) != 0 {
		t.Fatalf("ListMsgCalls of a job without calls = %v, %v; want none", list, err)
	}
	// The same id stored again replaces the call.
	a2 := a
	a2.Seqs, a2.ClaimID = []int64{4}, "claim-9"
	if err := ms.PutMsgCall(ctx, a2); err != nil {
		t.Fatal(err)
	}
	if got, err := ms.GetMsgCall(ctx, a.Account, a.MsgID); err != nil || !same(got, a2) {
		t.Fatalf("after replacing: %+v, %v; want %+v", got, err, a2)
	}
	for name, c := range map[string]store.MsgCall{
		"no msg id":      {Account: "wx-a", JobID: "j", Seqs: []int64{1}},
		"no account":     {MsgID: "1", JobID: "j", Seqs: []int64{1}},
		"no seqs":        {Account: "wx-a", MsgID: "1", JobID: "j"},
		"too many":       {Account: "wx-a", MsgID: "1", JobID: "j", Seqs: append(slices.Clone(big), 1e9)},
		"no job":         {Account: "wx-a", MsgID: "1", Seqs: []int64{1}},
		"negative shard": {Account: "wx-a", MsgID: "1", JobID: "j", Shard: -1, Seqs: []int64{1}},
	} {
		if err := ms.PutMsgCall(ctx, c); !errors.Is(err, store.ErrInvalidArgument) {
			t.Errorf("PutMsgCall(%s) = %v, want ErrInvalidArgument", name, err)
		}
	}
}
