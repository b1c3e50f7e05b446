package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"

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

// skBreakerHist starts the sort keys of the ring of transition records
// (TENANT#<tenant>, BRKHIST#<account>#<slot 3d>) earlier versions kept an
// account's breaker history in; read only for records saved before, and
// deleted once their transitions are in the record (sweepLegacyHistory).
const skBreakerHist = "BRKHIST#"

// attrHistorySwept marks a breaker record that has no ring of BRKHIST#
// records left: set when the record is created (no ring was ever written
// for it) and by the sweep that deletes a ring whose transitions moved
// into the record's "h". A record with "h" and without the mark is swept
// by its next save.
const attrHistorySwept = "hSwept"

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

// SaveBreaker is one conditional UpdateItem of the breaker record (on the
// version read; attribute_not_exists for 0). A transition goes into the
// same write: the record keeps the account's last MaxBreakerHistory
// transitions in its "h" attribute (flate-compressed JSON, ~2 KB when
// full), read with the record's version first and rewritten with the new
// entry appended. So the state change and its history entry are one
// atomic step: both or neither, and two racing transitions cannot both
// number an entry after the same one. A save without a transition leaves
// "h" as it is (no read).
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
	conflict := func() (store.Breaker, error) {
		return store.Breaker{}, fmt.Errorf("save breaker %s/%s at version %d: %w", b.Tenant, b.Account, b.Version, store.ErrConflict)
	}
	next := b
	next.Version = b.Version + 1
	next.Transition = nil
	item := breakerItem(next)
	if b.Transition != nil {
		hist, trans, err := s.breakerHistory(ctx, b.Tenant, b.Account, b.Version)
		if errors.Is(err, store.ErrConflict) {
			return conflict()
		}
		if err != nil {
			return store.Breaker{}, fmt.Errorf("save breaker %s/%s: %w", b.Tenant, b.Account, err)
		}
		// The store numbers transitions from the record read, whatever
		// the caller's copy says.
		tr := *b.Transition
		tr.Seq = trans + 1
		next.Transitions = tr.Seq
		item = breakerItem(next)
		hist = append([]store.BreakerTransition{tr}, hist...)
		if len(hist) > store.MaxBreakerHistory {
			hist = hist[:store.MaxBreakerHistory]
		}
		blob, err := encodeHistory(hist)
		if err != nil {
			return store.Breaker{}, fmt.Errorf("save breaker %s/%s: %w", b.Tenant, b.Account, err)
		}
		item[attrHistory] = &types.AttributeValueMemberB{Value: blob}
	}
	if b.Version == 0 {
		item[attrHistorySwept] = attrN(1) // a new record has no former ring
	}
	names := map[string]string{}
	values := map[string]types.AttributeValue{}
	var sets, removes []string
	attrs := make([]string, 0, len(item))
	for name := range item {
		attrs = append(attrs, name)
	}
	sort.Strings(attrs)
	for i, name := range attrs {
		if name == attrPK || name == attrSK {
			continue
		}
		names[fmt.Sprintf("#a%d", i)] = name
		values[fmt.Sprintf(":a%d", i)] = item[name]
		sets = append(sets, fmt.Sprintf("#a%d = :a%d", i, i))
	}
	for i, name := range []string{"reason", "probe", "openedAt", "until", "winAt", "updatedAt"} {
		if _, ok := item[name]; !ok {
			names[fmt.Sprintf("#r%d", i)] = name
			removes = append(removes, fmt.Sprintf("#r%d", i))
		}
	}
	expr := "SET " + strings.Join(sets, ", ")
	if len(removes) > 0 {
		expr += " REMOVE " + strings.Join(removes, ", ")
	}
	cond := "attribute_not_exists(pk)"
	if b.Version > 0 {
		cond = "v = :expect"
		values[":expect"] = attrN(b.Version)
	}
	// ALL_NEW costs no read capacity: it tells whether a former ring is
	// left to sweep.
	rec, err := s.updateItem(ctx, &dynamodb.UpdateItemInput{
		Key:                       key(tenantPK(b.Tenant), skBreaker+b.Account),
		UpdateExpression:          aws.String(expr),
		ConditionExpression:       aws.String(cond),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
		ReturnValues:              types.ReturnValueAllNew,
	})
	if isConditionFailed(err) {
		return conflict()
	}
	if err != nil {
		return store.Breaker{}, fmt.Errorf("save breaker %s/%s: %w", b.Tenant, b.Account, err)
	}
	if _, moved := rec[attrHistory]; moved && rec[attrHistorySwept] == nil {
		// The save stands whatever the sweep does: one that fails leaves
		// the mark unset, and the next save sweeps again.
		if err := s.sweepLegacyHistory(ctx, b.Tenant, b.Account); err != nil {
			s.log.Warn("former breaker history records not deleted yet", slog.String("tenant", b.Tenant),
				slog.String("account", b.Account), slog.Any("err", err))
		}
	}
	return breakerFrom(item), nil
}

