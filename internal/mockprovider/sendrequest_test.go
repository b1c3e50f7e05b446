package mockprovider

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
)

// sendBodies are /message/send bodies of the shape qunfa sends (read
// without reflection) and of others (json.Unmarshal reads them).
var sendBodies = []struct {
	body string
	fast bool
}{
	{`{"guid":"big-01","toIds":["u1","u2"],"content":"Service notice","keys":["j:1","j:2"]}`, true},
	{`{"guid":"a","toIds":[],"content":"群发"}`, true},
	{`{"guid":"a","toIds":["u1"],"content":"line\nbreak"}`, false},
	{`{"guid":"a","toIds":null,"content":"x"}`, false},
	{`{"GUID":"a","toIds":["u1"],"content":"x"}`, false},
	{`{"guid":"a","toIds":["u1"],"toIds":["u2"],"content":"x"}`, false},
	{`{"guid":"a","toIds":[1],"content":"x"}`, false},
	{`{"guid":"a"} {}`, false},
	{`[]`, false},
}

// TestSendRequestReadsAsJSONUnmarshal: a /message/send body decodes to
// what json.Unmarshal makes of it; bodies of qunfa's shape skip it.
func TestSendRequestReadsAsJSONUnmarshal(t *testing.T) {
	for _, c := range sendBodies {
		checkSendRequest(t, []byte(c.body))
		var req sendMultiRequest
		if got := req.read([]byte(c.body)); got != c.fast {
			t.Errorf("read(%s) = %v, want %v", c.body, got, c.fast)
		}
	}
}

// FuzzSendRequest: whatever the body, the fast reader agrees with
// json.Unmarshal when it reads it.
func FuzzSendRequest(f *testing.F) {
	for _, c := range sendBodies {
		f.Add([]byte(c.body))
	}
	f.Fuzz(func(t *testing.T, body []byte) { checkSendRequest(t, body) })
}

func checkSendRequest(t *testing.T, body []byte) {
	t.Helper()
	var fast, want sendMultiRequest
	if !fast.read(body) {
		return
	}
	if err := json.Unmarshal(body, &want); err != nil || !reflect.DeepEqual(fast, want) {
		t.Errorf("read(%q) = %+v; json.Unmarshal: %+v, %v", body, fast, want, err)
	}
}

// BenchmarkSendRequest decodes a /message/send body of 100 recipients, as
// the mock does now and as json.Unmarshal did.
func BenchmarkSendRequest(b *testing.B) {
	req := sendMultiRequest{GUID: "big-07", Content: "Service notice: maintenance tonight from 01:00 to 03:00."}
	for i := range 100 {
		req.ToIDs = append(req.ToIDs, fmt.Sprintf("user-%07d", i))
		req.Keys = append(req.Keys, fmt.Sprintf("job-0123456789abcdef:%d", i))
	}
	body, err := json.Marshal(req)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("read", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var r sendMultiRequest
			if !r.read(body) {
				b.Fatal("not read")
			}
		}
	})
	b.Run("json.Unmarshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var r sendMultiRequest
			if err := json.Unmarshal(body, &r); err != nil {
				b.Fatal(err)
			}
		}
	})
}
