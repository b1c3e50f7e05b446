// Package httpcall makes one HTTP round trip to a provider and tells
// whether the request went out: the difference between a call that can
// be retried (nothing was written) and one whose message may have been
// delivered (written, then no usable answer). Provider adapters build on
// it; a call is never replayed by net/http once its body was read.
package httpcall

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync/atomic"
	"time"

	"github.com/qunfa/qunfa/internal/provider"
)

// ErrCallTimeout is the cause of a call cut off by the overall deadline.
var ErrCallTimeout = errors.New("provider call deadline exceeded")

// maxAnswer bounds the answer body read.
const maxAnswer = 1 << 20

// Timeouts bound a call.
type Timeouts struct {
	// Connect bounds dialing and TLS (default 3 s).
	Connect time.Duration
	// Response bounds the wait for the answer once the request is
	// written, and again reading its body (default 10 s).
	Response time.Duration
}

// WithDefaults fills zero timeouts.
func (t Timeouts) WithDefaults() Timeouts {
	if t.Connect <= 0 {
		t.Connect = 3 * time.Second
	}
	if t.Response <= 0 {
		t.Response = 10 * time.Second
	}
	return t
}

// NewClient builds an HTTP client for one provider: keep-alive
// connections, the timeouts, and redirects never followed (a redirected
// POST could be sent twice).
func NewClient(t Timeouts) *http.Client {
	t = t.WithDefaults()
	dialer := &net.Dialer{Timeout: t.Connect, KeepAlive: 30 * time.Second}
	return &http.Client{
		Transport: &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			DialContext:           dialer.DialContext,
			ForceAttemptHTTP2:     true,
			TLSHandshakeTimeout:   t.Connect,
			ResponseHeaderTimeout: t.Response,
			MaxIdleConns:          256,
			MaxIdleConnsPerHost:   128,
			IdleConnTimeout:       30 * time.Second,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// Exchange is one round trip: an answer (Status, Body) or Err, with Wrote
// telling whether the request had been fully written.
type Exchange struct {
	Status int
	Header http.Header
	Body   []byte
	Wrote  bool
	Err    error
}

// Category is what a failed exchange (Err set) means: Uncertain when the
// request was written, Retryable when it was not.
func (e Exchange) Category() provider.Category {
	if e.Wrote {
		return provider.Uncertain
	}
	return provider.Retryable
}

// Do makes the request (method, url, headers, body) within t, and
// reports whether it was written.
func Do(ctx context.Context, c *http.Client, t Timeouts, method, url string, header http.Header, body []byte) Exchange {
	t = t.WithDefaults()
	callCtx, cancel := context.WithTimeoutCause(ctx, t.Connect+2*t.Response, ErrCallTimeout)
	defer cancel()
	var wrote atomic.Bool
	callCtx = httptrace.WithClientTrace(callCtx, &httptrace.ClientTrace{
		WroteRequest: func(info httptrace.WroteRequestInfo) {
			if info.Err == nil {
				wrote.Store(true)
			}
		},
	})
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(callCtx, method, url, rd)
	if err != nil {
		return Exchange{Err: fmt.Errorf("build request: %w", err)}
	}
	// Without GetBody net/http cannot replay the request on another
	// connection once the body has been read: at most one delivery.
	req.GetBody = nil
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := c.Do(req)
	if err != nil {
		return Exchange{Wrote: wrote.Load(), Err: describe(callCtx, err)}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		// The answer started: the request was certainly written.
		return Exchange{Wrote: true, Err: fmt.Errorf("read answer: %w", describe(callCtx, err))}
	}
	return Exchange{Status: resp.StatusCode, Header: resp.Header, Body: b, Wrote: true}
}

// describe names the overall deadline when it is what ended a call.
func describe(callCtx context.Context, err error) error {
	if errors.Is(context.Cause(callCtx), ErrCallTimeout) {
		return fmt.Errorf("%w: %w", ErrCallTimeout, err)
	}
	return err
}

// Snippet shortens an answer body for an error message.
func Snippet(b []byte) string {
	const max = 200
	if len(b) > max {
		return string(b[:max]) + "…"
	}
	return string(b)
}

// Same is n copies of one result: a call-level outcome for every
// recipient.
func Same(n int, r provider.RecipientResult) provider.SendResult {
	out := make([]provider.RecipientResult, n)
	for i := range out {
		out[i] = r
	}
	return provider.SendResult{Recipients: out}
}

// Wrap is wrap(c), or c when wrap is nil (an adapter's Config.WrapHTTP).
func Wrap(wrap func(*http.Client) *http.Client, c *http.Client) *http.Client {
	if wrap == nil {
		return c
	}
	return wrap(c)
}
