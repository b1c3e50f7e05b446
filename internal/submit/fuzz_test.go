package submit_test

import (
	"testing"

	"github.com/qunfa/qunfa/internal/submit"
)

// FuzzParsePart feeds arbitrary part bodies of each media type to the
// part parsers: they never panic, and a part without errors has one line
// number per recipient (NDJSON, CSV), each within the body.
func FuzzParsePart(f *testing.F) {
	for _, s := range []struct {
		media uint8
		body  string
	}{
		{0, `{"recipients": [{"account": "acct-a", "to": "u1", "vars": {"n": "Li"}}]}`},
		{0, `{"recipients": [{"account": "acct-a", "to": "u1"}]} {}`},
		{1, "{\"account\": \"acct-a\", \"to\": \"u1\"}\n\n{\"account\": \"acct-b\", \"to\": \"u2\", \"ref\": \"r\"}\n"},
		{1, "{\"account\": \"acct-a\"\n{"},
		{2, "account,to,var.name\nacct-a,u1,Li\nacct-a,\"u,2\",\"He \"\"x\"\"\"\n"},
		{2, "account,to\r\nacct-a,u1\r\n"},
		{2, "to,account,var.\nu,a\n"},
		{2, "\xef\xbb\xbfaccount,to\nacct-a,u1,extra\n"},
		{3, "anything"},
	} {
		f.Add(s.media, []byte(s.body))
	}
	media := []string{submit.MediaJSON, submit.MediaNDJSON, submit.MediaCSV, "text/plain"}
	f.Fuzz(func(t *testing.T, m uint8, body []byte) {
		mt := media[int(m)%len(media)]
		out, lines, errs := submit.ParsePart(mt, body)
		if len(errs) > 0 {
			if out != nil {
				t.Fatalf("%s: recipients kept with errors %v", mt, errs)
			}
			return
		}
		if mt == submit.MediaJSON {
			return
		}
		if len(lines) != len(out) {
			t.Fatalf("%s: %d recipients, %d line numbers", mt, len(out), len(lines))
		}
		prev := 0
		for _, l := range lines {
			if l <= prev || l > len(body)+1 {
				t.Fatalf("%s: line numbers %v out of order or past the body", mt, lines)
			}
			prev = l
		}
	})
}
