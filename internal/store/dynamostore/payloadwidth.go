package dynamostore

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/qunfa/qunfa/internal/store"
)

// Payload records sized by bytes. A payload record (D#<seq/width>) holds
// the to, vars and ref of the items of width consecutive seqs, deflated.
// A write costs a unit per KB begun, so a record should end just short of
// a whole KB: 64 items of the mock's data deflate to about 510 bytes (half
// a unit wasted), 64 with a random 19-digit reference each to about 1,270
// (two units for 1.25 KB), while 64 with a random UUID each come to 1,980
// (two units well used). The width is therefore the job's own: the first
// PutItems measures its items and sets the width that costs the fewest
// write units per item (payloadWidth) on the job record (dw, once,
// conditionally); every later PutItems reads it there, and the member
// lists carry it (dw, when not 64) so that the readers of a page's items,
// which read the member list anyway, find their payload records without
// reading the job. A job record without dw (jobs created before) and a
// member list without it mean 64.

// attrDataWidth names the width attribute of job records and member lists.
const attrDataWidth = "dw"

// Bounds of a job's payload width. A record stays within 4 KB, so that a
// read of it is one read unit, and is sized with payloadMargin bytes to
// spare per KB for items bigger than the ones measured.
const (
	minPayloadWidth = 8
	maxPayloadWidth = 256
	maxPayloadBytes = 4 << 10
	payloadMargin   = 48
)

// recordDataWidth is the payload width a job record or member list
// records: dataWidth when it has none (layouts before payloadwidth.go), 0
// for a job not sized yet.
func recordDataWidth(rec map[string]types.AttributeValue) int64 {
	if _, ok := rec[attrDataWidth]; !ok {
		return dataWidth
	}
	return getN(rec, attrDataWidth)
}

// sizePayloads sets the payload width of job j from items, the first
// PutItems's, and returns it; when another PutItems set it first, it
// returns that one.
func (s *Store) sizePayloads(ctx context.Context, j store.Job, items []store.Item) (int64, error) {
	w := payloadWidth(j.ID, j.Total, items)
	_, err := s.updateItem(ctx, &dynamodb.UpdateItemInput{
		Key:                       key(jobPK(j.ID), skJob),
		UpdateExpression:          aws.String("SET " + attrDataWidth + " = :w"),
		ConditionExpression:       aws.String(attrDataWidth + " = :unsized"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":w": attrN(w), ":unsized": attrN(0)},
		ReturnValues:              types.ReturnValueNone,
	})
	if err == nil {
		return w, nil
	}
	if !isConditionFailed(err) {
		return 0, fmt.Errorf("size payload records: %w", err)
	}
	_, l, err := s.getJobLayout(ctx, j.ID)
	if err != nil {
		return 0, err
	}
	if l.dataWidth == 0 {
		return 0, fmt.Errorf("size payload records: %w: job record lost its width", store.ErrConflict)
	}
	return l.dataWidth, nil
}

// payloadWidth is the width whose payload records cost the fewest write
// units per item (the largest among equals: fewer records to read),
// measured on the first items (by seq) of items numbered as the job's
// last seqs (longer keys: from total, or a million when it is not known
// yet), each record's size with payloadMargin bytes per KB to spare and
// within maxPayloadBytes; beyond the items measured, the size per item is
// extrapolated.
func payloadWidth(jobID string, total int64, items []store.Item) int64 {
	sample := slices.Clone(items)
	slices.SortFunc(sample, func(a, b store.Item) int { return cmp.Compare(a.Seq, b.Seq) })
	sample = sample[:min(len(sample), maxPayloadWidth)]
	if len(sample) == 0 {
		return dataWidth
	}
	base := total
	if base <= 0 {
		base = 1_000_000
	}
	pk := jobPK(jobID)
	size := func(n int) int {
		data := make(map[string]payload, n)
		for i, it := range sample[:n] {
			data[strconv.FormatInt(base+int64(i), 10)] = payload{To: it.To, Vars: it.Vars, Ref: it.Ref}
		}
		z, err := encodePayloads(data)
		if err != nil {
			return maxPayloadBytes + 1
		}
		return recordSize(map[string]types.AttributeValue{
			attrPK: attrS(pk), attrSK: attrS(skData(base)), "z": &types.AttributeValueMemberB{Value: z}, "v": attrN(9),
		})
	}
	// Measured at a few widths (a deflate each), interpolated between
	// them, extrapolated past the sample.
	var at []int
	for _, w := range []int{0, 8, 16, 24, 32, 48, 64, 96, 128, 160, 192, 224, 256} {
		if w < len(sample) {
			at = append(at, w)
		}
	}
	at = append(at, len(sample))
	sizes := make([]int, len(at))
	for i, w := range at {
		sizes[i] = size(w)
	}
	estimate := func(w int) int {
		i := 1
		for i < len(at)-1 && at[i] < w {
			i++
		}
		w0, w1, s0, s1 := at[i-1], at[i], sizes[i-1], sizes[i]
		return s0 + (s1-s0)*(w-w0)/(w1-w0)
	}
	best, bestCost := int64(minPayloadWidth), math.Inf(1)
	for w := minPayloadWidth; w <= maxPayloadWidth; w++ {
		n := estimate(w)
		n += payloadMargin * (n/1024 + 1)
		if n > maxPayloadBytes {
			break
		}
		if cost := float64(writeUnits(n)) / float64(w); cost <= bestCost {
			best, bestCost = int64(w), cost
		}
	}
	return best
}
