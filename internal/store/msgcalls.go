package store

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// MsgCall records one provider call accepted whole under the provider's
// message id, whose final result arrives later (WeChat's mass send: a
// MASSSENDJOBFINISH event, or message/mass/get): which items of which
// shard it carried, under which claim. The sender writes it before it
// records the call's items as submitted with that id; a provider event
// finds the items by (Account, MsgID), the reconciler a job's calls by
// JobID.
type MsgCall struct {
	Account string
	MsgID   string
	JobID   string
	Shard   int
	ClaimID string
	Seqs    []int64
	At      time.Time
}

// MaxMsgCallSeqs is the most items one MsgCall holds (WeChat's 10,000
// OpenIDs of one mass send).
const MaxMsgCallSeqs = 10_000

// MsgCallStore is the provider-message-id aggregate of the store port: a
// port of its own beside Store (as WebhookStore); both adapters implement
// it and storetest proves them.
type MsgCallStore interface {
	// PutMsgCall stores c. Storing the same (Account, MsgID) again
	// replaces it (a provider never reuses an id for another call).
	// ErrInvalidArgument: an empty id, no seqs or over MaxMsgCallSeqs.
	PutMsgCall(ctx context.Context, c MsgCall) error
	// GetMsgCall reads the call of account's message id (ErrNotFound).
	GetMsgCall(ctx context.Context, account, msgID string) (MsgCall, error)
	// ListMsgCalls lists a job's calls, in no particular order.
	ListMsgCalls(ctx context.Context, jobID string) ([]MsgCall, error)
}

// ValidMsgCall says whether c may be stored.
func ValidMsgCall(c MsgCall) bool {
	return c.Account != "" && c.MsgID != "" && c.JobID != "" && c.Shard >= 0 && len(c.Seqs) > 0 && len(c.Seqs) <= MaxMsgCallSeqs
}

// EncodeSeqs writes seqs compactly as runs ("1-40,42,50-51"), in order;
// the adapters store a MsgCall's seqs so (10,000 seqs of a shard's run
// take a few bytes, not 60 kB).
func EncodeSeqs(seqs []int64) string {
	s := slices.Clone(seqs)
	slices.Sort(s)
	s = slices.Compact(s)
	var b strings.Builder
	for i := 0; i < len(s); {
		j := i
		for j+1 < len(s) && s[j+1] == s[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(s[i], 10))
		if j > i {
			b.WriteByte('-')
			b.WriteString(strconv.FormatInt(s[j], 10))
		}
		i = j + 1
	}
	return b.String()
}

// DecodeSeqs reads what EncodeSeqs wrote.
func DecodeSeqs(v string) ([]int64, error) {
	var out []int64
	for run := range strings.SplitSeq(v, ",") {
		lo, hi, isRun := strings.Cut(run, "-")
		a, err := strconv.ParseInt(lo, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("seqs %q: %w", v, err)
		}
		b := a
		if isRun {
			if b, err = strconv.ParseInt(hi, 10, 64); err != nil || b < a || b-a >= MaxMsgCallSeqs {
				return nil, fmt.Errorf("seqs %q: bad run %q", v, run)
			}
		}
		for n := a; n <= b; n++ {
			out = append(out, n)
		}
	}
	return out, nil
}
