package mockprovider_test

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"

	"github.com/qunfa/qunfa/internal/mockprovider"
)

// A mock with a rate of 1 message per second accepts its burst of one, then
// answers 45009; the delivery log holds the accepted message only.
func ExampleNew() {
	dir, _ := os.MkdirTemp("", "mock")
	defer os.RemoveAll(dir)
	logPath := filepath.Join(dir, "deliveries.jsonl")

	m, err := mockprovider.New(mockprovider.Config{LogPath: logPath, Rate: 1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		fmt.Println(err)
		return
	}
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	defer m.Close()

	for _, key := range []string{"job1-1", "job1-2"} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/message/sendText",
			strings.NewReader(`{"guid":"acct-a","toId":"user-1","content":"hi"}`))
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(key, strings.Contains(string(body), `"errcode":0`), strings.Contains(string(body), `"errcode":45009`))
	}
	fmt.Println("delivered:", m.Delivered("job1-1"), m.Delivered("job1-2"))
	// Output:
	// job1-1 true false
	// job1-2 false true
	// delivered: true false
}
