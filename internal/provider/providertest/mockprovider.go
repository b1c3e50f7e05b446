package providertest

import (
	"net"
	"strconv"
	"testing"

	"github.com/qunfa/qunfa/internal/mockprovider"
)

// MockProvider is the Mock of an adapter whose provider mockprovider
// emulates: an account of the suite is an account of the mock.
type MockProvider struct {
	Mock *mockprovider.Mock
	// App names the mock's app (corp, Official Account) whose access
	// tokens and secret an account's calls use (nil: the account itself).
	App func(t *testing.T, account string) string
}

var _ Mock = (*MockProvider)(nil)

func (d *MockProvider) change(t *testing.T, guid string, f func(*mockprovider.Behaviour)) {
	t.Helper()
	b := d.Mock.Behaviour(guid)
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
	n, err := strconv.Atoi(code)
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
// app also stops taking the secret the adapter holds.
func (d *MockProvider) ExpireCredential(t *testing.T, account string, renewable bool) {
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
