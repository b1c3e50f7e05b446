package mockprovider

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

// TestDeliveryLogLookUpByKey: a persisted log answers look-ups from its
// hash index by reading the line back, so keys whose hashes collide are
// told apart, an undelivered key that shares a hash is not delivered, and
// a reopened log answers the same.
func TestDeliveryLogLookUpByKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "deliveries.jsonl")
	for _, name := range []string{"distinct hashes", "every hash equal"} {
		t.Run(name, func(t *testing.T) {
			l, _, err := openDeliveryLog(path + name)
			if err != nil {
				t.Fatal(err)
			}
			if name == "every hash equal" {
				l.hash = func(string) uint64 { return 7 }
			}
			var keys []string
			for b := range 5 {
				var ds []Delivery
				for i := range 20 {
					k := fmt.Sprintf("job:%d:%d", b, i)
					keys = append(keys, k)
					ds = append(ds, Delivery{TS: time.Unix(0, 0), GUID: "g", ToID: "u", Content: "hi", Key: k})
				}
				ds = append(ds, ds[0]) // a key delivered twice
				if err := l.append(ds); err != nil {
					t.Fatal(err)
				}
			}
			check := func(l *deliveryLog) {
				t.Helper()
				for _, k := range keys {
					if !l.delivered(k) {
						t.Errorf("%s: not delivered", k)
					}
				}
				for _, k := range []string{"job:9:9", "job:0:20", ""} {
					if l.delivered(k) {
						t.Errorf("%q: delivered, never was", k)
					}
				}
			}
			check(l)
			if err := l.close(); err != nil {
				t.Fatal(err)
			}
			l, n, err := openDeliveryLog(path + name)
			if err != nil {
				t.Fatal(err)
			}
			defer l.close()
			if n != 105 {
				t.Errorf("reopened log has %d lines, want 105", n)
			}
			check(l)
		})
	}
}

// deliveryCases are deliveries whose lines must read exactly as
// json.Marshal writes them: plain ones, the latency fields, and strings
// that need escaping (HTML characters, quotes, control characters, invalid
// UTF-8, U+2028) or not (CJK text).
var deliveryCases = []Delivery{
	{TS: time.Date(2026, 12, 2, 1, 2, 3, 456789000, time.UTC), GUID: "acct-1", ToID: "wxid_1", Content: "Service notice", Key: "job:1:0"},
	{TS: time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("CST", 8*3600)), GUID: "a", ToID: "b", Content: "群发通知：今晚维护", Key: "k", Call: 7, CallRecipients: 100, LatencyMS: 250},
	{TS: time.Unix(0, 1).UTC(), GUID: "<a&b>", ToID: "q\"uote\\", Content: "line\nbreak\ttab\x01\u2028\u2029 end", Key: "bad\xffutf8"},
	{Call: 1},
}

// TestDeliveryLineIsJSONMarshal: the log's lines are byte for byte what
// json.Marshal makes of each delivery, the format the contract fixes.
func TestDeliveryLineIsJSONMarshal(t *testing.T) {
	for _, d := range deliveryCases {
		checkDeliveryLine(t, d)
	}
}

// FuzzDeliveryLine: any strings encode as json.Marshal encodes them.
func FuzzDeliveryLine(f *testing.F) {
	for _, d := range deliveryCases {
		f.Add(d.GUID, d.ToID, d.Content, d.Key, d.Call)
	}
	f.Fuzz(func(t *testing.T, guid, to, content, key string, call int64) {
		checkDeliveryLine(t, Delivery{TS: time.Unix(1700000000, 5).UTC(), GUID: guid, ToID: to, Content: content, Key: key, Call: call})
	})
}

func checkDeliveryLine(t *testing.T, d Delivery) {
	t.Helper()
	want, err := json.Marshal(&d)
	if err != nil {
		t.Fatal(err)
	}
	got, err := appendDelivery(nil, &d)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("line of %+v:\n got %s\nwant %s", d, got, want)
	}
}

// BenchmarkDeliveryLine encodes a call's 100 delivery lines, as the log
// does now and as json.Marshal did.
func BenchmarkDeliveryLine(b *testing.B) {
	ds := make([]Delivery, 100)
	for i := range ds {
		ds[i] = Delivery{TS: time.Now().UTC(), GUID: "big-07", ToID: fmt.Sprintf("user-%07d", i), Content: "Service notice: maintenance tonight from 01:00 to 03:00.", Key: fmt.Sprintf("job-0123456789abcdef:%d", i)}
	}
	b.Run("append", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		for b.Loop() {
			buf = buf[:0]
			for i := range ds {
				buf, _ = appendDelivery(buf, &ds[i])
			}
		}
	})
	b.Run("json.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		for b.Loop() {
			buf = buf[:0]
			for i := range ds {
				line, _ := json.Marshal(&ds[i])
				buf = append(buf, line...)
			}
		}
	})
}
