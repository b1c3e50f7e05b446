package api

import (
	_ "embed"
	"net/http"
	"slices"
)

// openAPISpec is the OpenAPI 3.1 description of API v1. openapi_test.go
// holds it to the router (every route described, nothing else) and to the
// handler's real answers.
//
//go:embed openapi.json
var openAPISpec []byte

// OpenAPISpec returns the OpenAPI 3.1 description of API v1 as JSON, the
// document GET /v1/openapi.json serves. The caller may keep the slice.
func OpenAPISpec() []byte { return slices.Clone(openAPISpec) }

// serveOpenAPI answers GET /v1/openapi.json; it needs no token, so tools
// can read the description before they have one.
func serveOpenAPI(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "public, max-age=300")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(openAPISpec)
	}
}

// Routes lists the "METHOD /path" patterns New registers, in order (the
// paths in net/http pattern syntax, which is also OpenAPI's path
// template syntax). It is the router's table of contents: the OpenAPI test
// checks that the description and the router agree both ways.
func Routes() []string {
	return slices.Clone(New(Deps{}).(*server).mux.patterns)
}

// routeMux is an http.ServeMux that remembers the patterns registered on
// it, so Routes cannot drift from New.
type routeMux struct {
	*http.ServeMux
	patterns []string
}

func newRouteMux() *routeMux { return &routeMux{ServeMux: http.NewServeMux()} }

// Handle registers h for pattern and records the pattern.
func (m *routeMux) Handle(pattern string, h http.Handler) {
	m.patterns = append(m.patterns, pattern)
	m.ServeMux.Handle(pattern, h)
}

// HandleFunc registers h for pattern and records the pattern.
func (m *routeMux) HandleFunc(pattern string, h func(http.ResponseWriter, *http.Request)) {
	m.Handle(pattern, http.HandlerFunc(h))
}
