package wecomapi

import (
	"encoding/json"
	"reflect"
	"testing"
)

// answerBodies are answers of the expected shape (readAnswer reads them)
// and of others (json.Unmarshal does).
var answerBodies = []struct {
	body string
	fast bool
}{
	{`{"errcode":0,"errmsg":"ok","msgid":"m-1"}`, true},
	{`{"errcode":0,"errmsg":"ok","results":[{"toId":"u1","errcode":0,"errmsg":"ok","msgid":"m1"},{"toId":"u2","errcode":81013,"errmsg":"invalid","msgid":""}],"invalid":["u3"]}`, true},
	{` {"errcode": -1, "errmsg": "系统繁忙", "results": [], "invalid": []} `, true},
	{`{"errcode":0,"status":"delivered"}`, true},
	{`{"errcode":42001,"errmsg":"token expired"}`, true},
	{`{"ERRCODE":45009}`, false},
	{`{"errcode":null,"errmsg":"x"}`, false},
	{`{"errcode":1.5}`, false},
	{`{"errcode":1e3}`, false},
	{`{"errcode":99999999999999999999}`, false},
	{`{"errcode":"0"}`, false},
	{`{"errcode":0,"errcode":45009}`, false},
	{`{"errmsg":"a\nb\u00e9"}`, false},
	{"{\"errmsg\":\"bad\xff\"}", false},
	{`{"errcode":0,"other":{"a":[1,2]}}`, false},
	{`{"errcode":0,"results":[{"toId":"u1","extra":true}]}`, false},
	{`{"errcode":0,"results":"x"}`, false},
	{`{"errcode":0} trailing`, false},
	{`[1,2]`, false},
	{`<html>502</html>`, false},
	{``, false},
}

// TestDecodeAnswerIsJSONUnmarshal: an answer decodes to what
// json.Unmarshal makes of it, with its error, and answers of the shape the
// provider sends take the reader without reflection.
func TestDecodeAnswerIsJSONUnmarshal(t *testing.T) {
	for _, c := range answerBodies {
		checkDecodeAnswer(t, []byte(c.body))
		var a answer
		if got := readAnswer([]byte(c.body), &a); got != c.fast {
			t.Errorf("readAnswer(%s) = %v, want %v", c.body, got, c.fast)
		}
	}
}

// FuzzDecodeAnswer: whatever the body, decodeAnswer agrees with
// json.Unmarshal.
func FuzzDecodeAnswer(f *testing.F) {
	for _, c := range answerBodies {
		f.Add([]byte(c.body))
	}
	f.Fuzz(func(t *testing.T, body []byte) { checkDecodeAnswer(t, body) })
}

func checkDecodeAnswer(t *testing.T, body []byte) {
	t.Helper()
	var got, want answer
	gotErr, wantErr := decodeAnswer(body, &got), json.Unmarshal(body, &want)
	if !reflect.DeepEqual(got, want) || (gotErr == nil) != (wantErr == nil) || gotErr != nil && gotErr.Error() != wantErr.Error() {
		t.Errorf("decodeAnswer(%q) = %+v, %v; json.Unmarshal: %+v, %v", body, got, gotErr, want, wantErr)
	}
}
