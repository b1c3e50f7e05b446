package submit

import (
	"fmt"
	"testing"
)

// BenchmarkEncodeRecipient stores 1,000 recipients of a part as a staged
// upload does (account, id and ref as JSON strings, no variables).
func BenchmarkEncodeRecipient(b *testing.B) {
	rcs := make([]Recipient, 1000)
	for i := range rcs {
		rcs[i] = Recipient{Account: fmt.Sprintf("big-%02d", i%20), To: fmt.Sprintf("user-%07d", i)}
	}
	b.ReportAllocs()
	var buf []byte
	for b.Loop() {
		buf = buf[:0]
		for _, rc := range rcs {
			buf = encodeRecipient(buf, rc)
		}
	}
}
