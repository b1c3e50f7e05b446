package dashboard_test

import (
	"encoding/json"
	"io"
	"io/fs"
	"maps"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/qunfa/qunfa/internal/api"
	"github.com/qunfa/qunfa/internal/dashboard"
)

// TestServedByAPI checks that the API handler serves the dashboard at /ui/
// without a token, with the right types and a strict content policy.
func TestServedByAPI(t *testing.T) {
	h := api.New(api.Deps{})
	for _, tc := range []struct{ path, ctype, contains string }{
		{"/ui/", "text/html", `<script src="app.js" defer></script>`},
		{"/ui/app.js", "text/javascript", "confirmDialog"},
		{"/ui/app.css", "text/css", ":focus-visible"},
		{"/ui/i18n.json", "application/json", `"nav.jobs"`},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", tc.path, nil))
		if rec.Code != http.StatusOK {
			t.Errorf("GET %s: status %d, want 200", tc.path, rec.Code)
			continue
		}
		if got := rec.Header().Get("Content-Type"); !strings.HasPrefix(got, tc.ctype) {
			t.Errorf("GET %s: Content-Type %q, want %s", tc.path, got, tc.ctype)
		}
		csp := rec.Header().Get("Content-Security-Policy")
		if !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "connect-src 'self'") {
			t.Errorf("GET %s: Content-Security-Policy %q does not confine scripts and calls to the origin", tc.path, csp)
		}
		if !strings.Contains(rec.Body.String(), tc.contains) {
			t.Errorf("GET %s: body lacks %q", tc.path, tc.contains)
		}
	}

	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/ui", nil))
	if rec.Code/100 != 3 || rec.Header().Get("Location") != "/ui/" {
		t.Errorf("GET /ui: %d to %q, want a redirect to /ui/", rec.Code, rec.Header().Get("Location"))
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/ui/nope.js", nil))
	if rec.Code != http.StatusNotFound {
		t.Errorf("GET /ui/nope.js: status %d, want 404", rec.Code)
	}
	if slices.ContainsFunc(api.Routes(), func(r string) bool { return strings.Contains(r, "/ui") }) {
		t.Errorf("api.Routes() lists the dashboard; it is not an API v1 route: %v", api.Routes())
	}
}

