// Package apispec holds HTTP API v1 to its OpenAPI description
// (api.OpenAPISpec) in tests: ValidateAgainstSpec checks that a real
// answer is one the description allows, so the in-process API tests and
// the process-level e2e tests catch a handler and its description drifting
// apart.
package apispec

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/qunfa/qunfa/internal/api"
)

// Load parses and validates the OpenAPI description of API v1.
func Load() (*openapi3.T, error) { return load(api.OpenAPISpec()) }

// Load30 parses and validates the OpenAPI 3.0.3 rendering of the
// description (api.OpenAPISpec30).
func Load30() (*openapi3.T, error) { return load(api.OpenAPISpec30()) }

func load(data []byte) (*openapi3.T, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(data)
	if err != nil {
		return nil, fmt.Errorf("apispec: load the OpenAPI description: %w", err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		return nil, fmt.Errorf("apispec: the OpenAPI description is invalid: %w", err)
	}
	return doc, nil
}

// spec and spec30 are the description and its 3.0 rendering, loaded
// once, with their routers.
var (
	spec   = sync.OnceValues(func() (*specRouter, error) { return newSpecRouter(Load) })
	spec30 = sync.OnceValues(func() (*specRouter, error) { return newSpecRouter(Load30) })
)

func newSpecRouter(load func() (*openapi3.T, error)) (*specRouter, error) {
	doc, err := load()
	if err != nil {
		return nil, err
	}
	// Route by path alone: the servers list names where the API runs
	// (qunfa dev, a deployed stack), while tests reach it on any address.
	routed := *doc
	routed.Servers = nil
	r, err := legacy.NewRouter(&routed)
	if err != nil {
		return nil, fmt.Errorf("apispec: route the OpenAPI description: %w", err)
	}
	return &specRouter{doc: doc, router: r}, nil
}

type specRouter struct {
	doc    *openapi3.T
	router routers.Router
}

// Validate checks that resp is an answer the description allows to req:
// its status is one the operation lists, and its headers and body match
// that response's schemas. The request itself is not checked (tests send
// invalid requests on purpose). A request on a path or method the
// description does not have must have been answered with a 404 or 405
// problem. Validate reads resp.Body and leaves it readable again.
func Validate(req *http.Request, resp *http.Response) error {
	return validate(spec, req, resp)
}

// Validate30 is Validate against the OpenAPI 3.0.3 rendering: generators
// of 3.0 clients must be able to read every real answer too (a null where
// the rendering does not say nullable fails here).
func Validate30(req *http.Request, resp *http.Response) error {
	return validate(spec30, req, resp)
}

func validate(spec func() (*specRouter, error), req *http.Request, resp *http.Response) error {
	sr, err := spec()
	if err != nil {
		return err
	}
	body, err := readBody(resp)
	if err != nil {
		return err
	}
	route, params, err := sr.router.FindRoute(routable(req))
	if err != nil {
		var rerr *routers.RouteError
		if !errors.As(err, &rerr) {
			return fmt.Errorf("apispec: find the operation of %s %s: %w", req.Method, req.URL.Path, err)
		}
		return checkUnrouted(sr.doc, req, resp, body)
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{
			Request:    req,
			PathParams: params,
			Route:      route,
		},
		Status: resp.StatusCode,
		Header: resp.Header,
		Body:   io.NopCloser(bytes.NewReader(body)),
		Options: &openapi3filter.Options{
			IncludeResponseStatus: true,
			MultiError:            true,
		},
	}
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		return fmt.Errorf("apispec: %s %s answered %d, which the OpenAPI description does not allow: %w\nbody: %s",
			req.Method, req.URL.Path, resp.StatusCode, err, body)
	}
	return nil
}

// ValidateAgainstSpec fails t unless resp is an answer the OpenAPI
// description allows to req (see Validate). resp.Body stays readable.
func ValidateAgainstSpec(t testing.TB, req *http.Request, resp *http.Response) {
	t.Helper()
	if err := Validate(req, resp); err != nil {
		t.Error(err)
	}
}

// ValidateAgainstSpec30 is ValidateAgainstSpec with the OpenAPI 3.0.3
// rendering (see Validate30).
func ValidateAgainstSpec30(t testing.TB, req *http.Request, resp *http.Response) {
	t.Helper()
	if err := Validate30(req, resp); err != nil {
		t.Error(err)
	}
}

// checkUnrouted accepts only a problem answer of 404 (no such path) or 405
// (no such method on the path) to a request the description has no
// operation for.
func checkUnrouted(doc *openapi3.T, req *http.Request, resp *http.Response, body []byte) error {
	if resp.StatusCode != http.StatusNotFound && resp.StatusCode != http.StatusMethodNotAllowed {
		return fmt.Errorf("apispec: %s %s is not in the OpenAPI description, yet it answered %d (want a 404 or 405 problem)",
			req.Method, req.URL.Path, resp.StatusCode)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/problem+json") {
		return fmt.Errorf("apispec: %s %s answered %d with Content-Type %q, want application/problem+json",
			req.Method, req.URL.Path, resp.StatusCode, ct)
	}
	if resp.StatusCode == http.StatusMethodNotAllowed && resp.Header.Get("Allow") == "" {
		return fmt.Errorf("apispec: %s %s answered 405 without an Allow header (components.responses.MethodNotAllowed requires it)",
			req.Method, req.URL.Path)
	}
	problem := doc.Components.Schemas["Problem"]
	var v any
	if err := jsonUnmarshal(body, &v); err != nil {
		return fmt.Errorf("apispec: %s %s answered %d with a body that is not JSON: %w", req.Method, req.URL.Path, resp.StatusCode, err)
	}
	if err := problem.Value.VisitJSON(v, openapi3.EnableJSONSchema2020(), openapi3.VisitAsResponse(), openapi3.MultiErrors()); err != nil {
		return fmt.Errorf("apispec: %s %s answered %d with a body that is not a Problem: %w\nbody: %s",
			req.Method, req.URL.Path, resp.StatusCode, err, body)
	}
	return nil
}

// routable returns req as the router needs it: with a path, whatever
// form the caller built it in.
func routable(req *http.Request) *http.Request {
	if req.URL.Path != "" {
		return req
	}
	r := req.Clone(req.Context())
	r.URL.Path = "/"
	return r
}

// readBody reads resp.Body whole and puts it back.
func readBody(resp *http.Response) ([]byte, error) {
	if resp.Body == nil {
		return nil, nil
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("apispec: read the answer: %w", err)
	}
	return body, nil
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }
