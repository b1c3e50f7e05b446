package mockprovider

import (
	"encoding/json"
	"encoding/xml"
	"io"
	"net/http"
	"slices"
	"strings"
)

// The wechat-mp protocol: WeChat Official Account template messages, as
// WeChat documents them (developers.weixin.qq.com, "模板消息" and
// "获取 Access token").
//
//   - GET /cgi-bin/token?grant_type=client_credential&appid=ID&secret=S →
//     {"access_token": "...", "expires_in": 7200}; an app whose behaviour
//     (the account named by the appid alone) sets a token takes only that
//     secret; a wrong one answers 40001 (40002 for another grant_type).
//   - POST /cgi-bin/message/template/send?access_token=T with {"touser":
//     "<openid>", "template_id": "...", "data": {"content": {"value":
//     "..."}}}: one OpenID per call. The account is "<appid>:<template_id>".
//     Token errors as for wecom-app (41001, 40014, 42001). Over the
//     account's rate: 45009 (WeChat's daily quota answer). An invalid
//     OpenID: 40003; the text is data.content.value (47003 when absent).
//     Answer {"errcode": 0, "errmsg": "ok", "msgid": 200228332} (a number).
//     A delivered message's TEMPLATESENDJOBFINISH event (Status
//     "success", FromUserName the OpenID) is POSTed to the callback URL of
//     the app as the mass sends' are (Config.WechatCallbackURL), unless
//     the app's behaviour loses them (lose_template_callbacks). A send to
//     one of the app's template_blocked_openids is answered with a msgid,
//     not delivered, and its event says "failed:user block".

// WechatTemplateMessage is the body of cgi-bin/message/template/send.
type WechatTemplateMessage struct {
	ToUser     string                       `json:"touser"`
	TemplateID string                       `json:"template_id"`
	URL        string                       `json:"url,omitempty"`
	Data       map[string]map[string]string `json:"data"`
}

func (m *Mock) handleWechatToken(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if q.Get("grant_type") != "client_credential" {
		writeJSON(w, http.StatusOK, apiError{40002, "invalid grant_type"})
		return
	}
	app, secret := q.Get("appid"), q.Get("secret")
	if app == "" || secret == "" {
		writeJSON(w, http.StatusOK, apiError{CodeInvalidSecret, "invalid credential: appid and secret are required"})
		return
	}
	if want := m.account(app).behaviour.Load().Token; want != "" && secret != want {
		writeJSON(w, http.StatusOK, apiError{CodeInvalidSecret, "invalid credential, access_token is invalid or not latest"})
		return
	}
	tok := m.issueToken(app, m.cfg.Clock.Now())
	writeJSON(w, http.StatusOK, map[string]any{"access_token": tok, "expires_in": int(accessTokenTTL.Seconds())})
}

func (m *Mock) handleWechatTemplateSend(w http.ResponseWriter, r *http.Request) {
	app, code := m.checkToken(r.URL.Query().Get("access_token"))
	if code != CodeOK {
		writeJSON(w, http.StatusOK, apiError{code, errmsg(code)})
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	var msg WechatTemplateMessage
	if err != nil || json.Unmarshal(body, &msg) != nil {
		writeJSON(w, http.StatusOK, apiError{CodeDataFormat, errmsg(CodeDataFormat)})
		return
	}
	content := msg.Data["content"]["value"]
	switch {
	case msg.ToUser == "" || strings.Contains(msg.ToUser, ","):
		writeJSON(w, http.StatusOK, apiError{CodeInvalidRecipient, "invalid openid"})
		return
	case msg.TemplateID == "":
		writeJSON(w, http.StatusOK, apiError{40037, "invalid template_id"})
		return
	case content == "":
		writeJSON(w, http.StatusOK, apiError{47003, "argument invalid! data.content.value empty"})
		return
	}
	if b := m.account(app).behaviour.Load(); slices.Contains(b.TemplateBlockedOpenIDs, msg.ToUser) {
		// Accepted, never delivered: the event tells.
		id := m.numericMsgID()
		m.postTemplateEvent(app, msg.ToUser, id, "failed:user block")
		writeJSON(w, http.StatusOK, map[string]any{"errcode": 0, "errmsg": "ok", "msgid": id})
		return
	}
	res, err := m.send(r.Context(), sendCall{guid: app + ":" + msg.TemplateID, toIDs: []string{msg.ToUser}, keys: []string{""},
		content: content, wholeCallRate: true})
	if err != nil {
		return
	}
	if res.hold {
		m.holdAnswer(r)
	}
	if res.gateway != 0 {
		writeGatewayError(w, res.gateway)
		return
	}
	code = res.callCode
	if code == CodeOK {
		code = res.outcomes[0].code
	}
	if code == CodeRecipientInvalid {
		code = CodeInvalidRecipient // WeChat's invalid openid
	}
	if code != CodeOK {
		writeJSON(w, http.StatusOK, apiError{code, errmsg(code)})
		return
	}
	id := m.numericMsgID()
	m.postTemplateEvent(app, msg.ToUser, id, "success")
	writeJSON(w, http.StatusOK, map[string]any{"errcode": 0, "errmsg": "ok", "msgid": id})
}

// postTemplateEvent posts a template message's TEMPLATESENDJOBFINISH,
// unless the app loses its events.
func (m *Mock) postTemplateEvent(app, openID string, id int64, status string) {
	if m.account(app).behaviour.Load().LoseTemplateCallbacks {
		return
	}
	body, _ := xml.Marshal(templateEventXML{ToUserName: app, FromUserName: openID, CreateTime: m.cfg.Clock.Now().Unix(),
		MsgType: "event", Event: "TEMPLATESENDJOBFINISH", MsgID: id, Status: status})
	m.postWechatEvent(app, id, body, &m.templateEvents)
}

// templateEventXML is WeChat's TEMPLATESENDJOBFINISH event.
type templateEventXML struct {
	XMLName      xml.Name `xml:"xml"`
	ToUserName   string   `xml:"ToUserName"`
	FromUserName string   `xml:"FromUserName"`
	CreateTime   int64    `xml:"CreateTime"`
	MsgType      string   `xml:"MsgType"`
	Event        string   `xml:"Event"`
	MsgID        int64    `xml:"MsgID"`
	Status       string   `xml:"Status"`
}

// numericMsgID is a message id as WeChat gives it: a number.
func (m *Mock) numericMsgID() int64 {
	return 200_000_000 + int64(m.msgSeq.Add(1))
}
