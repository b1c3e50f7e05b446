package content

import (
	"errors"
	"strings"
	"testing"
)

// FuzzTemplate parses arbitrary templates and renders them: Parse never
// panics; a parsed template renders with every variable it names, and the
// result is the template with each placeholder replaced; a missing
// variable is a MissingVarError.
func FuzzTemplate(f *testing.F) {
	for _, s := range []string{"Hi {{name}}, {{ code }}!", "{{", "}}{{a}}{{", "{{}}", "{{a}}{{a}}{{b}}", "a{{ {b} }}c", "\xff{{\xfe}}", ""} {
		f.Add(s, "v")
	}
	f.Fuzz(func(t *testing.T, src, value string) {
		tmpl, err := Parse(src)
		if err != nil {
			return
		}
		vars := map[string]string{}
		for _, v := range tmpl.Vars() {
			vars[v] = value
		}
		out, err := tmpl.Render(vars)
		if err != nil {
			t.Fatalf("Render(%q) with every variable: %v", src, err)
		}
		if value == "" && len(out) > len(src) {
			t.Fatalf("Render(%q) with empty values is longer than the template: %q", src, out)
		}
		if len(vars) == 0 {
			if out != src {
				t.Fatalf("Render(%q) without placeholders = %q", src, out)
			}
			return
		}
		if !strings.Contains(src, "{{") {
			t.Fatalf("%q has variables %v but no placeholder", src, tmpl.Vars())
		}
		_, err = tmpl.Render(nil)
		var missing *MissingVarError
		if !errors.As(err, &missing) {
			t.Fatalf("Render(%q) without variables: err %v, want MissingVarError", src, err)
		}
	})
}
