package dynamostore

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"golang.org/x/sync/errgroup"

	"github.com/qunfa/qunfa/internal/store"
)

// freqPK is the partition of one recipient's frequency-cap charges: the
// tenant quoted, the account in hex, a dot, the recipient.
func freqPK(tenant, account, to string) string {
	return "FREQ#" + strconv.Quote(tenant) + "#" + hex.EncodeToString([]byte(account)) + "." + to
}

// freqCharge is one charged item in a recipient's record ("ch", JSON):
// K is "<job>#<seq>", At the charge time in Unix nanoseconds.
type freqCharge struct {
	K  string `json:"k"`
	At int64  `json:"at"`
}

// ChargeFrequency charges each item with a conditional write of its
// recipient's record (version check, retried on conflict): the record
// holds the charges still in the window (at most Cap.Max of them), so two
// senders charging the same recipient at once cannot both pass the cap.
// One consistent read and one write per charged item. On an error some
// items may have been charged: a retry of them is not charged twice.
func (s *Store) ChargeFrequency(ctx context.Context, p store.ChargeFrequencyParams) (store.ChargeFrequencyResult, error) {
	if p.Tenant == "" || p.Account == "" || p.JobID == "" || !p.Cap.Capped() {
		return store.ChargeFrequencyResult{}, fmt.Errorf("charge frequency: %w: tenant, account, job and a cap", store.ErrInvalidArgument)
	}
	if len(p.Charges) > store.MaxPutItems {
		return store.ChargeFrequencyResult{}, fmt.Errorf("charge frequency: %w: %d items, at most %d", store.ErrInvalidArgument, len(p.Charges), store.MaxPutItems)
	}
	now := nanos(p.Now)
	since := now - int64(p.Cap.WindowSec)*int64(time.Second)
	// Recipients are charged in parallel (their records are independent),
	// each recipient's items one after another, in the order given.
	var order []string
	byTo := map[string][]store.FrequencyCharge{}
	for _, c := range p.Charges {
		if _, ok := byTo[c.To]; !ok {
			order = append(order, c.To)
		}
		byTo[c.To] = append(byTo[c.To], c)
	}
	var mu sync.Mutex
	res := store.ChargeFrequencyResult{Capped: map[int64]bool{}}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(chargeParallelism)
	for _, to := range order {
		g.Go(func() error {
			for _, c := range byTo[to] {
				capped, err := s.chargeOne(gctx, p, c, now, since)
				if err != nil {
					return err
				}
				if capped {
					mu.Lock()
					res.Capped[c.Seq] = true
					mu.Unlock()
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return store.ChargeFrequencyResult{}, err
	}
	return res, nil
}

// chargeParallelism bounds the recipients one ChargeFrequency charges at
// once.
const chargeParallelism = 16

// chargeOne charges one item; it tells whether the item is over the cap.
func (s *Store) chargeOne(ctx context.Context, p store.ChargeFrequencyParams, c store.FrequencyCharge, now, since int64) (bool, error) {
	pk := freqPK(p.Tenant, p.Account, c.To)
	k := p.JobID + "#" + strconv.FormatInt(c.Seq, 10)
	for attempt := 0; attempt < s.opts.MaxRetries; attempt++ {
		rec, err := s.getItem(ctx, pk, skSingle)
		if err != nil {
			return false, fmt.Errorf("charge frequency %s: %w", c.To, err)
		}
		charges, err := freqChargesOf(rec, now)
		if err != nil {
			return false, fmt.Errorf("charge frequency %s: %w", c.To, err)
		}
		version := getN(rec, "v")
		live := charges[:0:0]
		for _, ch := range charges {
			if ch.At <= since {
				continue // out of the window: dropped
			}
			if ch.K == k {
				return false, nil // charged before: a retry of the same item
			}
			live = append(live, ch)
		}
		if len(live) >= p.Cap.Max {
			return true, nil
		}
		b, err := json.Marshal(append(live, freqCharge{K: k, At: now}))
		if err != nil {
			return false, fmt.Errorf("charge frequency %s: %w", c.To, err)
		}
		err = s.putItem(ctx, map[string]types.AttributeValue{
			attrPK: attrS(pk), attrSK: attrS(skSingle), "ch": attrS(string(b)), "v": attrN(version + 1),
			attrExpiresAt: attrN(freqExpiresAt(now, p.Cap.WindowSec)),
		}, "attribute_not_exists(pk) OR v = :v", nil, map[string]types.AttributeValue{":v": attrN(version)})
		if isConditionFailed(err) {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("charge frequency %s: %w", c.To, err)
		}
		return false, nil
	}
	return false, fmt.Errorf("charge frequency %s: %w: too much contention", c.To, store.ErrConflict)
}

// attrExpiresAt is the frequency records' TTL attribute (Unix seconds):
// template.yaml's TimeToLiveSpecification names it, so DynamoDB deletes a
// recipient's record once its last charge has left the window.
const attrExpiresAt = "expires_at"

// freqExpiresAt is when a record whose newest charge is at (Unix
// nanoseconds) holds no charge of a window of windowSec any more: the
// first whole second after the newest charge leaves it.
func freqExpiresAt(at int64, windowSec int) int64 {
	return at/int64(time.Second) + 1 + int64(windowSec)
}

// freqChargesOf decodes a recipient record's charges as of now (Unix
// nanoseconds): none when absent, and none when the record has expired.
// DynamoDB deletes expired records only eventually (typically within days)
// and an emulator never, so a record past its expires_at counts as
// deleted: its charges left the window it was written for, even when the
// account's window has grown since.
func freqChargesOf(rec map[string]types.AttributeValue, now int64) ([]freqCharge, error) {
	raw := getS(rec, "ch")
	if raw == "" {
		return nil, nil
	}
	if exp := getN(rec, attrExpiresAt); exp > 0 && exp*int64(time.Second) <= now {
		return nil, nil
	}
	var out []freqCharge
	if err := json.Unmarshal([]byte(raw), &out); err != nil {
		return nil, fmt.Errorf("decode charges: %w", err)
	}
	return out, nil
}

// FrequencyCounts reads the recipients' records with BatchGetItem
// (eventually consistent: a preview's estimate).
func (s *Store) FrequencyCounts(ctx context.Context, p store.FrequencyCountsParams) (map[string]int, error) {
	if p.Tenant == "" || p.Account == "" || p.WindowSec <= 0 {
		return nil, fmt.Errorf("frequency counts: %w: tenant, account and a window", store.ErrInvalidArgument)
	}
	since := nanos(p.Now) - int64(p.WindowSec)*int64(time.Second)
	keys := make([]map[string]types.AttributeValue, len(p.To))
	for i, to := range p.To {
		keys[i] = key(freqPK(p.Tenant, p.Account, to), skSingle)
	}
	recs, err := s.batchGet(ctx, keys, false)
	if err != nil {
		return nil, fmt.Errorf("frequency counts: %w", err)
	}
	out := map[string]int{}
	for _, to := range p.To {
		rec, ok := recs[freqPK(p.Tenant, p.Account, to)+"\x00"+skSingle]
		if !ok {
			continue
		}
		charges, err := freqChargesOf(rec, nanos(p.Now))
		if err != nil {
			return nil, fmt.Errorf("frequency counts %s: %w", to, err)
		}
		n := 0
		for _, ch := range charges {
			if ch.At > since {
				n++
			}
		}
		if n > 0 {
			out[to] = n
		}
	}
	return out, nil
}
