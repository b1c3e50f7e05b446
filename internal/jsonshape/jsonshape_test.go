package jsonshape

import (
	"encoding/json"
	"reflect"
	"testing"
)

type shape struct {
	Name string
	N    int
	Tags []string
}

func readShape(body string) (shape, bool) {
	var s shape
	d := NewDecoder([]byte(body))
	ok := d.Object(func(name []byte) bool {
		switch string(name) {
		case `"name"`:
			return d.String(&s.Name)
		case `"n"`:
			return d.Int(&s.N)
		case `"tags"`:
			return d.Strings(&s.Tags)
		}
		return false
	}) && d.End()
	return s, ok
}

// TestReadsOnlyTheExpectedShape: the expected shape is read whole, and
// everything encoding/json would read differently (escapes, null,
// fractions, exponents, duplicate names, invalid UTF-8, another name or
// type, trailing data) makes the reader answer false.
func TestReadsOnlyTheExpectedShape(t *testing.T) {
	got, ok := readShape(` {"name": "群发", "n": -42, "tags": ["a", "b"]} `)
	if want := (shape{Name: "群发", N: -42, Tags: []string{"a", "b"}}); !ok || !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, %v; want %+v", got, ok, want)
	}
	if got, ok := readShape(`{"tags":[]}`); !ok || got.Tags == nil || len(got.Tags) != 0 {
		t.Errorf("empty array: %+v, %v; want an empty, non-nil slice", got, ok)
	}
	for _, body := range []string{
		`{"name":"a\"b"}`, `{"name":"\u00e9"}`, `{"name":null}`, `{"n":1.0}`, `{"n":1e2}`,
		`{"n":99999999999999999999}`, `{"n":"1"}`, `{"n":1,"n":2}`, "{\"name\":\"\xff\"}",
		`{"Name":"a"}`, `{"other":1}`, `{"tags":[1]}`, `{"tags":null}`, `{"n":1} x`, `{"n":1}{}`, `[]`, ``, `{"n":1`,
	} {
		if got, ok := readShape(body); ok {
			t.Errorf("%q read as %+v", body, got)
		}
	}
}

var appendStrings = []string{"", "plain", "群发通知", "<a&b>", "q\"uote\\", "line\nbreak\t\x01", "\u2028\u2029", "bad\xffutf8", "\x7f", "emoji 😀"}

// TestAppendStringIsJSONMarshal: strings are appended as json.Marshal
// writes them.
func TestAppendStringIsJSONMarshal(t *testing.T) {
	for _, s := range appendStrings {
		checkAppendString(t, s)
	}
}

// FuzzAppendString: any string is appended as json.Marshal writes it.
func FuzzAppendString(f *testing.F) {
	for _, s := range appendStrings {
		f.Add(s)
	}
	f.Fuzz(checkAppendString)
}

func checkAppendString(t *testing.T, s string) {
	want, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if got := AppendString([]byte("x"), s); string(got) != "x"+string(want) {
		t.Errorf("AppendString(%q) = %s, want x%s", s, got, want)
	}
}