// sweepLegacyHistory deletes an account's former ring of BRKHIST# records
// (at most MaxBreakerHistory: one Query of keys, a few BatchWriteItems,
// once per account), then marks the breaker record swept. Only called once
// the record holds the history ("h"), which it never loses, so nothing
// reads the ring any more; deleting it twice is harmless.
func (s *Store) sweepLegacyHistory(ctx context.Context, tenant, account string) error {
	recs, err := s.query(ctx, &dynamodb.QueryInput{
		KeyConditionExpression: aws.String("pk = :pk AND begins_with(sk, :prefix)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":pk": attrS(tenantPK(tenant)), ":prefix": attrS(skBreakerHist + account + "#"),
		},
		ProjectionExpression:     aws.String("pk, sk, #acct"),
		ExpressionAttributeNames: map[string]string{"#acct": "account"},
	}, 0)
	if err != nil {
		return fmt.Errorf("list former history records: %w", err)
	}
	var reqs []types.WriteRequest
	for _, r := range recs {
		if getS(r, "account") != account { // another account's name extends this one's
			continue
		}
		reqs = append(reqs, types.WriteRequest{DeleteRequest: &types.DeleteRequest{Key: key(getS(r, attrPK), getS(r, attrSK))}})
	}
	if err := s.batchWrite(ctx, reqs); err != nil {
		return fmt.Errorf("delete %d former history records: %w", len(reqs), err)
	}
	_, err = s.updateItem(ctx, &dynamodb.UpdateItemInput{
		Key:                       key(tenantPK(tenant), skBreaker+account),
		UpdateExpression:          aws.String("SET #swept = :one"),
		ConditionExpression:       aws.String("attribute_exists(pk)"),
		ExpressionAttributeNames:  map[string]string{"#swept": attrHistorySwept},
		ExpressionAttributeValues: map[string]types.AttributeValue{":one": attrN(1)},
		ReturnValues:              types.ReturnValueNone,
	})
	if err != nil {
		return fmt.Errorf("mark the breaker record swept: %w", err)
	}
	return nil
}

// attrHistory is the breaker record's attribute of its transitions.
const attrHistory = "h"

// breakerHistory reads the breaker record consistently and returns its
// transitions (newest first) and transition count; ErrConflict when its
// version is not version. A record written before the history moved into
// it has its transitions in the former ring of BRKHIST# records: those
// are read instead, and move into the record with the next transition.
func (s *Store) breakerHistory(ctx context.Context, tenant, account string, version int64) ([]store.BreakerTransition, int64, error) {
	rec, err := s.getItem(ctx, tenantPK(tenant), skBreaker+account)
	if err != nil {
		return nil, 0, err
	}
	if getN(rec, "v") != version {
		return nil, 0, store.ErrConflict
	}
	hist, err := s.historyOfRecord(ctx, tenant, account, rec)
	return hist, getN(rec, "trans"), err
}

// historyOfRecord returns the transitions of a breaker record (nil: none),
// newest first.
func (s *Store) historyOfRecord(ctx context.Context, tenant, account string, rec map[string]types.AttributeValue) ([]store.BreakerTransition, error) {
	if _, ok := rec[attrHistory]; !ok && getN(rec, "trans") > 0 {
		return s.legacyBreakerHistory(ctx, tenant, account)
	}
	return historyOf(rec)
}

func historyOf(rec map[string]types.AttributeValue) ([]store.BreakerTransition, error) {
	z, ok := rec[attrHistory].(*types.AttributeValueMemberB)
	if !ok {
		return []store.BreakerTransition{}, nil
	}
	var hist []store.BreakerTransition
	if err := inflateJSON(z.Value, &hist); err != nil {
		return nil, fmt.Errorf("breaker history: %w", err)
	}
	return hist, nil
}

func encodeHistory(hist []store.BreakerTransition) ([]byte, error) {
	return deflateJSON(hist)
}

// ListBreakerHistory reads the breaker record (one consistent GetItem) and
// returns its transitions, newest first.
func (s *Store) ListBreakerHistory(ctx context.Context, tenant, account string) ([]store.BreakerTransition, error) {
	if tenant == "" || account == "" {
		return nil, fmt.Errorf("list breaker history: %w: empty tenant or account", store.ErrInvalidArgument)
	}
	rec, err := s.getItem(ctx, tenantPK(tenant), skBreaker+account)
	if err != nil {
		return nil, fmt.Errorf("list breaker history of %s/%s: %w", tenant, account, err)
	}
	hist, err := s.historyOfRecord(ctx, tenant, account, rec)
	if err != nil {
		return nil, fmt.Errorf("list breaker history of %s/%s: %w", tenant, account, err)
	}
	return hist, nil
}

// legacyBreakerHistory queries the ring of BRKHIST# records earlier
// versions kept an account's transitions in, newest first.
func (s *Store) legacyBreakerHistory(ctx context.Context, tenant, account string) ([]store.BreakerTransition, error) {
	recs, err := s.query(ctx, &dynamodb.QueryInput{
		KeyConditionExpression: aws.String("pk = :pk AND begins_with(sk, :prefix)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":pk": attrS(tenantPK(tenant)), ":prefix": attrS(skBreakerHist + account + "#"),
		},
		ConsistentRead: aws.Bool(true),
	}, 0)
	if err != nil {
		return nil, err
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
