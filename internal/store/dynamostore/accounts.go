package dynamostore

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/qunfa/qunfa/internal/store"
)

// TakeTokens reads the bucket record and writes the refilled, reduced level
// back on condition that nobody wrote it since (version check), retrying on
// conflict. Nothing is written when nothing is granted.
func (s *Store) TakeTokens(ctx context.Context, p store.TakeTokensParams) (store.TakeTokensResult, error) {
	if p.Bucket == "" || p.Want < 0 || p.RatePerSec < 0 || p.Burst < 0 || p.WarmupSec < 0 ||
		math.IsNaN(p.RatePerSec) || math.IsNaN(p.Burst) || math.IsInf(p.RatePerSec, 0) || math.IsInf(p.Burst, 0) ||
		math.IsNaN(p.WarmupSec) || math.IsInf(p.WarmupSec, 0) {
		return store.TakeTokensResult{}, fmt.Errorf("take tokens %q: %w", p.Bucket, store.ErrInvalidArgument)
	}
	if p.Want == 0 {
		return store.TakeTokensResult{}, nil
	}
	now := nanos(p.Now)
	for attempt := 0; attempt < s.opts.MaxRetries; attempt++ {
		rec, err := s.getItem(ctx, bucketPK(p.Bucket), skSingle)
		if err != nil {
			return store.TakeTokensResult{}, fmt.Errorf("take tokens %q: %w", p.Bucket, err)
		}
		tokens, at, warm, version := p.Burst, now, int64(0), int64(0)
		var res store.TakeTokensResult
		var left float64
		if p.WarmupSec > 0 {
			// The bucket ramps up after an idle spell (store.TakeWarm).
			if rec != nil {
				version = getN(rec, "v")
				at, tokens, warm = getN(rec, "at"), getF(rec, "tok"), getN(rec, "warm")
			}
			var b store.WarmBucket
			res, b = store.TakeWarm(store.WarmBucket{Tokens: tokens, At: at, WarmStart: warm}, rec == nil, now, p)
			left, at, warm = b.Tokens, b.At, b.WarmStart
		} else {
			if rec != nil {
				version = getN(rec, "v")
				at = getN(rec, "at")
				tokens = getF(rec, "tok")
				if now > at {
					tokens += p.RatePerSec * float64(now-at) / float64(time.Second)
					at = now
				}
				tokens = math.Min(tokens, p.Burst)
			}
			granted := int(math.Min(float64(p.Want), math.Floor(tokens+1e-9)))
			if granted < 0 {
				granted = 0
			}
			res = store.TakeTokensResult{Granted: granted}
			left = tokens - float64(granted)
			if granted < p.Want {
				res.RetryAfter = retryAfter(left, p.RatePerSec)
			}
		}
		granted := res.Granted
		if granted == 0 {
			return res, nil
		}
		err = s.putItem(ctx, map[string]types.AttributeValue{
			attrPK: attrS(bucketPK(p.Bucket)), attrSK: attrS(skSingle),
			"tok": attrF(left), "at": attrN(at), "warm": attrN(warm), "v": attrN(version + 1),
		}, "attribute_not_exists(pk) OR v = :v", nil, map[string]types.AttributeValue{":v": attrN(version)})
		if isConditionFailed(err) {
			continue
		}
		if err != nil {
			return store.TakeTokensResult{}, fmt.Errorf("take tokens %q: %w", p.Bucket, err)
		}
		return res, nil
	}
	return store.TakeTokensResult{}, fmt.Errorf("take tokens %q: %w: too much contention", p.Bucket, store.ErrConflict)
}

// retryAfter is how long until the bucket holds one whole token again.
func retryAfter(left, rate float64) time.Duration {
	if rate <= 0 {
		return time.Duration(math.MaxInt64)
	}
	need := 1 - left
	if need <= 0 {
		return 0
	}
	return time.Duration(math.Ceil(need / rate * float64(time.Second)))
}

// PutAccount writes the account record (TENANT#<tenant>, ACCOUNT#<id>).
func (s *Store) PutAccount(ctx context.Context, a store.Account) (store.Account, error) {
	if a.Tenant == "" || a.ID == "" {
		return store.Account{}, fmt.Errorf("put account: %w: tenant and id are required", store.ErrInvalidArgument)
	}
	item := map[string]types.AttributeValue{
		attrPK: attrS(tenantPK(a.Tenant)), attrSK: attrS(skAccount + a.ID),
		"tenant": attrS(a.Tenant), "id": attrS(a.ID),
		"rate": attrF(a.RatePerSec), "burst": attrF(a.Burst), "reserve": attrF(a.OnlineReservePerSec),
		"maxPerCall": attrN(int64(a.MaxRecipientsPerCall)), "maxContent": attrN(int64(a.MaxContentBytes)),
		"warmup": attrN(int64(a.WarmupSec)), "fcMax": attrN(int64(a.FrequencyCap.Max)), "fcWin": attrN(int64(a.FrequencyCap.WindowSec)),
		"paceMode": attrS(a.Pacing.Mode), "paceMinGap": attrN(int64(a.Pacing.MinGapMs)),
		"bkCons": attrN(int64(a.Breaker.ConsecutiveFailures)), "bkRate": attrF(a.Breaker.FailureRate),
		"bkMin": attrN(int64(a.Breaker.MinSamples)), "bkCool": attrN(int64(a.Breaker.CooldownSec)),
		"updatedAt": attrN(nanos(a.UpdatedAt)),
	}
	if a.Provider != "" {
		item["provider"] = attrS(a.Provider)
	}
	if a.NoStatusLookup {
		item["noLookup"] = attrN(1)
	}
	if a.HTTP != nil {
		b, err := json.Marshal(a.HTTP)
		if err != nil {
			return store.Account{}, fmt.Errorf("put account %s/%s: %w", a.Tenant, a.ID, err)
		}
		item["http"] = attrS(string(b))
	}
	if err := s.putItem(ctx, item, "", nil, nil); err != nil {
		return store.Account{}, fmt.Errorf("put account %s/%s: %w", a.Tenant, a.ID, err)
	}
	return accountFrom(item), nil
}

