package dynamostore

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/qunfa/qunfa/internal/store"
)

var _ store.TenantStore = (*Store)(nil)

// Tenants' records:
//
//	TOKEN#<hash>      _               the token, read at every API call
//	TENANT#<tenant>   TOKEN#<id>      the tenant's listing of it (with the hash)
//	OWNER#<account>   _               the tenant owning a provider account
const skToken = "TOKEN#"

func ownerPK(account string) string { return "OWNER#" + account }

func tokenAttrs(t store.APIToken) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		"tenant": attrS(t.Tenant), "id": attrS(t.ID), "name": attrS(t.Name), "role": attrS(string(t.Role)),
		"hash": attrS(t.Hash), "created": attrN(nanos(t.CreatedAt)), "expires": attrN(nanos(t.ExpiresAt)),
	}
}

// tokenFrom reads a token record; records provisioned before roles hold
// only the tenant and are admin tokens.
func tokenFrom(rec map[string]types.AttributeValue, hash string) store.APIToken {
	if getS(rec, "id") == "" {
		return store.ProvisionedToken(hash, getS(rec, "tenant"))
	}
	return store.APIToken{
		ID: getS(rec, "id"), Tenant: getS(rec, "tenant"), Name: getS(rec, "name"), Role: store.Role(getS(rec, "role")),
		Hash: getS(rec, "hash"), CreatedAt: fromNanosN(getN(rec, "created")), ExpiresAt: fromNanosN(getN(rec, "expires")),
	}
}

func fromNanosN(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// CreateToken writes the tenant's listing record first, then the token
// record, each on condition it is new: a crash between them leaves a
// listed token that does not work yet (DeleteToken removes it), never a
// working token its tenant cannot see or revoke.
func (s *Store) CreateToken(ctx context.Context, t store.APIToken) error {
	if t.ID == "" || t.Tenant == "" || t.Hash == "" || !t.Role.Valid() {
		return fmt.Errorf("create token: %w: id, tenant, hash and a valid role are required", store.ErrInvalidArgument)
	}
	listing := tokenAttrs(t)
	listing[attrPK], listing[attrSK] = attrS(tenantPK(t.Tenant)), attrS(skToken+t.ID)
	if err := s.putItem(ctx, listing, "attribute_not_exists(pk)", nil, nil); isConditionFailed(err) {
		// The same token, half created by a call that crashed, is
		// finished; any other is a conflict.
		cur, rerr := s.getItem(ctx, tenantPK(t.Tenant), skToken+t.ID)
		if rerr != nil || cur == nil || getS(cur, "hash") != t.Hash {
			return fmt.Errorf("token %s of %s exists: %w", t.ID, t.Tenant, store.ErrConflict)
		}
	} else if err != nil {
		return fmt.Errorf("create token %s: %w", t.ID, err)
	}
	rec := tokenAttrs(t)
	rec[attrPK], rec[attrSK] = attrS(tokenPK(t.Hash)), attrS(skSingle)
	err := s.putItem(ctx, rec, "attribute_not_exists(pk)", nil, nil)
	if isConditionFailed(err) {
		if derr := s.deleteItem(ctx, tenantPK(t.Tenant), skToken+t.ID, ""); derr != nil {
			return fmt.Errorf("create token %s: hash taken, and removing its listing: %w", t.ID, derr)
		}
		return fmt.Errorf("token hash taken: %w", store.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("create token %s: %w", t.ID, err)
	}
	return nil
}

// TokenByHash reads the token record (strongly consistent: a revoked token
// fails at once).
func (s *Store) TokenByHash(ctx context.Context, hash string) (store.APIToken, error) {
	if hash == "" {
		return store.APIToken{}, fmt.Errorf("token: %w", store.ErrNotFound)
	}
	rec, err := s.getItem(ctx, tokenPK(hash), skSingle)
	if err != nil {
		return store.APIToken{}, fmt.Errorf("read token: %w", err)
	}
	if rec == nil {
		return store.APIToken{}, fmt.Errorf("token: %w", store.ErrNotFound)
	}
	return tokenFrom(rec, hash), nil
}

// ListTokens queries the tenant's TOKEN# records (ordered by id).
func (s *Store) ListTokens(ctx context.Context, tenant string) ([]store.APIToken, error) {
	recs, err := s.query(ctx, &dynamodb.QueryInput{
		KeyConditionExpression: aws.String("pk = :pk AND begins_with(sk, :sk)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":pk": attrS(tenantPK(tenant)), ":sk": attrS(skToken),
		},
		ConsistentRead: aws.Bool(true),
	}, 0)
	if err != nil {
		return nil, fmt.Errorf("list tokens of %s: %w", tenant, err)
	}
	out := make([]store.APIToken, 0, len(recs))
	for _, r := range recs {
		out = append(out, tokenFrom(r, getS(r, "hash")))
	}
	return out, nil
}

// DeleteToken deletes the token record first (the token stops working),
// then the tenant's listing of it.
func (s *Store) DeleteToken(ctx context.Context, tenant, id string) error {
	rec, err := s.getItem(ctx, tenantPK(tenant), skToken+id)
	if err != nil {
		return fmt.Errorf("delete token %s: %w", id, err)
	}
	if rec == nil {
		return fmt.Errorf("token %s of %s: %w", id, tenant, store.ErrNotFound)
	}
	if err := s.deleteItem(ctx, tokenPK(getS(rec, "hash")), skSingle, ""); err != nil {
		return fmt.Errorf("delete token %s: %w", id, err)
	}
	if err := s.deleteItem(ctx, tenantPK(tenant), skToken+id, ""); err != nil {
		return fmt.Errorf("delete token %s: %w", id, err)
	}
	return nil
}

// GrantAccount writes the owner record on condition it is new or already
// the tenant's.
func (s *Store) GrantAccount(ctx context.Context, tenant, account string, at time.Time) error {
	if tenant == "" || account == "" {
		return fmt.Errorf("grant account: %w: tenant and account are required", store.ErrInvalidArgument)
	}
	err := s.putItem(ctx, map[string]types.AttributeValue{
		attrPK: attrS(ownerPK(account)), attrSK: attrS(skSingle), "tenant": attrS(tenant), "at": attrN(nanos(at)),
	}, "attribute_not_exists(pk) OR tenant = :t", nil, map[string]types.AttributeValue{":t": attrS(tenant)})
	if isConditionFailed(err) {
		return fmt.Errorf("account %s is owned by another tenant: %w", account, store.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("grant account %s: %w", account, err)
	}
	return nil
}

// AccountOwner reads the owner record.
func (s *Store) AccountOwner(ctx context.Context, account string) (string, error) {
	rec, err := s.getItem(ctx, ownerPK(account), skSingle)
	if err != nil {
		return "", fmt.Errorf("owner of account %s: %w", account, err)
	}
	if rec == nil {
		return "", fmt.Errorf("owner of account %s: %w", account, store.ErrNotFound)
	}
	return getS(rec, "tenant"), nil
}

// PutToken binds a token hash to a tenant as an admin token (operator
// provisioning); a hash bound to another tenant is refused (ErrConflict),
// never silently rebound.
func (s *Store) PutToken(ctx context.Context, tokenHash, tenant string) error {
	return store.PutProvisionedToken(ctx, s, tokenHash, tenant)
}

// TenantForToken reads the tenant of a token hash.
func (s *Store) TenantForToken(ctx context.Context, tokenHash string) (string, error) {
	t, err := s.TokenByHash(ctx, tokenHash)
	return t.Tenant, err
}
