package dynamostore

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/qunfa/qunfa/internal/store"
)

// TakeSlots reads the account's schedule record (BUCKET#pace:<bucket>)
// and writes the advanced schedule back on condition that nobody wrote it
// since (version check), retrying on conflict, as TakeTokens does. Nothing
// is written when no slot is granted.
func (s *Store) TakeSlots(ctx context.Context, p store.TakeSlotsParams) (store.TakeSlotsResult, error) {
	if err := p.Validate(); err != nil {
		return store.TakeSlotsResult{}, err
	}
	pk := bucketPK(store.PaceRecord(p.Bucket))
	for attempt := 0; attempt < s.opts.MaxRetries; attempt++ {
		rec, err := s.getItem(ctx, pk, skSingle)
		if err != nil {
			return store.TakeSlotsResult{}, fmt.Errorf("take slots %q: %w", p.Bucket, err)
		}
		var st store.PaceState
		version := int64(0)
		if rec != nil {
			version = getN(rec, "v")
			st = store.PaceState{
				Next: getN(rec, "next"), Gap: getN(rec, "gap"), PrevGap: getN(rec, "prev"),
				MeanGap: getF(rec, "mean"), Drift: getF(rec, "drift"), WarmStart: getN(rec, "warm"),
			}
		}
		res, next := store.TakeSlots(st, rec == nil, p)
		if len(res.Slots) == 0 {
			return res, nil
		}
		err = s.putItem(ctx, map[string]types.AttributeValue{
			attrPK: attrS(pk), attrSK: attrS(skSingle),
			"next": attrN(next.Next), "gap": attrN(next.Gap), "prev": attrN(next.PrevGap),
			"mean": attrF(next.MeanGap), "drift": attrF(next.Drift), "warm": attrN(next.WarmStart), "v": attrN(version + 1),
		}, "attribute_not_exists(pk) OR v = :v", nil, map[string]types.AttributeValue{":v": attrN(version)})
		if isConditionFailed(err) {
			continue
		}
		if err != nil {
			return store.TakeSlotsResult{}, fmt.Errorf("take slots %q: %w", p.Bucket, err)
		}
		return res, nil
	}
	return store.TakeSlotsResult{}, fmt.Errorf("take slots %q: %w: too much contention", p.Bucket, store.ErrConflict)
}