func accountFrom(m map[string]types.AttributeValue) store.Account {
	var hp *store.HTTPProvider
	if raw := getS(m, "http"); raw != "" {
		hp = &store.HTTPProvider{}
		if err := json.Unmarshal([]byte(raw), hp); err != nil {
			hp = nil // written by PutAccount from the same type: never happens
		}
	}
	return store.Account{
		HTTP:                 hp,
		Tenant:               getS(m, "tenant"),
		ID:                   getS(m, "id"),
		RatePerSec:           getF(m, "rate"),
		Burst:                getF(m, "burst"),
		OnlineReservePerSec:  getF(m, "reserve"),
		MaxRecipientsPerCall: int(getN(m, "maxPerCall")),
		MaxContentBytes:      int(getN(m, "maxContent")),
		WarmupSec:            int(getN(m, "warmup")),
		FrequencyCap:         store.FrequencyCap{Max: int(getN(m, "fcMax")), WindowSec: int(getN(m, "fcWin"))},
		Provider:             getS(m, "provider"),
		NoStatusLookup:       getN(m, "noLookup") == 1,
		Pacing:               store.Pacing{Mode: getS(m, "paceMode"), MinGapMs: int(getN(m, "paceMinGap"))},
		Breaker: store.BreakerConfig{
			ConsecutiveFailures: int(getN(m, "bkCons")),
			FailureRate:         getF(m, "bkRate"),
			MinSamples:          int(getN(m, "bkMin")),
			CooldownSec:         int(getN(m, "bkCool")),
		},
		UpdatedAt: fromNanos(getN(m, "updatedAt")),
		Sizing: store.AccountSizing{BatchSize: int(getN(m, "szBatch")), Concurrency: int(getN(m, "szConc")),
			P99: time.Duration(getN(m, "szP99")), At: fromNanos(getN(m, "szAt"))},
	}
}

// SaveAccountSizing sets the sizing attributes of the account record (one
// UpdateItem, conditional on the record existing); PutAccount, which
// replaces the record, drops them.
func (s *Store) SaveAccountSizing(ctx context.Context, p store.SaveAccountSizingParams) error {
	if p.Tenant == "" || p.Account == "" || !p.Sizing.Measured() {
		return fmt.Errorf("save account sizing: %w: tenant, account and a sizing with its time", store.ErrInvalidArgument)
	}
	u := newUpdate()
	u.Set("szBatch", attrN(int64(p.Sizing.BatchSize)))
	u.Set("szConc", attrN(int64(p.Sizing.Concurrency)))
	u.Set("szP99", attrN(int64(p.Sizing.P99)))
	u.Set("szAt", attrN(nanos(p.Sizing.At)))
	in := &dynamodb.UpdateItemInput{
		Key:                       key(tenantPK(p.Tenant), skAccount+p.Account),
		UpdateExpression:          aws.String(u.expr()),
		ConditionExpression:       aws.String("attribute_exists(pk)"),
		ExpressionAttributeNames:  u.names,
		ExpressionAttributeValues: u.values,
		ReturnValues:              types.ReturnValueNone,
	}
	_, err := s.updateItem(ctx, in)
	if isConditionFailed(err) {
		return fmt.Errorf("account %s/%s: %w", p.Tenant, p.Account, store.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("save account sizing %s/%s: %w", p.Tenant, p.Account, err)
	}
	return nil
}

// GetAccount reads one account record.
func (s *Store) GetAccount(ctx context.Context, tenant, account string) (store.Account, error) {
	rec, err := s.getItem(ctx, tenantPK(tenant), skAccount+account)
	if err != nil {
		return store.Account{}, fmt.Errorf("get account %s/%s: %w", tenant, account, err)
	}
	if rec == nil {
		return store.Account{}, fmt.Errorf("account %s/%s: %w", tenant, account, store.ErrNotFound)
	}
	return accountFrom(rec), nil
}

// ListAccounts queries the tenant's partition for ACCOUNT# records, which
// sort by account id.
func (s *Store) ListAccounts(ctx context.Context, tenant string) ([]store.Account, error) {
	recs, err := s.query(ctx, &dynamodb.QueryInput{
		KeyConditionExpression: aws.String("pk = :pk AND begins_with(sk, :sk)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":pk": attrS(tenantPK(tenant)), ":sk": attrS(skAccount),
		},
		ConsistentRead: aws.Bool(true),
	}, 0)
	if err != nil {
		return nil, fmt.Errorf("list accounts of %s: %w", tenant, err)
	}
	out := make([]store.Account, 0, len(recs))
	for _, r := range recs {
		out = append(out, accountFrom(r))
	}
	return out, nil
}