// TestNoExternalResources checks that the page loads nothing from another
// origin: no CDN, everything embedded.
func TestNoExternalResources(t *testing.T) {
	ext := regexp.MustCompile(`(?i)(src|href)\s*=\s*["'](https?:)?//|@import|url\(\s*["']?https?:`)
	err := fs.WalkDir(dashboard.Assets(), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b := readAsset(t, path)
		if m := ext.FindString(b); m != "" {
			t.Errorf("%s refers to another origin: %q", path, m)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestDictionary checks that both languages have every string, with the
// same placeholders, and that every key the page uses literally exists.
func TestDictionary(t *testing.T) {
	var dict map[string]map[string]string
	if err := json.Unmarshal([]byte(readAsset(t, "i18n.json")), &dict); err != nil {
		t.Fatal(err)
	}
	en, zh := dict["en"], dict["zh"]
	if len(en) == 0 || len(zh) == 0 {
		t.Fatalf("i18n.json needs \"en\" and \"zh\"; has %v", slices.Collect(maps.Keys(dict)))
	}
	placeholder := regexp.MustCompile(`\{\w+\}`)
	for k, v := range en {
		z, ok := zh[k]
		switch {
		case !ok:
			t.Errorf("zh lacks %q", k)
		case strings.TrimSpace(v) == "" || strings.TrimSpace(z) == "":
			t.Errorf("%q is empty in a language", k)
		default:
			a, b := placeholder.FindAllString(v, -1), placeholder.FindAllString(z, -1)
			slices.Sort(a)
			slices.Sort(b)
			if !slices.Equal(a, b) {
				t.Errorf("%q: placeholders differ: en %v, zh %v", k, a, b)
			}
		}
	}
	for k := range zh {
		if _, ok := en[k]; !ok {
			t.Errorf("en lacks %q", k)
		}
	}

	used := map[string]bool{}
	js := readAsset(t, "app.js")
	for _, re := range []*regexp.Regexp{
		regexp.MustCompile(`\bt\('([\w.]*\w)'`),
		// field(id, labelKey, input[, helpKey]): the label and the help.
		regexp.MustCompile(`\bfield\('[\w-]+', '([\w.]+)'`),
		regexp.MustCompile(`, '([\w.]+\.help)'\)`),
		// Table headers: ['a.b', 'c.d'].map((k) => h('th', …, t(k))).
		regexp.MustCompile(`'([\w]+\.[\w.]+)'(?:, '[\w.]+')*\]\.map\(\(k\) => h\('th'`),
		regexp.MustCompile(`'([\w]+\.[\w.]+)', (?:'[\w.]+', )*'[\w.]+'\]\.map\(\(k\) => h\('th'`),
		// Label/value pairs: [['a.b', value], ...].
		regexp.MustCompile(`\['([\w]+\.[\w.]+)', [^'\]]`),
	} {
		for _, m := range re.FindAllStringSubmatch(js, -1) {
			used[m[1]] = true
		}
	}
	// Every key of a header list, not only the first and the last.
	for _, m := range regexp.MustCompile(`\[((?:'[\w.]+', )+'[\w.]+')\]\.map\(\(k\) => h\('th'`).FindAllStringSubmatch(js, -1) {
		for _, k := range regexp.MustCompile(`'([\w.]+)'`).FindAllStringSubmatch(m[1], -1) {
			used[k[1]] = true
		}
	}
	// Keys built from a fixed list: the statuses and categories the API
	// documents, and the job commands.
	for _, s := range []string{"pending", "submitted", "confirmed", "failed", "abandoned"} {
		used["istatus."+s] = true
	}
	for _, s := range []string{"running", "paused", "completed", "partial", "failed", "cancelled"} {
		used["status."+s] = true
	}
	for _, s := range []string{"manual", "budget", "breaker", "canary"} {
		used["reason."+s] = true
	}
	for _, c := range []string{"retryable", "rate_limited", "permanent", "uncertain", "exhausted", "cancelled", "suppressed"} {
		used["cat."+c] = true
	}
	for _, v := range []string{"pause", "resume", "approve", "cancel"} {
		for _, s := range []string{"", ".title", ".yes", ".done"} {
			used["act."+v+s] = true
		}
	}
	for _, st := range []string{"pending", "delivered", "failed"} {
		used["dstatus."+st] = true
	}
	for _, m := range []string{"snapshot", "requery"} {
		used["camp.mode."+m] = true
	}
	for _, o := range []string{"delivered", "resend"} {
		for _, s := range []string{".title", ".body", ".yes"} {
			used["review."+o+s] = true
		}
	}
	for _, c := range []string{"exhausted", "permanent"} {
		used["dead.title."+c] = true
		used["dead.body."+c] = true
	}
	for _, f := range []string{"rate_per_sec", "burst", "online_reserve_per_sec", "max_recipients_per_call",
		"consecutive_failures", "failure_rate", "min_samples", "cooldown_sec"} {
		used["acct."+f] = true
		used["acct."+f+".help"] = true
	}
	html := readAsset(t, "index.html")
	for _, m := range regexp.MustCompile(`data-i18n(?:-aria)?="([\w.]+)"`).FindAllStringSubmatch(html, -1) {
		used[m[1]] = true
	}
	for k := range used {
		if _, ok := en[k]; !ok {
			t.Errorf("the page uses %q but i18n.json lacks it", k)
		}
	}
}

func readAsset(t *testing.T, name string) string {
	t.Helper()
	f, err := dashboard.Assets().Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
