// Package httpsource is the HTTP adapter of campaign.RecipientSource: a
// requery campaign's recipients come from the business system's HTTPS
// endpoint, one page per request:
//
//	GET <source>?cursor=<cursor>   (cursor empty for the first page)
//	200 application/json {"recipients": [{"account", "to", "vars"}], "next_cursor": ""}
//
// An empty next_cursor ends the listing. Anything else — another status,
// a body that is not that JSON (unknown fields included), a body over the
// size limit, a redirect, a timeout — is an error naming the page.
package httpsource

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/qunfa/qunfa/internal/campaign"
	"github.com/qunfa/qunfa/internal/netguard"
)

// Config configures a Source.
type Config struct {
	// Client makes the requests (default: a client with the timeouts
	// below); tests pass an httptest TLS server's client.
	Client *http.Client
	// Timeout bounds one page request, answer included (default 10s).
	Timeout time.Duration
	// MaxPageBytes bounds one page's body (default 8 MiB).
	MaxPageBytes int64
	// AllowPrivate lets sources reach loopback and private addresses
	// (`qunfa dev --allow-private-urls`); otherwise every connection is
	// checked after DNS, at dial time, so a name that resolves (or
	// re-resolves) to a private address is refused too.
	AllowPrivate bool
	// WrapHTTP, when set, wraps the client (X-Ray tracing under Lambda:
	// awsrun.Tracing.HTTPClient).
	WrapHTTP func(*http.Client) *http.Client
}

// Source fetches recipients over HTTPS.
type Source struct {
	client  *http.Client
	timeout time.Duration
	max     int64
}

var _ campaign.RecipientSource = (*Source)(nil)

// New returns a Source.
func New(cfg Config) *Source {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.MaxPageBytes <= 0 {
		cfg.MaxPageBytes = 8 << 20
	}
	client := cfg.Client
	if client == nil {
		dialer := &net.Dialer{Timeout: 5 * time.Second}
		if !cfg.AllowPrivate {
			dialer.Control = netguard.Control
		}
		client = &http.Client{Transport: &http.Transport{
			// No proxy: a proxy would dial for us, past the address check.
			Proxy:                 nil,
			DialContext:           dialer.DialContext,
			TLSHandshakeTimeout:   5 * time.Second,
			ResponseHeaderTimeout: cfg.Timeout,
			MaxIdleConnsPerHost:   2,
		}}
	}
	// Never follow redirects: the campaign names its source exactly.
	c := *client
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	hc := &c
	if cfg.WrapHTTP != nil {
		hc = cfg.WrapHTTP(hc)
	}
	return &Source{client: hc, timeout: cfg.Timeout, max: cfg.MaxPageBytes}
}

// page is the wire format of one page.
type page struct {
	Recipients []campaign.Recipient `json:"recipients"`
	NextCursor *string              `json:"next_cursor"`
}

// FetchPage requests one page.
func (s *Source) FetchPage(ctx context.Context, p campaign.FetchParams) (campaign.Page, error) {
	u, err := url.Parse(p.Source)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return campaign.Page{}, fmt.Errorf("source %q is not an https URL", campaign.RedactQuery(p.Source))
	}
	q := u.Query()
	q.Set("cursor", p.Cursor)
	u.RawQuery = q.Encode()
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return campaign.Page{}, err
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "qunfa-campaign")
	resp, err := s.client.Do(req)
	if err != nil {
		// The client's error repeats the whole URL, query (credentials)
		// included: keep only its cause.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return campaign.Page{}, fmt.Errorf("GET %s: %w", redact(u), err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, s.max+1))
	if err != nil {
		return campaign.Page{}, fmt.Errorf("GET %s: read the answer: %w", redact(u), err)
	}
	if resp.StatusCode != http.StatusOK {
		return campaign.Page{}, fmt.Errorf("GET %s: status %d: %s", redact(u), resp.StatusCode, snippet(body))
	}
	if int64(len(body)) > s.max {
		return campaign.Page{}, fmt.Errorf("GET %s: the page is larger than %d bytes", redact(u), s.max)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.Contains(ct, "json") {
		return campaign.Page{}, fmt.Errorf("GET %s: content type %q, want application/json", redact(u), ct)
	}
	var pg page
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&pg); err != nil {
		return campaign.Page{}, fmt.Errorf("GET %s: the answer is not {\"recipients\": [...], \"next_cursor\": \"...\"}: %w", redact(u), err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return campaign.Page{}, fmt.Errorf("GET %s: data after the JSON object", redact(u))
	}
	if pg.Recipients == nil || pg.NextCursor == nil {
		return campaign.Page{}, fmt.Errorf("GET %s: the answer lacks \"recipients\" or \"next_cursor\"", redact(u))
	}
	return campaign.Page{Recipients: pg.Recipients, NextCursor: *pg.NextCursor}, nil
}

// redact drops the query (which may carry a token) from errors.
func redact(u *url.URL) string {
	c := *u
	c.RawQuery = ""
	return c.String()
}

func snippet(b []byte) string {
	s := strings.ToValidUTF8(string(b), "?")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}
