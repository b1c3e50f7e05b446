// Package smcreds is the AWS Secrets Manager adapter of the
// provider.Credentials port: a tenant's provider token is the secret
// <TenantPrefix><tenant>/provider, and a tenant without one uses the
// deployment's default secret. A secret's value is JSON {"token": "..."}
// (or the bare token). Wrap it in credcache: every Token here is one
// GetSecretValue call.
package smcreds

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager/types"

	"github.com/qunfa/qunfa/internal/provider"
)

var _ provider.Credentials = (*Secrets)(nil)

// API is the part of the Secrets Manager client the adapter calls.
type API interface {
	GetSecretValue(ctx context.Context, in *secretsmanager.GetSecretValueInput, opts ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error)
}

// TenantSuffix ends the name of every tenant's secret.
const TenantSuffix = "/provider"

// Config names the secrets.
type Config struct {
	// DefaultSecret is the name or ARN of the deployment's provider secret
	// (empty: none, tenants without their own send without a token).
	DefaultSecret string
	// TenantPrefix starts the names of the tenants' secrets, e.g.
	// "qunfa-prod/tenants/" (empty: every tenant uses the default).
	TenantPrefix string
}

// Secrets reads provider tokens from Secrets Manager.
type Secrets struct {
	api API
	cfg Config
}

// New returns the adapter.
func New(api API, cfg Config) *Secrets { return &Secrets{api: api, cfg: cfg} }

// SecretName is the name of tenant's own secret; "" when the tenant has
// none (no prefix, the default tenant "", or an id that is not a valid
// secret name: such a tenant uses the default secret).
func (s *Secrets) SecretName(tenant string) string {
	if s.cfg.TenantPrefix == "" || !validName(tenant) {
		return ""
	}
	return s.cfg.TenantPrefix + tenant + TenantSuffix
}

// validName: the characters Secrets Manager allows in a name, less "/" (a
// tenant id must not reach another tenant's secret).
func validName(tenant string) bool {
	if tenant == "" || len(tenant) > 256 {
		return false
	}
	for _, c := range tenant {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("_+=.@-", c)
		if !ok {
			return false
		}
	}
	return true
}

// Token reads the tenant's secret, or the default one when the tenant has
// none (ResourceNotFoundException); ErrNoCredentials when there is no
// default either.
func (s *Secrets) Token(ctx context.Context, tenant string) (string, error) {
	if name := s.SecretName(tenant); name != "" {
		tok, err := s.read(ctx, name)
		if err == nil {
			return tok, nil
		}
		if !notFound(err) {
			return "", fmt.Errorf("provider secret of tenant %q: %w", tenant, err)
		}
	}
	if s.cfg.DefaultSecret == "" {
		return "", provider.ErrNoCredentials
	}
	tok, err := s.read(ctx, s.cfg.DefaultSecret)
	if err != nil {
		if notFound(err) {
			return "", fmt.Errorf("default provider secret: %w: %w", provider.ErrNoCredentials, err)
		}
		return "", fmt.Errorf("default provider secret: %w", err)
	}
	return tok, nil
}

// Invalidate does nothing: every Token reads the secret.
func (s *Secrets) Invalidate(context.Context, string, string) {}

func notFound(err error) bool {
	var nf *types.ResourceNotFoundException
	return errors.As(err, &nf)
}

// errMalformed: the secret holds no token. Its value is never quoted.
var errMalformed = errors.New(`secret value is neither {"token": "..."} nor a bare token`)

func (s *Secrets) read(ctx context.Context, name string) (string, error) {
	out, err := s.api.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(name)})
	if err != nil {
		return "", fmt.Errorf("get secret %s: %w", name, err)
	}
	v := strings.TrimSpace(aws.ToString(out.SecretString))
	if strings.HasPrefix(v, "{") {
		var doc struct {
			Token string `json:"token"`
		}
		if json.Unmarshal([]byte(v), &doc) != nil || doc.Token == "" {
			return "", fmt.Errorf("secret %s: %w", name, errMalformed)
		}
		return doc.Token, nil
	}
	if v == "" || strings.ContainsAny(v, " \t\r\n") {
		return "", fmt.Errorf("secret %s: %w", name, errMalformed)
	}
	return v, nil
}
