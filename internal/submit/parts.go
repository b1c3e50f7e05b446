package submit

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/qunfa/qunfa/internal/jsonshape"
)

// Media types of a staged part's body.
const (
	MediaJSON   = "application/json"
	MediaNDJSON = "application/x-ndjson"
	MediaCSV    = "text/csv"
)

// MaxPartBytes bounds a staged part's body (through API Gateway the limit
// is lower: 4 MiB, see DESIGN.md).
const MaxPartBytes = 5 << 20

// maxPartErrors bounds the errors listed for one part.
const maxPartErrors = 100

// partBody is the JSON body of a part.
type partBody struct {
	Recipients []Recipient `json:"recipients"`
}

// ParsePart reads the recipients of a part body of the given media type,
// and the line each came from (NDJSON, CSV; counting from 1; nil for
// JSON). Errors name the line or the array index (JSON) of the recipient;
// the recipients are then nil.
func ParsePart(mediaType string, body []byte) ([]Recipient, []int, []FieldError) {
	var (
		out   []Recipient
		lines []int
		errs  []FieldError
	)
	add := func(field, format string, args ...any) {
		if len(errs) < maxPartErrors {
			errs = append(errs, FieldError{Field: field, Message: fmt.Sprintf(format, args...)})
		}
	}
	switch mediaType {
	case MediaJSON:
		var b partBody
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&b); err != nil {
			add("(body)", "is not a JSON object {\"recipients\": [...]}: %v", strings.TrimPrefix(err.Error(), "json: "))
		} else if _, err := dec.Token(); err != io.EOF {
			add("(body)", "has data after the JSON object")
		}
		out = b.Recipients
	case MediaNDJSON:
		line := 0
		sc := bufio.NewScanner(bytes.NewReader(body))
		sc.Buffer(nil, MaxPartBytes+1)
		for sc.Scan() {
			line++
			text := bytes.TrimSpace(sc.Bytes())
			if len(text) == 0 {
				continue
			}
			var rc Recipient
			dec := json.NewDecoder(bytes.NewReader(text))
			dec.DisallowUnknownFields()
			err := dec.Decode(&rc)
			if err == nil {
				if _, terr := dec.Token(); terr != io.EOF {
					err = errors.New("data after the JSON object")
				}
			}
			if err != nil {
				add("line "+strconv.Itoa(line), "is not a recipient object: %v", strings.TrimPrefix(err.Error(), "json: "))
				continue
			}
			out = append(out, rc)
			lines = append(lines, line)
		}
		if err := sc.Err(); err != nil {
			add("line "+strconv.Itoa(line+1), "cannot be read: %v", err)
		}
	case MediaCSV:
		out, lines = parseCSV(body, add)
	default:
		add("Content-Type", "must be %s, %s or %s", MediaJSON, MediaNDJSON, MediaCSV)
	}
	if len(errs) == 0 && len(out) == 0 {
		add("recipients", "the part has no recipients")
	}
	if len(errs) > 0 {
		return nil, nil, errs
	}
	return out, lines, nil
}

// parseCSV reads a CSV part: a header "account,to", then optionally "ref"
// and "var.<name>" columns, in any order after the first two.
func parseCSV(body []byte, add func(field, format string, args ...any)) ([]Recipient, []int) {
	r := csv.NewReader(bytes.NewReader(bytes.TrimPrefix(body, []byte("\xef\xbb\xbf"))))
	r.FieldsPerRecord = 0
	r.ReuseRecord = true
	header, err := r.Read()
	if err != nil {
		add("line 1", "must be the header row account,to[,ref][,var.<name>...]: %v", err)
		return nil, nil
	}
	cols := append([]string(nil), header...)
	if len(cols) < 2 || strings.TrimSpace(cols[0]) != "account" || strings.TrimSpace(cols[1]) != "to" {
		add("line 1", "the header row must begin with account,to")
		return nil, nil
	}
	refCol := -1
	vars := map[int]string{}
	seen := map[string]bool{}
	for i := 2; i < len(cols); i++ {
		c := strings.TrimSpace(cols[i])
		switch {
		case seen[c]:
			add("line 1", "column %q appears twice", c)
		case c == "ref":
			refCol = i
		case strings.HasPrefix(c, "var.") && len(c) > len("var."):
			vars[i] = strings.TrimPrefix(c, "var.")
		default:
			add("line 1", "column %q is not ref or var.<name>", c)
		}
		seen[c] = true
	}
	var (
		out   []Recipient
		lines []int
	)
	for {
		rec, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			// No FieldPos here: after an error the record may have no
			// field, and FieldPos panics then.
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				add("line "+strconv.Itoa(pe.Line), "%v", pe.Err)
				if errors.Is(pe.Err, csv.ErrFieldCount) {
					continue
				}
				return nil, nil
			}
			add("(body)", "%v", err)
			return nil, nil
		}
		line, _ := r.FieldPos(0)
		if len(rec) != len(cols) {
			add("line "+strconv.Itoa(line), "has %d fields, the header %d", len(rec), len(cols))
			continue
		}
		rc := Recipient{Account: rec[0], To: rec[1]}
		if refCol >= 0 {
			rc.Ref = rec[refCol]
		}
		if len(vars) > 0 {
			rc.Vars = make(map[string]string, len(vars))
			for i, name := range vars {
				rc.Vars[name] = rec[i]
			}
		}
		out = append(out, rc)
		lines = append(lines, line)
	}
	return out, lines
}

