package mockprovider

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/qunfa/qunfa/internal/provider/wxcrypt"
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
	if res.callCode == CodeOK {
		m.postMassEvent(id, job)
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

// postMassEvent delivers a finished mass send's MASSSENDJOBFINISH event.
func (m *Mock) postMassEvent(id int64, job massJob) {
	if m.account(job.app).behaviour.Load().LoseMassCallbacks {
		return
	}
	status := "send success"
	if job.sent == 0 {
		status = "send fail"
	}
	body, _ := xml.Marshal(massEventXML{ToUserName: job.app, FromUserName: "mphelper", CreateTime: m.cfg.Clock.Now().Unix(),
		MsgType: "event", Event: "MASSSENDJOBFINISH", MsgID: id, Status: status, TotalCount: job.sent + job.errorCount,
		FilterCount: job.sent + job.errorCount, SentCount: job.sent, ErrorCount: job.errorCount})
	m.postWechatEvent(job.app, id, body, &m.massEvents)
}

// postWechatEvent delivers an app's event to the callback URL as WeChat
// does: XML, signed in the query (encrypted in safe mode), WechatCallbackDelay
// after the send, retried up to 3 times until answered 200; delivered
// counts the answered ones.
func (m *Mock) postWechatEvent(app string, id int64, body []byte, delivered *atomic.Int64) {
	if m.cfg.WechatCallbackURL == "" {
		return
	}
	var crypt *wxcrypt.Crypt
	if m.cfg.WechatCallbackAESKey != "" {
		var err error
		if crypt, err = wxcrypt.New(m.cfg.WechatCallbackToken, m.cfg.WechatCallbackAESKey, app); err != nil {
			m.cfg.Logger.Error("mock wechat callback secrets are invalid", slog.Any("err", err))
			return
		}
	}
	m.callbacks.Add(1)
	go func() {
		defer m.callbacks.Done()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			select {
			case <-m.closing:
				cancel()
			case <-ctx.Done():
			}
		}()
		delay := m.cfg.WechatCallbackDelay
		if delay <= 0 {
			delay = time.Second
		}
		target := strings.ReplaceAll(m.cfg.WechatCallbackURL, "{appid}", url.PathEscape(app))
		for range 3 {
			if m.wait(ctx, delay) != nil {
				return
			}
			ts, nonce := strconv.FormatInt(m.cfg.Clock.Now().Unix(), 10), strconv.FormatUint(m.msgSeq.Add(1), 10)
			q := url.Values{"timestamp": {ts}, "nonce": {nonce}, "signature": {wechatSignature(m.cfg.WechatCallbackToken, ts, nonce)}}
			post := body
			if crypt != nil {
				var random [16]byte
				_, _ = rand.Read(random[:])
				enc, err := crypt.Encrypt(body, random)
				if err != nil {
					m.cfg.Logger.Error("mock wechat callback not encrypted", slog.Any("err", err))
					return
				}
				q.Set("encrypt_type", "aes")
				q.Set("msg_signature", crypt.Sign(ts, nonce, enc))
				post, _ = xml.Marshal(wxcrypt.Envelope{ToUserName: app, Encrypt: enc})
			}
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, target+"?"+q.Encode(), bytes.NewReader(post))
			if err != nil {
				m.cfg.Logger.Error("mock wechat callback URL is invalid", slog.Any("err", err))
				return
			}
			req.Header.Set("Content-Type", "text/xml")
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					delivered.Add(1)
					return
				}
				err = fmt.Errorf("answered %d", resp.StatusCode)
			}
			m.cfg.Logger.Warn("mock wechat callback failed; retrying", slog.Int64("msg_id", id), slog.Any("err", err))
		}
	}()
}

// MassEventsDelivered counts the MASSSENDJOBFINISH events answered 200.
func (m *Mock) MassEventsDelivered() int64 { return m.massEvents.Load() }

// TemplateEventsDelivered counts the TEMPLATESENDJOBFINISH events
// answered 200.
func (m *Mock) TemplateEventsDelivered() int64 { return m.templateEvents.Load() }

// massEventXML is WeChat's MASSSENDJOBFINISH event.
type massEventXML struct {
	XMLName      xml.Name `xml:"xml"`
	ToUserName   string   `xml:"ToUserName"`
	FromUserName string   `xml:"FromUserName"`
	CreateTime   int64    `xml:"CreateTime"`
	MsgType      string   `xml:"MsgType"`
	Event        string   `xml:"Event"`
	MsgID        int64    `xml:"MsgID"`
	Status       string   `xml:"Status"`
	TotalCount   int      `xml:"TotalCount"`
	FilterCount  int      `xml:"FilterCount"`
	SentCount    int      `xml:"SentCount"`
	ErrorCount   int      `xml:"ErrorCount"`
}

// wechatSignature is WeChat's callback signature: the hex SHA-1 of the
// token, timestamp and nonce, sorted and joined.
func wechatSignature(token, timestamp, nonce string) string {
	parts := []string{token, timestamp, nonce}
	sort.Strings(parts)
	sum := sha1.Sum([]byte(strings.Join(parts, "")))
	return hex.EncodeToString(sum[:])
}
