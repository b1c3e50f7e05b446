package httpcall

import "testing"

func TestBaseURL(t *testing.T) {
	for raw, want := range map[string]string{
		"":                       "https://api.example.test",
		"http://127.0.0.1:8080/": "http://127.0.0.1:8080",
		"https://h.test/root//":  "https://h.test/root",
	} {
		if got, err := BaseURL(raw, "https://api.example.test"); err != nil || got != want {
			t.Errorf("BaseURL(%q) = %q, %v; want %q", raw, got, err, want)
		}
	}
	for _, raw := range []string{"api.example.test", "ftp://h.test", "http://", "://x"} {
		if got, err := BaseURL(raw, "https://api.example.test"); err == nil {
			t.Errorf("BaseURL(%q) = %q, want an error", raw, got)
		}
	}
}
