package provider

import (
	"context"
	"errors"
)

// ErrNoCredentials is returned by Credentials.Token when neither the
// tenant nor the deployment has a provider credential.
var ErrNoCredentials = errors.New("provider: no credentials")

// Credentials gives the provider credential (the API token) a tenant's
// accounts send with. It is read at run time, so a rotated secret reaches
// running functions without a redeploy. Tenant "" asks for the
// deployment's default credential. Implementations never log a token.
type Credentials interface {
	// Token returns the tenant's provider token (its own, or the
	// deployment's default when it has none); ErrNoCredentials when there
	// is none at all.
	Token(ctx context.Context, tenant string) (string, error)
	// Invalidate reports that the provider refused token as invalid or
	// expired for tenant: a cache drops it, so the next Token reads the
	// secret again. A token the cache no longer holds is ignored.
	Invalidate(ctx context.Context, tenant, token string)
}
