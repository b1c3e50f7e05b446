package jsonshape

import (
	"encoding/json"
	"unicode/utf8"
)

// AppendString appends s as a JSON string, byte for byte what json.Marshal
// makes of it. A string json.Marshal writes as it is (valid UTF-8 without
// control characters, quotes, backslashes, <, >, &, U+2028 or U+2029) is
// copied between quotes without its reflection; any other goes through
// json.Marshal, so the escapes are always its own.
func AppendString(dst []byte, s string) []byte {
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c < 0x20 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
				return appendMarshalled(dst, s)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && size == 1) || r == '\u2028' || r == '\u2029' {
			return appendMarshalled(dst, s)
		}
		i += size
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}

func appendMarshalled(dst []byte, s string) []byte {
	b, _ := json.Marshal(s) // a string always encodes
	return append(dst, b...)
}
