package mockprovider

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"sync"
)

// The wechat-mp protocol also speaks Official Account mass send by OpenID
// list and the customer-service message, as WeChat documents them
// ("群发接口和原创校验", "客服消息"):
//
//   - POST /cgi-bin/message/mass/send?access_token=T with {"touser":
//     ["<openid>", ...], "msgtype": "text", "text": {"content": "..."}}:
//     2 to 10,000 OpenIDs (fewer or more: 40130; another msgtype or no
//     content: 47001/47003). The call is refused whole (token errors,
//     injected errcodes, over the account's rate: 45009) or accepted
//     whole: {"errcode": 0, "errmsg": "send job submission success",
//     "msg_id": 34182, "msg_data_id": 206227730}. An invalid OpenID does
//     not fail the call: it is not delivered and counts in the job's
//     ErrorCount. The account is the appid.
//   - POST /cgi-bin/message/mass/get?access_token=T with {"msg_id": N} →
//     {"msg_id": N, "msg_status": "SEND_SUCCESS"} for a job of the app
//     (SEND_FAIL when nothing of it was delivered); an id the app never
//     sent answers errcode 40008.
//   - POST /cgi-bin/message/custom/send?access_token=T with {"touser":
//     "<openid>", "msgtype": "text", "text": {"content": "..."}}: one
//     OpenID, {"errcode": 0, "errmsg": "ok"}; an invalid OpenID: 40003.

// WechatMassMessage is the body of cgi-bin/message/mass/send.
type WechatMassMessage struct {
	ToUser  []string `json:"touser"`
	MsgType string   `json:"msgtype"`
	Text    struct {
		Content string `json:"content"`
	} `json:"text"`
}

// WechatCustomMessage is the body of cgi-bin/message/custom/send.
type WechatCustomMessage struct {
	ToUser  string `json:"touser"`
	MsgType string `json:"msgtype"`
	Text    struct {
		Content string `json:"content"`
	} `json:"text"`
}

// Mass-send limits and codes as WeChat documents them.
const (
	MassMinOpenIDs     = 2
	MassMaxOpenIDs     = 10000
	CodeMassOpenIDs    = 40130 // fewer than 2 or more than 10,000 OpenIDs
	CodeUnknownMassMsg = 40008 // mass/get of an id the app never sent
)

// massJob is one accepted mass send.
type massJob struct {
	app              string
	sent, errorCount int
}

type massJobs struct {
	mu   sync.Mutex
	jobs map[int64]massJob
}

func (j *massJobs) put(id int64, job massJob) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.jobs == nil {
		j.jobs = map[int64]massJob{}
	}
	j.jobs[id] = job
}

func (j *massJobs) get(id int64) (massJob, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	job, ok := j.jobs[id]
	return job, ok
}

func (m *Mock) readWechat(w http.ResponseWriter, r *http.Request, v any) (app string, ok bool) {
	app, code := m.checkToken(r.URL.Query().Get("access_token"))
	if code != CodeOK {
		writeJSON(w, http.StatusOK, apiError{code, errmsg(code)})
		return "", false
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil || json.Unmarshal(body, v) != nil {
		writeJSON(w, http.StatusOK, apiError{CodeDataFormat, errmsg(CodeDataFormat)})
		return "", false
	}
	return app, true
}

// answerRefused writes a refused call's errcode, the gateway status or a
// withheld answer; it reports whether it answered.
func (m *Mock) answerRefused(w http.ResponseWriter, r *http.Request, res sendResult) bool {
	if res.hold {
		m.holdAnswer(r)
	}
	if res.gateway != 0 {
		writeGatewayError(w, res.gateway)
		return true
	}
	if res.callCode != CodeOK {
		writeJSON(w, http.StatusOK, apiError{res.callCode, errmsg(res.callCode)})
		return true
	}
	return false
}

func (m *Mock) handleWechatMassSend(w http.ResponseWriter, r *http.Request) {
	var msg WechatMassMessage
	app, ok := m.readWechat(w, r, &msg)
	if !ok {
		return
	}
	switch {
	case len(msg.ToUser) < MassMinOpenIDs || len(msg.ToUser) > MassMaxOpenIDs:
		writeJSON(w, http.StatusOK, apiError{CodeMassOpenIDs, "openid list size is invalid, must be 2 to 10000"})
		return
	case msg.MsgType != "text":
		writeJSON(w, http.StatusOK, apiError{CodeDataFormat, "invalid msgtype"})
		return
	case msg.Text.Content == "":
		writeJSON(w, http.StatusOK, apiError{47003, "argument invalid! text.content empty"})
		return
	}
	res, err := m.send(r.Context(), sendCall{guid: app, toIDs: msg.ToUser, keys: make([]string, len(msg.ToUser)),
		content: msg.Text.Content, wholeCallRate: true})
	if err != nil {
		return
	}
	job := massJob{app: app}
	for _, o := range res.outcomes {
		if o.code == CodeOK {
			job.sent++
		} else {
			job.errorCount++
		}
	}
	id := m.numericMsgID()
	if res.callCode == CodeOK {
		m.mass.put(id, job)
	}
	if m.answerRefused(w, r, res) {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"errcode": 0, "errmsg": "send job submission success",
		"msg_id": id, "msg_data_id": id + 1_000_000})
}

func (m *Mock) handleWechatMassGet(w http.ResponseWriter, r *http.Request) {
	var q struct {
		MsgID json.Number `json:"msg_id"`
	}
	app, ok := m.readWechat(w, r, &q)
	if !ok {
		return
	}
	id, err := strconv.ParseInt(q.MsgID.String(), 10, 64)
	job, found := m.mass.get(id)
	if err != nil || !found || job.app != app {
		writeJSON(w, http.StatusOK, apiError{CodeUnknownMassMsg, "invalid message type"})
		return
	}
	status := "SEND_SUCCESS"
	if job.sent == 0 {
		status = "SEND_FAIL"
	}
	writeJSON(w, http.StatusOK, map[string]any{"msg_id": id, "msg_status": status})
}

func (m *Mock) handleWechatCustomSend(w http.ResponseWriter, r *http.Request) {
	var msg WechatCustomMessage
	app, ok := m.readWechat(w, r, &msg)
	if !ok {
		return
	}
	switch {
	case msg.ToUser == "":
		writeJSON(w, http.StatusOK, apiError{CodeInvalidRecipient, "invalid openid"})
		return
	case msg.MsgType != "text" || msg.Text.Content == "":
		writeJSON(w, http.StatusOK, apiError{CodeDataFormat, errmsg(CodeDataFormat)})
		return
	}
	res, err := m.send(r.Context(), sendCall{guid: app, toIDs: []string{msg.ToUser}, keys: []string{""},
		content: msg.Text.Content, wholeCallRate: true})
	if err != nil || m.answerRefused(w, r, res) {
		return
	}
	if res.outcomes[0].code != CodeOK {
		writeJSON(w, http.StatusOK, apiError{CodeInvalidRecipient, "invalid openid"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"errcode": 0, "errmsg": "ok"})
}
