package smcreds_test

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/qunfa/qunfa/internal/awsemu"
	"github.com/qunfa/qunfa/internal/provider"
	"github.com/qunfa/qunfa/internal/provider/smcreds"
)

func TestMain(m *testing.M) {
	code := m.Run()
	awsemu.StopAll()
	os.Exit(code)
}

func client(t *testing.T) *secretsmanager.Client {
	t.Helper()
	return secretsmanager.New(secretsmanager.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(awsemu.Moto(t)),
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
	})
}

func createSecret(t *testing.T, sm *secretsmanager.Client, name, value string) {
	t.Helper()
	if _, err := sm.CreateSecret(context.Background(), &secretsmanager.CreateSecretInput{Name: aws.String(name), SecretString: aws.String(value)}); err != nil {
		t.Fatalf("create secret %s: %v", name, err)
	}
}

// TestSecretsOnMoto reads tenants' tokens through the real SDK client from
// moto's Secrets Manager: a tenant's own secret, the default for a tenant
// without one, a rotation seen by the next read, and errors that never
// quote a secret's value.
func TestSecretsOnMoto(t *testing.T) {
	sm := client(t)
	ctx := context.Background()
	stack := "qunfa-t" + strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	def := stack + "/provider"
	createSecret(t, sm, def, `{"token":"default-token"}`)
	createSecret(t, sm, stack+"/tenants/tenant-a/provider", `{"token":"tenant-a-token"}`)
	createSecret(t, sm, stack+"/tenants/tenant-c/provider", "bare-token-c")
	createSecret(t, sm, stack+"/tenants/tenant-bad/provider", `{"tokn":"leaked-value"}`)
	s := smcreds.New(sm, smcreds.Config{DefaultSecret: def, TenantPrefix: stack + "/tenants/"})

	for tenant, want := range map[string]string{
		"tenant-a": "tenant-a-token",
		"tenant-b": "default-token", // no secret of its own
		"tenant-c": "bare-token-c",
		"":         "default-token",
		"租户":       "default-token", // not a secret name: the default
	} {
		got, err := s.Token(ctx, tenant)
		if err != nil || got != want {
			t.Errorf("Token(%q) = %q, %v; want %q", tenant, got, err, want)
		}
	}
	if got := s.SecretName("a/../b"); got != "" {
		t.Errorf("SecretName of a tenant with a slash = %q, want none", got)
	}

	// Rotation: the next read has the new value.
	if _, err := sm.PutSecretValue(ctx, &secretsmanager.PutSecretValueInput{SecretId: aws.String(stack + "/tenants/tenant-a/provider"),
		SecretString: aws.String(`{"token":"tenant-a-token-2"}`)}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Token(ctx, "tenant-a"); err != nil || got != "tenant-a-token-2" {
		t.Errorf("after rotation Token = %q, %v", got, err)
	}

	// A malformed secret is an error that does not quote it; no fallback
	// to the default (the tenant meant to have its own).
	_, err := s.Token(ctx, "tenant-bad")
	if err == nil || strings.Contains(err.Error(), "leaked-value") {
		t.Errorf("malformed secret: err = %v", err)
	}

	// No default secret at all.
	none := smcreds.New(sm, smcreds.Config{TenantPrefix: stack + "/tenants/"})
	if _, err := none.Token(ctx, "tenant-b"); !errors.Is(err, provider.ErrNoCredentials) {
		t.Errorf("no default: err = %v, want ErrNoCredentials", err)
	}
	if got, err := none.Token(ctx, "tenant-a"); err != nil || got != "tenant-a-token-2" {
		t.Errorf("no default, own secret: %q, %v", got, err)
	}
	// A default secret that is configured but missing.
	missing := smcreds.New(sm, smcreds.Config{DefaultSecret: stack + "/nope"})
	if _, err := missing.Token(ctx, "tenant-a"); !errors.Is(err, provider.ErrNoCredentials) {
		t.Errorf("missing default: err = %v, want ErrNoCredentials", err)
	}
}
