// Package dashboard is the operator dashboard of qunfa: a single page of
// plain HTML, CSS and JavaScript, embedded in the binary and served by the
// API handler at /ui/ (DESIGN.md, "api": "the operator dashboard").
//
// The page itself needs no token: it is static and holds no data. Every
// number on it comes from HTTP API v1 calls made by the browser with the
// token the operator typed at login (kept in sessionStorage, so it is gone
// when the tab closes). The job page shows the API's counts and failures
// fields as they are, so it agrees with `qunfa watch` and `qunfa status`.
package dashboard

import (
	"embed"
	"io/fs"
	"net/http"
)

// Prefix is the path the dashboard is served under.
const Prefix = "/ui/"

//go:embed static
var static embed.FS

// contentSecurityPolicy allows only the dashboard's own scripts, styles and
// API calls: no inline script, no third-party origin.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'"

// Assets is the dashboard's files (index.html at the root), for tests and
// for serving elsewhere.
func Assets() fs.FS {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		// The embedded tree always has "static"; this cannot happen.
		return static
	}
	return sub
}

// Handler serves the dashboard under Prefix. Mount it on "GET /ui/".
// Paths outside Prefix are not found.
func Handler() http.Handler {
	files := http.StripPrefix(Prefix, http.FileServerFS(Assets()))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		// The files change only with the binary; revalidate so an upgrade
		// shows at the next load.
		h.Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})
}
