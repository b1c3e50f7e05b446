package dynamostore

import (
	"context"
	"fmt"
	"log/slog"
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
		"v": attrN(b.Version), "trans": attrN(b.Transitions),
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
		UpdatedAt: fromNanos(getN(m, "updatedAt")), Version: getN(m, "v"), Transitions: getN(m, "trans"),
	}
}

// skBreakerHistory is the sort key of slot of an account's ring of
// breaker transitions (TENANT#<tenant>, BRKHIST#<account>#<slot 3d>).
func skBreakerHistory(account string, slot int64) string {
	return fmt.Sprintf("%s%s#%03d", skBreakerHist, account, slot)
}

const skBreakerHist = "BRKHIST#"

func transitionItem(tenant, account string, tr store.BreakerTransition) map[string]types.AttributeValue {
	m := map[string]types.AttributeValue{
		attrPK: attrS(tenantPK(tenant)), attrSK: attrS(skBreakerHistory(account, (tr.Seq-1)%store.MaxBreakerHistory)),
		"account": attrS(account), "seq": attrN(tr.Seq), "from": attrS(string(tr.From)), "to": attrS(string(tr.To)),
		"at": attrN(nanos(tr.At)), "rate": attrF(tr.FailureRate), "att": attrN(tr.Attempts),
		"streak": attrN(int64(tr.ConsecutiveFailures)), "opens": attrN(int64(tr.Opens)),
	}
	if tr.Reason != "" {
		m["reason"] = attrS(tr.Reason)
	}
	if u := nanos(tr.Until); u != 0 {
		m["until"] = attrN(u)
	}
	return m
}

func transitionFrom(m map[string]types.AttributeValue) store.BreakerTransition {
	return store.BreakerTransition{
		Seq: getN(m, "seq"), From: store.BreakerState(getS(m, "from")), To: store.BreakerState(getS(m, "to")),
		At: fromNanos(getN(m, "at")), Reason: getS(m, "reason"), FailureRate: getF(m, "rate"),
		Attempts: getN(m, "att"), ConsecutiveFailures: int(getN(m, "streak")), Opens: int(getN(m, "opens")),
		Until: fromNanos(getN(m, "until")),
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
	if b.Transitions < 0 {
		return store.Breaker{}, fmt.Errorf("save breaker %s/%s: %w: negative transitions", b.Tenant, b.Account, store.ErrInvalidArgument)
	}
	next := b
	next.Version = b.Version + 1
	next.Transition = nil
	if b.Transition != nil {
		next.Transitions = b.Transitions + 1
	}
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
	if b.Transition != nil {
		// The table has no transactions: the transition's slot is written
		// once the breaker write won (its Transitions numbers the slot).
		// A crash or a failed write in between loses that history entry,
		// never the breaker: the save stands, and a failure is logged.
		tr := *b.Transition
		tr.Seq = next.Transitions
		if err := s.putItem(ctx, transitionItem(b.Tenant, b.Account, tr), "", nil, nil); err != nil {
			s.log.Warn("breaker transition not recorded in the history", slog.String("tenant", b.Tenant),
				slog.String("account", b.Account), slog.Int64("seq", tr.Seq), slog.Any("err", err))
		}
	}
	return breakerFrom(item), nil
}

// ListBreakerHistory queries the account's ring of transition slots (at
// most MaxBreakerHistory items, one Query) and orders them newest first.
func (s *Store) ListBreakerHistory(ctx context.Context, tenant, account string) ([]store.BreakerTransition, error) {
	if tenant == "" || account == "" {
		return nil, fmt.Errorf("list breaker history: %w: empty tenant or account", store.ErrInvalidArgument)
	}
	recs, err := s.query(ctx, &dynamodb.QueryInput{
		KeyConditionExpression: aws.String("pk = :pk AND begins_with(sk, :prefix)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":pk": attrS(tenantPK(tenant)), ":prefix": attrS(skBreakerHist + account + "#"),
		},
		ConsistentRead: aws.Bool(true),
	}, 0)
	if err != nil {
		return nil, fmt.Errorf("list breaker history of %s/%s: %w", tenant, account, err)
	}
	out := []store.BreakerTransition{}
	for _, r := range recs {
		if getS(r, "account") != account { // another account's name extends this one's
			continue
		}
		out = append(out, transitionFrom(r))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Seq > out[j].Seq })
	return out, nil
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
