package mockprovider

import (
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
