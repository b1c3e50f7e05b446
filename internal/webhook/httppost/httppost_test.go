package httppost_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/qunfa/qunfa/internal/netguard"
	"github.com/qunfa/qunfa/internal/webhook"
	"github.com/qunfa/qunfa/internal/webhook/httppost"
)

func TestPostRefusesLoopbackUnlessAllowed(t *testing.T) {
	var got []byte
	var sig string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, _ = io.ReadAll(r.Body)
		sig = r.Header.Get(webhook.SignatureHeader)
		w.WriteHeader(http.StatusAccepted)
		_, _ = w.Write([]byte(`{"errcode":0,"errmsg":"ok"}`))
	}))
	defer srv.Close()
	req := webhook.Request{URL: srv.URL + "/hook", Header: http.Header{webhook.SignatureHeader: {"t=1,v1=ab"}}, Body: []byte(`{"id":"evt_1"}`)}

	_, err := httppost.New(httppost.Config{}).Post(t.Context(), req)
	if !errors.Is(err, netguard.ErrBlocked) {
		t.Fatalf("Post to %s without AllowPrivate: %v, want ErrBlocked", srv.URL, err)
	}
	// The error leaves the URL out (a robot's URL holds its key).
	if strings.Contains(err.Error(), srv.URL) || strings.Contains(err.Error(), "/hook") {
		t.Fatalf("the error shows the URL: %v", err)
	}
	if got != nil {
		t.Fatal("the endpoint was reached")
	}
	ans, err := httppost.New(httppost.Config{AllowPrivate: true}).Post(t.Context(), req)
	if err != nil || ans.Status != http.StatusAccepted || string(got) != `{"id":"evt_1"}` || sig != "t=1,v1=ab" ||
		string(ans.Body) != `{"errcode":0,"errmsg":"ok"}` {
		t.Fatalf("Post with AllowPrivate = %+v, %v; body %q, signature %q", ans, err, got, sig)
	}
}

func TestPostDoesNotFollowRedirects(t *testing.T) {
	hits := 0
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits++ }))
	defer target.Close()
	srv := httptest.NewServer(http.RedirectHandler(target.URL, http.StatusTemporaryRedirect))
	defer srv.Close()
	ans, err := httppost.New(httppost.Config{AllowPrivate: true}).Post(t.Context(), webhook.Request{URL: srv.URL, Body: []byte("{}")})
	if err != nil || ans.Status != http.StatusTemporaryRedirect || hits != 0 {
		t.Fatalf("Post to a redirect = %d, %v, %d hits on the target; want 307 and no hit", ans.Status, err, hits)
	}
}
