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
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
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
	// WrapHTTP, when set, wraps the client (X-Ray tracing under Lambda:
	// awsrun.Tracing.HTTPClient).
	WrapHTTP func(*http.Client) *http.Client
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
	hc := &http.Client{
		Transport: tr,
		Timeout:   c.Timeout,
		// A redirect is an answer (3xx: not delivered), never followed:
		// following it would let an endpoint point us anywhere.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	if c.WrapHTTP != nil {
		hc = c.WrapHTTP(hc)
	}
	return &Client{http: hc}
}

// Post sends one attempt and returns the answer's status and the first
// 4 KiB of its body (the rest, up to 64 KiB, is read and dropped). Errors
// leave the URL out: a WeCom robot's URL holds its key.
func (c *Client) Post(ctx context.Context, r webhook.Request) (webhook.Answer, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.URL, bytes.NewReader(r.Body))
	if err != nil {
		return webhook.Answer{}, errors.New("webhook request: invalid URL")
	}
	for k, v := range r.Header {
		req.Header[k] = v
	}
	resp, err := c.http.Do(req)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			return webhook.Answer{}, fmt.Errorf("%s: %w", uerr.Op, uerr.Err)
		}
		return webhook.Answer{}, err
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 60<<10))
	_ = resp.Body.Close()
	return webhook.Answer{Status: resp.StatusCode, Body: body}, nil
}
