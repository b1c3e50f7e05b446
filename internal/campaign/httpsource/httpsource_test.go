package httpsource_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/campaign"
	"github.com/qunfa/qunfa/internal/campaign/httpsource"
	"github.com/qunfa/qunfa/internal/netguard"
)

func TestFetchPage(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ok":
			if r.URL.Query().Get("token") != "t" || r.URL.Query().Get("cursor") != "c1" {
				http.Error(w, "bad query "+r.URL.RawQuery, http.StatusBadRequest)
				return
			}
			w.Header().Set("Content-Type", "application/json; charset=utf-8")
			_, _ = w.Write([]byte(`{"recipients": [{"account": "a", "to": "u", "vars": {"k": "v"}}], "next_cursor": "c2"}`))
		case "/moved":
			http.Redirect(w, r, "/ok", http.StatusFound)
		case "/text":
			_, _ = w.Write([]byte("hello"))
		case "/slow":
			<-release
		}
	}))
	defer srv.Close()
	defer close(release)
	src := httpsource.New(httpsource.Config{Client: srv.Client(), Timeout: 200 * time.Millisecond})
	ctx := context.Background()
	page, err := src.FetchPage(ctx, campaign.FetchParams{Source: srv.URL + "/ok?token=t", Cursor: "c1"})
	if err != nil || len(page.Recipients) != 1 || page.Recipients[0].Vars["k"] != "v" || page.NextCursor != "c2" {
		t.Fatalf("page %+v, %v", page, err)
	}
	for path, want := range map[string]string{
		"/moved?token=t": "status 302",
		"/text":          "content type",
		"/slow":          "deadline",
	} {
		_, err := src.FetchPage(ctx, campaign.FetchParams{Source: srv.URL + path})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error mentioning %q", path, err, want)
		}
		if err != nil && strings.Contains(err.Error(), "token=t") {
			t.Errorf("%s: the error shows the query: %v", path, err)
		}
	}
	if _, err := src.FetchPage(ctx, campaign.FetchParams{Source: "http://127.0.0.1:1/"}); err == nil || !strings.Contains(err.Error(), "https") {
		t.Errorf("plain http: %v", err)
	}
}

// TestSourcesReachOnlyPublicAddresses: with the default client, a source
// is dialled only to public addresses, checked on the address actually
// dialled (after DNS): loopback, private, link-local (the cloud metadata
// endpoint) and unique-local addresses, and a name that resolves to
// loopback, are all refused before any byte is sent.
func TestSourcesReachOnlyPublicAddresses(t *testing.T) {
	hit := false
	srv := httptest.NewTLSServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hit = true }))
	defer srv.Close()
	src := httpsource.New(httpsource.Config{Timeout: time.Second})
	for _, u := range []string{
		srv.URL + "/r", // 127.0.0.1
		"https://localhost:" + strings.TrimPrefix(srv.URL, "https://127.0.0.1:") + "/r",
		"https://10.1.2.3/r?token=s3cret", "https://169.254.169.254/latest/meta-data", "https://[fc00::1]/r", "https://[::1]/r",
	} {
		_, err := src.FetchPage(context.Background(), campaign.FetchParams{Source: u})
		if !errors.Is(err, netguard.ErrBlocked) {
			t.Errorf("source %s: err = %v, want refused for its address", u, err)
		}
		if err != nil && strings.Contains(err.Error(), "s3cret") {
			t.Errorf("the error repeats the source's query: %v", err)
		}
	}
	if hit {
		t.Error("the loopback source was reached")
	}
}
