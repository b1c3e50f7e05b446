package providertest

import (
	"context"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/qunfa/qunfa/internal/mockprovider"
	"github.com/qunfa/qunfa/internal/provider"
)

// MockProvider is the Mock of an adapter whose provider mockprovider
// emulates: an account of the suite is an account of the mock.
type MockProvider struct {
	Mock *mockprovider.Mock
	// App names the mock's app (corp, Official Account) whose access
	// tokens and secret an account's calls use (nil: the account itself).
	App func(t *testing.T, account string) string
	// Secret, when set, is the tenant's credential the adapter sends
	// every call with, the provider taking it as it is (wecomapi, http):
	// an expired credential is one the account no longer takes, renewed
	// by a rotation of Secret. Nil: access tokens fetched with the app's
	// secret (wecom-app, wechat-mp).
	Secret *Secret
	// CodePrefix is cut from a code of the suite to leave the mock's
	// errcode (http: "http_" before the status).
	CodePrefix string
	// Prepare, when set, is applied to an account's behaviour before the
	// suite first changes it (a mock mode every account is in).
	Prepare func(b *mockprovider.Behaviour)
}

var _ Mock = (*MockProvider)(nil)

func (d *MockProvider) change(t *testing.T, guid string, f func(*mockprovider.Behaviour)) {
	t.Helper()
	b := d.Mock.Behaviour(guid)
	if d.Prepare != nil {
		d.Prepare(&b)
	}
	f(&b)
	if err := d.Mock.SetBehaviour(guid, b); err != nil {
		t.Fatal(err)
	}
}

// Deliveries counts what the mock delivered on account.
func (d *MockProvider) Deliveries(account string) int {
	return int(d.Mock.Stats()[account].Accepted)
}

// Refuse makes every call of account answer errcode code.
func (d *MockProvider) Refuse(t *testing.T, account, code string) {
	n, err := strconv.Atoi(strings.TrimPrefix(code, d.CodePrefix))
	if err != nil {
		t.Fatal(err)
	}
	d.change(t, account, func(b *mockprovider.Behaviour) { b.Errors = []mockprovider.InjectedError{{Errcode: n, Ratio: 1}} })
}

// InvalidRecipient makes account refuse to as invalid.
func (d *MockProvider) InvalidRecipient(t *testing.T, account, to string) {
	d.change(t, account, func(b *mockprovider.Behaviour) { b.InvalidToIDs = append(b.InvalidToIDs, to) })
}

// HoldAnswers makes account deliver every call and never answer it.
func (d *MockProvider) HoldAnswers(t *testing.T, account string) {
	d.change(t, account, func(b *mockprovider.Behaviour) { b.TimeoutRatio = 1 })
}

// ExpireCredential ends the app's access tokens; without renewable the
// app also stops taking the secret the adapter holds. With a Secret, the
// account takes only a new one, which renewable puts in Secret (a
// rotation the adapter's cache has not seen yet).
func (d *MockProvider) ExpireCredential(t *testing.T, account string, renewable bool) {
	if d.Secret != nil {
		const rotated = "secret-rotated"
		d.change(t, account, func(b *mockprovider.Behaviour) { b.Token = rotated })
		if renewable {
			d.Secret.Set(rotated)
		}
		return
	}
	app := account
	if d.App != nil {
		app = d.App(t, account)
	}
	if !renewable {
		d.change(t, app, func(b *mockprovider.Behaviour) { b.Token = "secret-rotated-elsewhere" })
	}
	d.Mock.ExpireAccessTokens(app)
}

// ClosedURL is the URL of a 127.0.0.1 port nothing listens on, for a
// Fixture's Unreachable adapter.
func ClosedURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	return "http://" + ln.Addr().String()
}

// Secret is a tenant's provider credential as the credentials store holds
// it (every tenant the same), which a test rotates.
type Secret struct {
	mu    sync.Mutex
	token string
}

var _ provider.Credentials = (*Secret)(nil)

// NewSecret holds token.
func NewSecret(token string) *Secret { return &Secret{token: token} }

// Token is the secret held now.
func (s *Secret) Token(context.Context, string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.token, nil
}

// Invalidate does nothing: the store holds what it holds.
func (s *Secret) Invalidate(context.Context, string, string) {}

// Set rotates the secret.
func (s *Secret) Set(token string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.token = token
}
