package dynamostore

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/qunfa/qunfa/internal/store"
)

func leasePK(name string) string { return "LEASE#" + name }

// AcquireLease is one conditional UpdateItem: the lease is free (absent,
// released, expired) or already the caller's. A retry after a lost answer
// finds it the caller's and succeeds again.
func (s *Store) AcquireLease(ctx context.Context, p store.AcquireLeaseParams) (store.Lease, error) {
	if p.Name == "" || p.Holder == "" {
		return store.Lease{}, fmt.Errorf("acquire lease: %w: name and holder are required", store.ErrInvalidArgument)
	}
	out, err := s.updateItem(ctx, &dynamodb.UpdateItemInput{
		Key:                      key(leasePK(p.Name), skSingle),
		UpdateExpression:         aws.String("SET holder = :h, #u = :until"),
		ConditionExpression:      aws.String("attribute_not_exists(pk) OR holder = :h OR holder = :none OR #u <= :now"),
		ExpressionAttributeNames: map[string]string{"#u": "until"},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":h": attrS(p.Holder), ":until": attrN(nanos(p.Until)), ":now": attrN(nanos(p.Now)), ":none": attrS(""),
		},
	})
	if isConditionFailed(err) {
		return store.Lease{}, fmt.Errorf("lease %s is held: %w", p.Name, store.ErrConflict)
	}
	if err != nil {
		return store.Lease{}, fmt.Errorf("acquire lease %s: %w", p.Name, err)
	}
	return store.Lease{Name: p.Name, Holder: getS(out, "holder"), Until: fromNanos(getN(out, "until")), Cursor: getS(out, "cursor")}, nil
}

// ReleaseLease frees the caller's lease and stores the cursor.
func (s *Store) ReleaseLease(ctx context.Context, p store.ReleaseLeaseParams) error {
	_, err := s.updateItem(ctx, &dynamodb.UpdateItemInput{
		Key:                      key(leasePK(p.Name), skSingle),
		UpdateExpression:         aws.String("SET holder = :none, #u = :zero, #c = :c"),
		ConditionExpression:      aws.String("holder = :h"),
		ExpressionAttributeNames: map[string]string{"#u": "until", "#c": "cursor"},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":h": attrS(p.Holder), ":none": attrS(""), ":zero": attrN(0), ":c": attrS(p.Cursor),
		},
		ReturnValues: types.ReturnValueNone,
	})
	if isConditionFailed(err) {
		// A retry after a lost answer finds the lease released (holder
		// empty): that is our own release.
		rec, rerr := s.getItem(ctx, leasePK(p.Name), skSingle)
		if rerr == nil && rec != nil && getS(rec, "holder") == "" && getS(rec, "cursor") == p.Cursor {
			return nil
		}
		return fmt.Errorf("lease %s is not held by %s: %w", p.Name, p.Holder, store.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("release lease %s: %w", p.Name, err)
	}
	return nil
}

// ReleaseLeaseOfHolders frees lease name if its holder's name starts with
// holderPrefix, keeping its cursor, and reports whether it did. A process
// that knows its previous life is over (the local stack, which locks its
// data directory) frees the lease a pass of that life held when it was
// killed, instead of waiting for it to expire; leases of other holders
// (another process sharing the table) are left alone.
func (s *Store) ReleaseLeaseOfHolders(ctx context.Context, name, holderPrefix string) (bool, error) {
	if name == "" || holderPrefix == "" {
		return false, fmt.Errorf("release lease: %w: name and holder prefix are required", store.ErrInvalidArgument)
	}
	_, err := s.updateItem(ctx, &dynamodb.UpdateItemInput{
		Key:                      key(leasePK(name), skSingle),
		UpdateExpression:         aws.String("SET holder = :none, #u = :zero"),
		ConditionExpression:      aws.String("begins_with(holder, :p)"),
		ExpressionAttributeNames: map[string]string{"#u": "until"},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":p": attrS(holderPrefix), ":none": attrS(""), ":zero": attrN(0),
		},
		ReturnValues: types.ReturnValueNone,
	})
	if isConditionFailed(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("release lease %s: %w", name, err)
	}
	return true, nil
}
