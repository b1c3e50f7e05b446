package wecomapi

import (
	"bytes"
	"encoding/json"
	"io"
	"strconv"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
)

// decodeAnswer decodes an answer's body into ans as json.Unmarshal does,
// returning its error. Answers of the expected shape (an object of the
// answer's exact field names holding integers, strings without escapes,
// result objects and arrays of strings, no null, no duplicate name) are
// read by a token decoder without reflection, which took half the time
// json.Unmarshal did on a /message/send answer of 80 results; any other
// body goes to json.Unmarshal, so the outcome is always its own.
func decodeAnswer(body []byte, ans *answer) error {
	var fast answer
	if readAnswer(body, &fast) {
		*ans = fast
		return nil
	}
	return json.Unmarshal(body, ans)
}

// readAnswer is decodeAnswer's reader of the expected shape: false when
// body has any other shape (ans is then to be thrown away).
func readAnswer(body []byte, ans *answer) bool {
	d := jsontext.NewDecoder(bytes.NewBuffer(body))
	if !readObject(d, func(name []byte) bool {
		switch string(name) {
		case `"errcode"`:
			n, ok := readInt(d)
			ans.Errcode = &n
			return ok
		case `"errmsg"`:
			return readString(d, &ans.Errmsg)
		case `"msgid"`:
			return readString(d, &ans.MsgID)
		case `"status"`:
			return readString(d, &ans.Status)
		case `"results"`:
			ans.Results = []result{}
			return readArray(d, func() bool {
				var r result
				ok := readObject(d, func(name []byte) bool {
					switch string(name) {
					case `"toId"`:
						return readString(d, &r.ToID)
					case `"errcode"`:
						n, ok := readInt(d)
						r.Errcode = n
						return ok
					case `"errmsg"`:
						return readString(d, &r.Errmsg)
					case `"msgid"`:
						return readString(d, &r.MsgID)
					}
					return false
				})
				ans.Results = append(ans.Results, r)
				return ok
			})
		case `"invalid"`:
			ans.Invalid = []string{}
			return readArray(d, func() bool {
				var s string
				ok := readString(d, &s)
				ans.Invalid = append(ans.Invalid, s)
				return ok
			})
		}
		return false
	}) {
		return false
	}
	_, err := d.ReadToken()
	return err == io.EOF
}

// readObject reads an object, calling field with each name (raw, quotes
// included) to read its value.
func readObject(d *jsontext.Decoder, field func(name []byte) bool) bool {
	if d.PeekKind() != '{' {
		return false
	}
	if _, err := d.ReadToken(); err != nil {
		return false
	}
	for d.PeekKind() != '}' {
		name, err := d.ReadValue()
		if err != nil || !field(name) {
			return false
		}
	}
	_, err := d.ReadToken()
	return err == nil
}

// readArray reads an array, calling elem to read each element.
func readArray(d *jsontext.Decoder, elem func() bool) bool {
	if d.PeekKind() != '[' {
		return false
	}
	if _, err := d.ReadToken(); err != nil {
		return false
	}
	for d.PeekKind() != ']' {
		if !elem() {
			return false
		}
	}
	_, err := d.ReadToken()
	return err == nil
}

// readInt reads a number that is an integer of Go's int, written as
// json.Unmarshal reads into an int (no fraction, no exponent).
func readInt(d *jsontext.Decoder) (int, bool) {
	if d.PeekKind() != '0' {
		return 0, false
	}
	v, err := d.ReadValue()
	if err != nil {
		return 0, false
	}
	n, err := strconv.Atoi(string(v))
	return n, err == nil
}

// readString reads a string without escapes (valid UTF-8: the decoder
// checks), as json.Unmarshal would.
func readString(d *jsontext.Decoder, s *string) bool {
	if d.PeekKind() != '"' {
		return false
	}
	v, err := d.ReadValue()
	if err != nil || bytes.IndexByte(v, '\\') >= 0 || !utf8.Valid(v) {
		return false
	}
	*s = string(v[1 : len(v)-1])
	return true
}
