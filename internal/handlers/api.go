package handlers

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"
)

// API serves an http.Handler (the HTTP API v1 of internal/api) to API
// Gateway HTTP API events (payload format 2.0): each event becomes an
// http.Request, the handler answers into a buffer, and the buffer becomes
// the response event. The local runtime serves the same handler directly.
func API(h http.Handler) func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	return func(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		req, err := apiRequest(ctx, ev)
		if err != nil {
			// A malformed event is API Gateway's fault, not the caller's:
			// answer 400 rather than failing the invocation (a 500 page).
			return events.APIGatewayV2HTTPResponse{
				StatusCode: http.StatusBadRequest,
				Headers:    map[string]string{"Content-Type": "application/problem+json"},
				Body:       fmt.Sprintf(`{"type":"urn:qunfa:problem:bad-request","title":"Malformed request","status":400,"detail":%q}`, err.Error()),
			}, nil
		}
		rec := &bufferedResponse{header: http.Header{}}
		h.ServeHTTP(rec, req)
		return rec.event(), nil
	}
}

// apiRequest builds the http.Request an event stands for.
func apiRequest(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (*http.Request, error) {
	method := ev.RequestContext.HTTP.Method
	if method == "" {
		return nil, fmt.Errorf("event has no requestContext.http.method")
	}
	path := ev.RawPath
	if path == "" {
		path = ev.RequestContext.HTTP.Path
	}
	// A named stage (not $default) is part of the raw path: drop it, so
	// routes are the same whatever the stage.
	if st := ev.RequestContext.Stage; st != "" && st != "$default" {
		if rest, ok := strings.CutPrefix(path, "/"+st); ok && (rest == "" || rest[0] == '/') {
			path = rest
		}
	}
	if path == "" {
		path = "/"
	}
	target := path
	if ev.RawQueryString != "" {
		target += "?" + ev.RawQueryString
	}
	u, err := url.ParseRequestURI(target)
	if err != nil {
		return nil, fmt.Errorf("event path %q: %w", target, err)
	}
	body := []byte(ev.Body)
	if ev.IsBase64Encoded {
		if body, err = base64.StdEncoding.DecodeString(ev.Body); err != nil {
			return nil, fmt.Errorf("event body is not base64: %w", err)
		}
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("event request: %w", err)
	}
	req.RequestURI = target
	req.ContentLength = int64(len(body))
	// Payload 2.0 joins repeated headers with commas and lower-cases names;
	// http.Header canonicalises them again.
	for k, v := range ev.Headers {
		req.Header.Set(k, v)
	}
	if len(ev.Cookies) > 0 {
		req.Header.Set("Cookie", strings.Join(ev.Cookies, "; "))
	}
	req.Host = ev.RequestContext.DomainName
	if h := req.Header.Get("Host"); h != "" {
		req.Host = h
	}
	req.RemoteAddr = ev.RequestContext.HTTP.SourceIP
	if p := ev.RequestContext.HTTP.Protocol; p != "" {
		if major, minor, ok := http.ParseHTTPVersion(p); ok {
			req.Proto, req.ProtoMajor, req.ProtoMinor = p, major, minor
		}
	}
	return req, nil
}

// bufferedResponse is an http.ResponseWriter that keeps the answer for the
// response event.
type bufferedResponse struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (b *bufferedResponse) Header() http.Header { return b.header }

func (b *bufferedResponse) WriteHeader(code int) {
	if b.status == 0 {
		b.status = code
	}
}

func (b *bufferedResponse) Write(p []byte) (int, error) {
	b.WriteHeader(http.StatusOK)
	return b.body.Write(p)
}

// ReadFrom lets io.Copy into the response work as with a real one.
func (b *bufferedResponse) ReadFrom(r io.Reader) (int64, error) {
	b.WriteHeader(http.StatusOK)
	return b.body.ReadFrom(r)
}

func (b *bufferedResponse) event() events.APIGatewayV2HTTPResponse {
	status := b.status
	if status == 0 {
		status = http.StatusOK
	}
	resp := events.APIGatewayV2HTTPResponse{StatusCode: status, Headers: map[string]string{}}
	for k, vs := range b.header {
		if strings.EqualFold(k, "Set-Cookie") {
			resp.Cookies = append(resp.Cookies, vs...)
			continue
		}
		resp.Headers[k] = strings.Join(vs, ", ")
	}
	if utf8.Valid(b.body.Bytes()) {
		resp.Body = b.body.String()
	} else {
		resp.Body = base64.StdEncoding.EncodeToString(b.body.Bytes())
		resp.IsBase64Encoded = true
	}
	return resp
}
