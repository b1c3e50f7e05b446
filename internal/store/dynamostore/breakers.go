package dynamostore

import (
	"context"
	"fmt"
	"sort"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/qunfa/qunfa/internal/store"
)

// Partitions of the running index that hold breaker records (the index is
// overloaded: its shard entries are all under runningPK). Every breaker
// record is in one of them, so ListBreakers never scans.
const (
	breakersOpenPK   = "BREAKERS#open"   // open and half-open breakers
	breakersClosedPK = "BREAKERS#closed" // closed breakers
)

func breakerItem(b store.Breaker) map[string]types.AttributeValue {
	m := map[string]types.AttributeValue{
		attrPK: attrS(tenantPK(b.Tenant)), attrSK: attrS(skBreaker + b.Account),
		"tenant": attrS(b.Tenant), "account": attrS(b.Account), "state": attrS(string(b.State)),
		"opens": attrN(int64(b.Opens)), "winAtt": attrN(b.WindowAttempts), "winFail": attrN(b.WindowFailures),
		"v":    attrN(b.Version),
		"g2pk": attrS(breakersOpenPK), "g2sk": attrS(b.Tenant + "#" + b.Account),
	}
	if b.State == store.BreakerClosed {
		m["g2pk"] = attrS(breakersClosedPK)
	}
	for name, v := range map[string]string{"reason": b.Reason, "probe": b.ProbeShard} {
		if v != "" {
			m[name] = attrS(v)
		}
	}
	for name, t := range map[string]int64{"openedAt": nanos(b.OpenedAt), "until": nanos(b.Until), "winAt": nanos(b.WindowAt), "updatedAt": nanos(b.UpdatedAt)} {
		if t != 0 {
			m[name] = attrN(t)
		}
	}
	return m
}

func breakerFrom(m map[string]types.AttributeValue) store.Breaker {
	return store.Breaker{
		Tenant: getS(m, "tenant"), Account: getS(m, "account"), State: store.BreakerState(getS(m, "state")),
		Reason: getS(m, "reason"), OpenedAt: fromNanos(getN(m, "openedAt")), Until: fromNanos(getN(m, "until")),
		Opens: int(getN(m, "opens")), ProbeShard: getS(m, "probe"),
		WindowAt: fromNanos(getN(m, "winAt")), WindowAttempts: getN(m, "winAtt"), WindowFailures: getN(m, "winFail"),
		UpdatedAt: fromNanos(getN(m, "updatedAt")), Version: getN(m, "v"),
	}
}

// GetBreaker reads the breaker record (TENANT#<tenant>, BREAKER#<account>);
// without one the breaker is closed at version 0.
func (s *Store) GetBreaker(ctx context.Context, tenant, account string) (store.Breaker, error) {
	if tenant == "" || account == "" {
		return store.Breaker{}, fmt.Errorf("get breaker: %w: empty tenant or account", store.ErrInvalidArgument)
	}
	rec, err := s.getItem(ctx, tenantPK(tenant), skBreaker+account)
	if err != nil {
		return store.Breaker{}, fmt.Errorf("get breaker %s/%s: %w", tenant, account, err)
	}
	if rec == nil {
		return store.Breaker{Tenant: tenant, Account: account, State: store.BreakerClosed}, nil
	}
	return breakerFrom(rec), nil
}

// SaveBreaker is one PutItem conditional on the version read (no record
// for version 0).
func (s *Store) SaveBreaker(ctx context.Context, b store.Breaker) (store.Breaker, error) {
	if b.Tenant == "" || b.Account == "" || b.Version < 0 || b.Opens < 0 {
		return store.Breaker{}, fmt.Errorf("save breaker %s/%s: %w: empty tenant or account, or negative version", b.Tenant, b.Account, store.ErrInvalidArgument)
	}
	switch b.State {
	case "":
		b.State = store.BreakerClosed
	case store.BreakerClosed, store.BreakerOpen, store.BreakerHalfOpen:
	default:
		return store.Breaker{}, fmt.Errorf("save breaker %s/%s: %w: state %q", b.Tenant, b.Account, store.ErrInvalidArgument, b.State)
	}
	next := b
	next.Version = b.Version + 1
	item := breakerItem(next)
	cond, values := "attribute_not_exists(pk)", map[string]types.AttributeValue(nil)
	if b.Version > 0 {
		cond, values = "v = :v", map[string]types.AttributeValue{":v": attrN(b.Version)}
	}
	err := s.putItem(ctx, item, cond, nil, values)
	if isConditionFailed(err) {
		return store.Breaker{}, fmt.Errorf("save breaker %s/%s at version %d: %w", b.Tenant, b.Account, b.Version, store.ErrConflict)
	}
	if err != nil {
		return store.Breaker{}, fmt.Errorf("save breaker %s/%s: %w", b.Tenant, b.Account, err)
	}
	return breakerFrom(item), nil
}

// ListBreakers queries the open partition of the breaker index (and the
// closed one for AllStates), reads the records and orders them by tenant
// and account. The index is eventually consistent, so the state is checked
// on the record.
func (s *Store) ListBreakers(ctx context.Context, p store.ListBreakersParams) ([]store.Breaker, error) {
	parts := []string{breakersOpenPK}
	if p.AllStates {
		parts = append(parts, breakersClosedPK)
	}
	out := []store.Breaker{}
	for _, pk := range parts {
		recs, err := s.queryKeys(ctx, &dynamodb.QueryInput{
			IndexName:              aws.String(indexRunning),
			KeyConditionExpression: aws.String("g2pk = :pk"),
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":pk": attrS(pk),
			},
		})
		if err != nil {
			return nil, fmt.Errorf("list breakers: %w", err)
		}
		for _, r := range recs {
			b := breakerFrom(r)
			if !p.AllStates && b.State == store.BreakerClosed {
				continue
			}
			out = append(out, b)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Tenant != out[j].Tenant {
			return out[i].Tenant < out[j].Tenant
		}
		return out[i].Account < out[j].Account
	})
	return out, nil
}
