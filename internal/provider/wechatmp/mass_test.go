package wechatmp

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/mockprovider"
	"github.com/qunfa/qunfa/internal/provider"
	"github.com/qunfa/qunfa/internal/provider/httpcall"
	"github.com/qunfa/qunfa/internal/provider/providertest"
)

type massFixture struct {
	mock    *mockprovider.Mock
	adapter *Mass
	mu      sync.Mutex
	paths   []string // the API paths called, in order
	fixture providertest.Fixture
}

func (f *massFixture) called() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.paths...)
}

func newMassFixture(t *testing.T) *massFixture {
	t.Helper()
	m, err := mockprovider.New(mockprovider.Config{Protocol: mockprovider.ProtocolWechatMP, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	f := &massFixture{mock: m}
	h := m.Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.paths = append(f.paths, r.URL.Path)
		f.mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { _ = m.Close() })
	build := func(base string) *Mass {
		a, err := NewMass(Config{BaseURL: base, Secret: "app-secret", Logger: quiet,
			Timeouts: httpcall.Timeouts{Connect: 200 * time.Millisecond, Response: 200 * time.Millisecond}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = a.Close() })
		return a
	}
	f.adapter = build(srv.URL)
	f.fixture = providertest.Fixture{Provider: f.adapter, Unreachable: build(providertest.ClosedURL(t)), Mock: &providertest.MockProvider{Mock: m}}
	return f
}

func massAccount(name string) string { return "wx-" + name }

func TestMassConformance(t *testing.T) {
	t.Parallel()
	codes := []providertest.Code{{Code: "99999", Category: provider.Retryable}}
	for code, cat := range Codes {
		codes = append(codes, providertest.Code{Code: strconv.Itoa(code), Category: cat})
	}
	providertest.Run(t, providertest.Adapter{
		New:              func(t *testing.T) providertest.Fixture { return newMassFixture(t).fixture },
		Codes:            codes,
		MaxPerCall:       provider.KindWechatMPMass.MaxPerCall(),
		MinPerCall:       MassMinOpenIDs,
		WholeCallResults: true,
		StatusLookup:     true,
		StatusByMsgID:    true,
		Account:          massAccount,
	})
}

func TestMassOneCallCarriesEveryOpenIDWithOneMsgID(t *testing.T) {
	t.Parallel()
	f := newMassFixture(t)
	req := provider.SendRequest{Account: "wx-one-call", To: []string{"o1", "o2", "o3"}, Keys: []string{"k1", "k2", "k3"}, Content: "本周活动"}
	res, err := f.adapter.Send(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	id := res.Recipients[0].MsgID
	if _, err := strconv.ParseInt(id, 10, 64); err != nil {
		t.Fatalf("msg id %q is not WeChat's numeric msg_id", id)
	}
	for i, r := range res.Recipients {
		if !r.Accepted || r.MsgID != id {
			t.Fatalf("recipient %d: %+v, want accepted with the call's msg_id %s", i, r, id)
		}
	}
	if got := f.called(); len(got) != 2 || got[1] != "/cgi-bin/message/mass/send" {
		t.Fatalf("paths called = %v, want the token then one mass/send", got)
	}
}

func TestMassSingleOpenIDGoesAsCustomerServiceMessage(t *testing.T) {
	t.Parallel()
	f := newMassFixture(t)
	res, err := f.adapter.Send(context.Background(), provider.SendRequest{Account: "wx-single", To: []string{"o1"}, Keys: []string{"k1"}, Content: "hi"})
	if err != nil {
		t.Fatal(err)
	}
	if r := res.Recipients[0]; !r.Accepted {
		t.Fatalf("one OpenID: %+v, want accepted", r)
	}
	if got := f.called(); got[len(got)-1] != "/cgi-bin/message/custom/send" {
		t.Fatalf("paths called = %v, want message/custom/send for one OpenID (mass/send takes 2 or more)", got)
	}
	if n := f.mock.Stats()["wx-single"].Accepted; n != 1 {
		t.Fatalf("the mock delivered %d messages, want 1", n)
	}
	// A user outside the 48-hour window: 45015 is permanent.
	if err := f.mock.SetBehaviour("wx-late", mockprovider.Behaviour{Errors: []mockprovider.InjectedError{{Errcode: 45015, Ratio: 1}}}); err != nil {
		t.Fatal(err)
	}
	res, err = f.adapter.Send(context.Background(), provider.SendRequest{Account: "wx-late", To: []string{"o1"}, Keys: []string{"k1"}, Content: "hi"})
	if err != nil {
		t.Fatal(err)
	}
	if r := res.Recipients[0]; r.Accepted || r.Category != provider.Permanent || r.Code != "45015" {
		t.Fatalf("outside the 48-hour window: %+v, want permanent 45015", r)
	}
}

func TestMassRefusesCallsItCannotSend(t *testing.T) {
	t.Parallel()
	f := newMassFixture(t)
	too := make([]string, MassMaxOpenIDs+1)
	for i := range too {
		too[i] = "o" + strconv.Itoa(i)
	}
	for name, req := range map[string]provider.SendRequest{
		"no recipient":    {Account: "wx-a", Content: "x"},
		"too many":        {Account: "wx-a", To: too, Keys: too, Content: "x"},
		"empty content":   {Account: "wx-a", To: []string{"o1", "o2"}, Keys: []string{"1", "2"}},
		"empty openid":    {Account: "wx-a", To: []string{"o1", ""}, Keys: []string{"1", "2"}, Content: "x"},
		"keys mismatched": {Account: "wx-a", To: []string{"o1", "o2"}, Keys: []string{"1"}, Content: "x"},
	} {
		if _, err := f.adapter.Send(context.Background(), req); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("%s: err = %v, want ErrInvalidRequest", name, err)
		}
	}
	if got := f.called(); len(got) != 0 {
		t.Fatalf("refused calls reached the provider: %v", got)
	}
}

func TestMassStatusOfAFailedJobGoesToReview(t *testing.T) {
	t.Parallel()
	f := newMassFixture(t)
	if err := f.mock.SetBehaviour("wx-fail", mockprovider.Behaviour{InvalidToIDs: []string{"o1", "o2"}}); err != nil {
		t.Fatal(err)
	}
	res, err := f.adapter.Send(context.Background(), provider.SendRequest{Account: "wx-fail", To: []string{"o1", "o2"}, Keys: []string{"1", "2"}, Content: "x"})
	if err != nil || !res.Recipients[0].Accepted {
		t.Fatalf("send: %+v, %v; want the job accepted", res, err)
	}
	_, err = f.adapter.Status(context.Background(), provider.StatusRequest{Account: "wx-fail", Key: "1", MsgID: res.Recipients[0].MsgID})
	if !errors.Is(err, provider.ErrStatusUnsupported) {
		t.Fatalf("Status of a SEND_FAIL job: %v, want ErrStatusUnsupported (review, never resent)", err)
	}
	_, err = f.adapter.Status(context.Background(), provider.StatusRequest{Account: "wx-fail", Key: "1", MsgID: "999"})
	if err == nil || errors.Is(err, provider.ErrStatusUnsupported) {
		t.Fatalf("Status of a msg_id the app never sent: %v, want a look-up error", err)
	}
}
