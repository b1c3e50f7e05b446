package httpcall

import (
	"fmt"
	"net/url"
	"strings"
)

// BaseURL checks a provider's API root (def when raw is empty) and returns
// it without a trailing slash, for paths to be appended.
func BaseURL(raw, def string) (string, error) {
	if raw == "" {
		raw = def
	}
	if u, err := url.Parse(raw); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("base URL %q must be an absolute http(s) URL", raw)
	}
	return strings.TrimRight(raw, "/"), nil
}
