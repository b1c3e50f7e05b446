// Package jsonshape reads JSON of an expected shape without reflection, for
// hot paths that decode one struct type many times a second: an object of
// known field names holding integers, strings without escapes, arrays and
// objects. A reader answers false at anything else (an escape, a null, a
// fraction, a duplicate name, invalid UTF-8, trailing data), and its caller
// then decodes with encoding/json, so results are always encoding/json's.
package jsonshape

import (
	"bytes"
	"io"
	"strconv"

	"github.com/go-json-experiment/json/jsontext"
)

// Decoder reads one JSON value from a byte slice (without copying it).
type Decoder struct{ d *jsontext.Decoder }

// NewDecoder reads body.
func NewDecoder(body []byte) Decoder {
	return Decoder{jsontext.NewDecoder(bytes.NewBuffer(body))}
}

// End reports whether nothing but white space follows what was read.
func (d Decoder) End() bool {
	_, err := d.d.ReadToken()
	return err == io.EOF
}

// Object reads an object, calling field with each name (raw, quotes
// included: compare with `"name"`) to read its value.
func (d Decoder) Object(field func(name []byte) bool) bool {
	if d.d.PeekKind() != '{' {
		return false
	}
	if _, err := d.d.ReadToken(); err != nil {
		return false
	}
	for d.d.PeekKind() != '}' {
		name, err := d.d.ReadValue()
		if err != nil || !field(name) {
			return false
		}
	}
	_, err := d.d.ReadToken()
	return err == nil
}

// Array reads an array, calling elem to read each element.
func (d Decoder) Array(elem func() bool) bool {
	if d.d.PeekKind() != '[' {
		return false
	}
	if _, err := d.d.ReadToken(); err != nil {
		return false
	}
	for d.d.PeekKind() != ']' {
		if !elem() {
			return false
		}
	}
	_, err := d.d.ReadToken()
	return err == nil
}

// Int reads a number that is an integer of Go's int written as
// encoding/json reads one into an int (no fraction, no exponent).
func (d Decoder) Int(n *int) bool {
	if d.d.PeekKind() != '0' {
		return false
	}
	v, err := d.d.ReadValue()
	if err != nil {
		return false
	}
	*n, err = strconv.Atoi(string(v))
	return err == nil
}

// String reads a string without escapes (the decoder checks it is valid
// UTF-8), which encoding/json reads as its bytes.
func (d Decoder) String(s *string) bool {
	if d.d.PeekKind() != '"' {
		return false
	}
	v, err := d.d.ReadValue()
	if err != nil || bytes.IndexByte(v, '\\') >= 0 {
		return false
	}
	*s = string(v[1 : len(v)-1])
	return true
}

// Strings reads an array of strings (a non-nil slice, as encoding/json
// makes of [], appended to *s).
func (d Decoder) Strings(s *[]string) bool {
	if *s == nil {
		*s = []string{}
	}
	return d.Array(func() bool {
		var v string
		ok := d.String(&v)
		*s = append(*s, v)
		return ok
	})
}
