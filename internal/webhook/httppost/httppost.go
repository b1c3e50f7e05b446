// Package httppost is the HTTP adapter of webhook.Poster: it POSTs a
// delivery to the tenant's endpoint with a bounded timeout, without
// following redirects or using proxies, and (unless private addresses are
// allowed, for local testing) refusing to connect to any non-public
// address after name resolution (netguard.Control), which stops DNS
// rebinding.
package httppost

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/qunfa/qunfa/internal/netguard"
	"github.com/qunfa/qunfa/internal/webhook"
)

// Config configures the client.
type Config struct {
	// Timeout bounds one attempt, connection to answer (default 10 s).
	Timeout time.Duration
	// AllowPrivate lets deliveries reach loopback and private addresses
	// (`qunfa dev --allow-private-urls`); never in production.
	AllowPrivate bool
}

// Client posts deliveries.
type Client struct {
	http *http.Client
}

var _ webhook.Poster = (*Client)(nil)

// New returns a client.
func New(c Config) *Client {
	if c.Timeout <= 0 {
		c.Timeout = 10 * time.Second
	}
	d := &net.Dialer{Timeout: c.Timeout / 2}
	if !c.AllowPrivate {
		d.Control = netguard.Control
	}
	tr := &http.Transport{
		Proxy:                 nil, // a proxy would dial for us, past the guard
		DialContext:           d.DialContext,
		TLSHandshakeTimeout:   c.Timeout / 2,
		ResponseHeaderTimeout: c.Timeout,
		MaxIdleConnsPerHost:   2,
		IdleConnTimeout:       30 * time.Second,
	}
	return &Client{http: &http.Client{
		Transport: tr,
		Timeout:   c.Timeout,
		// A redirect is an answer (3xx: not delivered), never followed:
		// following it would let an endpoint point us anywhere.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

// Post sends one attempt and returns the answer's status; the answer's
// body is read (up to 64 KiB) and dropped.
func (c *Client) Post(ctx context.Context, r webhook.Request) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.URL, bytes.NewReader(r.Body))
	if err != nil {
		return 0, fmt.Errorf("webhook request: %w", err)
	}
	for k, v := range r.Header {
		req.Header[k] = v
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}
