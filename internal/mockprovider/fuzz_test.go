package mockprovider

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
)

func FuzzSendText(f *testing.F) {
	for _, seed := range []string{
		`{"guid":"a","toId":"u","content":"x"}`,
		`{"guid":"a","toId":"u","content":"\u00e9\ud83d\ude00"}`,
		`{"guid":"","toId":"u","content":"x"}`,
		`{"guid":"a","toIds":["u"],"content":"x","keys":["k"]}`,
		`{"guid":1}`, `[]`, `null`, `{`, ``, `{"guid":"a","toId":"u","content":"x"}trailing`,
	} {
		f.Add(seed, "key-1", false)
		f.Add(seed, "", true)
	}
	m, err := New(Config{LogPath: filepath.Join(f.TempDir(), "fuzz.jsonl"), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = m.Close() })
	h := m.Handler()

	f.Fuzz(func(t *testing.T, body, key string, multi bool) {
		path := "/message/sendText"
		if multi {
			path = "/message/send"
		}
		req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader([]byte(body)))
		req.Header.Set("Idempotency-Key", key)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)

		if rec.Code != http.StatusOK && rec.Code != http.StatusBadRequest {
			t.Fatalf("HTTP %d for %q", rec.Code, body)
		}
		var out struct {
			Errcode *int   `json:"errcode"`
			Errmsg  string `json:"errmsg"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Errcode == nil || out.Errmsg == "" {
			t.Fatalf("answer %q to %q is not a JSON errcode/errmsg object (%v)", rec.Body.String(), body, err)
		}
		if (rec.Code == http.StatusBadRequest) == (*out.Errcode == 0) {
			t.Fatalf("HTTP %d with errcode %d", rec.Code, *out.Errcode)
		}
	})
}

// BenchmarkSendText measures single-recipient sends over loopback HTTP with
// keep-alive, from several concurrent clients, with the delivery log on
// disk. The req/s metric is the number that matters.
func BenchmarkSendText(b *testing.B) {
	m, err := New(Config{LogPath: filepath.Join(b.TempDir(), "bench.jsonl"), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	defer m.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256}}
	url := srv.URL + "/message/sendText"
	var seq atomic.Int64

	b.SetParallelism(8) // 8 × GOMAXPROCS concurrent clients
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			n := seq.Add(1)
			acct := "acct-" + strconv.FormatInt(n%8, 10)
			body := `{"guid":"` + acct + `","toId":"user-` + strconv.FormatInt(n, 10) + `","content":"hello"}`
			req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader([]byte(body)))
			req.Header.Set("Idempotency-Key", "bench-"+strconv.FormatInt(n, 10))
			resp, err := client.Do(req)
			if err != nil {
				b.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Errorf("HTTP %d", resp.StatusCode)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
}
