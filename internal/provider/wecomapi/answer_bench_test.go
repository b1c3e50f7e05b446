package wecomapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/qunfa/qunfa/internal/provider"
)

// BenchmarkReadPackedAnswer reads the answer to a /message/send call of 80
// recipients, as the adapter does after each call: the credential check
// and the per-recipient results.
func BenchmarkReadPackedAnswer(b *testing.B) {
	req := provider.SendRequest{Account: "big-01", Content: "hello"}
	var results []result
	for i := range 80 {
		to := fmt.Sprintf("user-%07d", i)
		req.To, req.Keys = append(req.To, to), append(req.Keys, "job:"+to)
		results = append(results, result{ToID: to, Errcode: 0, Errmsg: "ok", MsgID: fmt.Sprintf("m-%d", i)})
	}
	body, err := json.Marshal(map[string]any{"errcode": 0, "errmsg": "ok", "results": results, "invalid": []string{}})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		ex := answered(http.StatusOK, body)
		if authRefused(ex) {
			b.Fatal("refused")
		}
		if res := interpret(req, ex); !res.Recipients[79].Accepted {
			b.Fatalf("%+v", res.Recipients[79])
		}
	}
}
