package content

import (
	"errors"
	"testing"
)

func TestRender(t *testing.T) {
	tests := []struct {
		name, tmpl string
		vars       map[string]string
		want       string
		missing    string
	}{
		{"plain", "hello", nil, "hello", ""},
		{"one var", "Hi {{name}}!", map[string]string{"name": "Li"}, "Hi Li!", ""},
		{"spaces in braces", "Hi {{ name }}", map[string]string{"name": "Li"}, "Hi Li", ""},
		{"repeated", "{{a}}{{a}}", map[string]string{"a": "x"}, "xx", ""},
		{"chinese", "您好，{{name}}", map[string]string{"name": "李雷"}, "您好，李雷", ""},
		{"missing", "Hi {{name}}, {{city}}", map[string]string{"name": "Li"}, "", "city"},
		{"empty value is present", "[{{a}}]", map[string]string{"a": ""}, "[]", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tmpl, err := Parse(tt.tmpl)
			if err != nil {
				t.Fatal(err)
			}
			got, err := tmpl.Render(tt.vars)
			if tt.missing != "" {
				var m *MissingVarError
				if !errors.As(err, &m) || m.Var != tt.missing {
					t.Fatalf("err = %v, want missing %q", err, tt.missing)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("Render = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	for _, s := range []string{"Hi {{name", "{{}}", "{{ }}", "a {{b{c}} d"} {
		if _, err := Parse(s); err == nil {
			t.Errorf("Parse(%q) succeeded, want error", s)
		}
	}
}

func TestVars(t *testing.T) {
	tmpl, err := Parse("{{b}} {{a}} {{b}}")
	if err != nil {
		t.Fatal(err)
	}
	got := tmpl.Vars()
	if len(got) != 2 || got[0] != "b" || got[1] != "a" {
		t.Fatalf("Vars = %v", got)
	}
}

func FuzzParseRender(f *testing.F) {
	f.Add("Hi {{name}}", "name", "Li")
	f.Add("{{", "", "")
	f.Fuzz(func(t *testing.T, s, k, v string) {
		tmpl, err := Parse(s)
		if err != nil {
			return
		}
		vars := map[string]string{k: v}
		for _, name := range tmpl.Vars() {
			vars[name] = v
		}
		if _, err := tmpl.Render(vars); err != nil {
			t.Fatalf("render with every var set: %v", err)
		}
	})
}

// TestRenderedLenIsRendersLength: RenderedLen agrees with Render, and
// reports a missing variable the same way.
func TestRenderedLenIsRendersLength(t *testing.T) {
	tmpl, err := Parse("Hi {{name}}, {{ name }} — 你好 {{city}}!")
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{"name": "李雷", "city": "上海"}
	r, _ := tmpl.Render(vars)
	if n, err := tmpl.RenderedLen(vars); err != nil || n != len(r) {
		t.Fatalf("RenderedLen = %d, %v; Render gave %d bytes", n, err, len(r))
	}
	var missing *MissingVarError
	if _, err := tmpl.RenderedLen(map[string]string{"name": "x"}); !errors.As(err, &missing) || missing.Var != "city" {
		t.Fatalf("RenderedLen without city: %v", err)
	}
}
