package wecomapi

import (
	"context"
	"errors"
	"io"
	"net/http"
	"testing"

	"github.com/qunfa/qunfa/internal/provider"
)

// TestGatewayErrorsAreUncertain: a gateway in front of the provider may
// answer 502 or 504 after the provider processed the call, so the message
// may have been delivered: such an answer is Uncertain (settled by a status
// look-up), never Retryable (sent again blindly). 503 and 501 say the call
// was not processed.
func TestGatewayErrorsAreUncertain(t *testing.T) {
	t.Parallel()
	html := func(status int) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(status)
			_, _ = io.WriteString(w, "<html><body><h1>Bad Gateway</h1></body></html>")
		}
	}
	for status, want := range map[int]provider.Category{
		500: provider.Uncertain, 502: provider.Uncertain, 504: provider.Uncertain,
		520: provider.Uncertain, 524: provider.Uncertain,
		501: provider.Retryable, 503: provider.Retryable,
	} {
		c, _ := handlerFixture(t, html(status))
		got := send(t, c, one("k1"))
		if len(got) != 1 || got[0].Category != want {
			t.Errorf("HTTP %d with an HTML body: results %+v, want category %q", status, got, want)
		}
	}
}

// TestStatusNotFoundIsUnsupported: an account whose provider has no status
// look-up answers it with 404; the reconciler must then send the item to
// review rather than retry the look-up for ever.
func TestStatusNotFoundIsUnsupported(t *testing.T) {
	t.Parallel()
	c, _ := handlerFixture(t, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNotFound) })
	_, err := c.Status(context.Background(), provider.StatusRequest{Account: "acct-a", Key: "k1"})
	if !errors.Is(err, provider.ErrStatusUnsupported) {
		t.Fatalf("err = %v, want ErrStatusUnsupported", err)
	}
}