// encodeRecipient appends rc in the stored part encoding: one line of
// tab-separated JSON values — account, to, ref, vars — so the planner can
// read account and to of every recipient without decoding the rest.
func encodeRecipient(dst []byte, rc Recipient) []byte {
	dst = appendJSONString(dst, rc.Account)
	dst = append(dst, '\t')
	dst = appendJSONString(dst, rc.To)
	dst = append(dst, '\t')
	dst = appendJSONString(dst, rc.Ref)
	dst = append(dst, '\t')
	if len(rc.Vars) > 0 {
		b, _ := json.Marshal(rc.Vars) // strings only: cannot fail
		dst = append(dst, b...)
	}
	return append(dst, '\n')
}

// appendJSONString is json.Marshal's encoding of s (the stored encoding of
// parts already stored), without its reflection for plain strings.
func appendJSONString(dst []byte, s string) []byte {
	return jsonshape.AppendString(dst, s)
}

// appendStored appends a split line in the stored encoding.
func appendStored(dst []byte, l storedLine) []byte {
	dst = append(dst, l.account...)
	dst = append(dst, '\t')
	dst = append(dst, l.to...)
	dst = append(dst, '\t')
	dst = append(dst, l.ref...)
	dst = append(dst, '\t')
	dst = append(dst, l.vars...)
	return append(dst, '\n')
}

// storedLine is one recipient of a stored part, split but not decoded.
type storedLine struct {
	account, to, ref, vars []byte
}

// splitStored splits one line of the stored encoding.
func splitStored(line []byte) (storedLine, error) {
	var f [4][]byte
	for i := 0; i < 3; i++ {
		j := bytes.IndexByte(line, '\t')
		if j < 0 {
			return storedLine{}, fmt.Errorf("stored recipient %q has %d fields", line, i+1)
		}
		f[i], line = line[:j], line[j+1:]
	}
	f[3] = line
	return storedLine{account: f[0], to: f[1], ref: f[2], vars: f[3]}, nil
}

// jsonString decodes a JSON string, without allocating for the common
// case of no escapes when dst has room.
func jsonString(b []byte) (string, error) {
	if len(b) >= 2 && b[0] == '"' && b[len(b)-1] == '"' && bytes.IndexByte(b, '\\') < 0 {
		return string(b[1 : len(b)-1]), nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return "", fmt.Errorf("stored string %q: %w", b, err)
	}
	return s, nil
}

// decodeStored decodes a stored line fully.
func decodeStored(l storedLine) (Recipient, error) {
	var rc Recipient
	var err error
	if rc.Account, err = jsonString(l.account); err != nil {
		return rc, err
	}
	if rc.To, err = jsonString(l.to); err != nil {
		return rc, err
	}
	if rc.Ref, err = jsonString(l.ref); err != nil {
		return rc, err
	}
	if len(l.vars) > 0 {
		if err := json.Unmarshal(l.vars, &rc.Vars); err != nil {
			return rc, fmt.Errorf("stored vars %q: %w", l.vars, err)
		}
	}
	return rc, nil
}

// eachStored calls fn for every line of a stored part.
func eachStored(data []byte, fn func(storedLine) error) error {
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			i = len(data)
		}
		line := data[:i]
		data = data[min(i+1, len(data)):]
		if len(line) == 0 {
			continue
		}
		l, err := splitStored(line)
		if err != nil {
			return err
		}
		if err := fn(l); err != nil {
			return err
		}
	}
	return nil
}
