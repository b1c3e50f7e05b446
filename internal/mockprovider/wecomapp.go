package mockprovider

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The wecom-app protocol: WeCom application messages, as WeCom documents
// them (developer.work.weixin.qq.com, "发送应用消息" and "获取access_token").
//
//   - GET /cgi-bin/gettoken?corpid=ID&corpsecret=SECRET →
//     {"errcode": 0, "errmsg": "ok", "access_token": "...", "expires_in": 7200};
//     a corp whose behaviour (the account named by the corpid alone) sets
//     a token takes only that secret, else any non-empty one; a wrong
//     secret answers 40001.
//   - POST /cgi-bin/message/send?access_token=T with {"touser": "u1|u2",
//     "msgtype": "text", "agentid": 1000002, "text": {"content": "..."}}.
//     The account is "<corpid>:<agentid>". Missing token 41001, unknown
//     40014, expired 42001 (every call until the client fetches a new one).
//     At most 1,000 users (40058 beyond), content required (44004).
//     Answer {"errcode": 0, "errmsg": "ok", "invaliduser": "u3",
//     "invalidparty": "", "invalidtag": "", "unlicenseduser": "",
//     "msgid": "...", "response_code": "..."}: invalid users are listed and
//     the others delivered; all invalid answers 81013.
//   - Over the account's rate the whole call answers 45009 and nothing is
//     delivered (the API refuses the call, not single users).
//   - A member over its per-app limit (member_limit_per_min; 30 in
//     WeCom) is silently dropped: the call answers ok, the member gets
//     nothing, and the mock counts it as dropped.
//
// The API takes no message key: the log's key is empty.

// CodeInvalidSecret is WeCom's answer to gettoken with a wrong secret.
const (
	CodeInvalidSecret = 40001
	CodeTokenMissing  = 41001
)

// accessTokenTTL is how long an access token lives (WeCom: 7,200 s).
const accessTokenTTL = 7200 * time.Second

// WecomAppMemberLimitPerMin is WeCom's per-member, per-app limit: a
// member gets at most 30 messages of one app a minute; more are dropped.
const WecomAppMemberLimitPerMin = 30

// accessTokens are the tokens gettoken issued.
type accessTokens struct {
	mu     sync.Mutex
	tokens map[string]issuedToken
}

type issuedToken struct {
	corpID  string
	expires time.Time
}

func (m *Mock) issueToken(corpID string, now time.Time) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	tok := "at-" + hex.EncodeToString(b[:])
	m.tokens.mu.Lock()
	defer m.tokens.mu.Unlock()
	if m.tokens.tokens == nil {
		m.tokens.tokens = map[string]issuedToken{}
	}
	m.tokens.tokens[tok] = issuedToken{corpID: corpID, expires: now.Add(accessTokenTTL)}
	return tok
}

// ExpireAccessTokens ends the life of every access token issued to corpID
// so far: the next call with one answers 42001.
func (m *Mock) ExpireAccessTokens(corpID string) {
	now := m.cfg.Clock.Now()
	m.tokens.mu.Lock()
	defer m.tokens.mu.Unlock()
	for tok, it := range m.tokens.tokens {
		if it.corpID == corpID {
			it.expires = now
			m.tokens.tokens[tok] = it
		}
	}
}

// checkToken returns the corp of a valid token, or the errcode refusing it.
func (m *Mock) checkToken(tok string) (string, int) {
	if tok == "" {
		return "", CodeTokenMissing
	}
	m.tokens.mu.Lock()
	it, ok := m.tokens.tokens[tok]
	m.tokens.mu.Unlock()
	switch {
	case !ok:
		return "", CodeInvalidToken
	case !m.cfg.Clock.Now().Before(it.expires):
		return "", CodeTokenExpired
	}
	return it.corpID, CodeOK
}

func (m *Mock) handleGetToken(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	corp, secret := q.Get("corpid"), q.Get("corpsecret")
	if corp == "" || secret == "" {
		writeJSON(w, http.StatusOK, apiError{CodeInvalidSecret, "invalid credential: corpid and corpsecret are required"})
		return
	}
	if want := m.account(corp).behaviour.Load().Token; want != "" && secret != want {
		writeJSON(w, http.StatusOK, apiError{CodeInvalidSecret, "invalid credential"})
		return
	}
	tok := m.issueToken(corp, m.cfg.Clock.Now())
	writeJSON(w, http.StatusOK, map[string]any{"errcode": 0, "errmsg": "ok", "access_token": tok, "expires_in": int(accessTokenTTL.Seconds())})
}

// WecomAppMessage is the body of cgi-bin/message/send (text messages).
type WecomAppMessage struct {
	ToUser  string `json:"touser"`
	ToParty string `json:"toparty,omitempty"`
	ToTag   string `json:"totag,omitempty"`
	MsgType string `json:"msgtype"`
	AgentID int64  `json:"agentid"`
	Text    struct {
		Content string `json:"content"`
	} `json:"text"`
	Safe int `json:"safe,omitempty"`
}

// WecomAppAnswer is the answer of cgi-bin/message/send.
type WecomAppAnswer struct {
	Errcode        int    `json:"errcode"`
	Errmsg         string `json:"errmsg"`
	InvalidUser    string `json:"invaliduser"`
	InvalidParty   string `json:"invalidparty"`
	InvalidTag     string `json:"invalidtag"`
	UnlicensedUser string `json:"unlicenseduser"`
	MsgID          string `json:"msgid,omitempty"`
	ResponseCode   string `json:"response_code,omitempty"`
}

// maxWecomAppUsers is how many users one call may name.
const maxWecomAppUsers = 1000

func (m *Mock) handleWecomAppSend(w http.ResponseWriter, r *http.Request) {
	corp, code := m.checkToken(r.URL.Query().Get("access_token"))
	if code != CodeOK {
		writeJSON(w, http.StatusOK, apiError{code, errmsg(code)})
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		writeJSON(w, http.StatusOK, apiError{CodeDataFormat, errmsg(CodeDataFormat)})
		return
	}
	var msg WecomAppMessage
	if err := json.Unmarshal(body, &msg); err != nil {
		writeJSON(w, http.StatusOK, apiError{CodeDataFormat, errmsg(CodeDataFormat)})
		return
	}
	var users []string
	if msg.ToUser != "" {
		users = strings.Split(msg.ToUser, "|")
	}
	switch {
	case msg.MsgType != "text":
		writeJSON(w, http.StatusOK, apiError{40008, "invalid message type"})
		return
	case msg.AgentID <= 0:
		writeJSON(w, http.StatusOK, apiError{40056, "invalid agentid"})
		return
	case len(users) == 0:
		writeJSON(w, http.StatusOK, apiError{CodeInvalidParameter, "touser is empty"})
		return
	case len(users) > maxWecomAppUsers:
		writeJSON(w, http.StatusOK, apiError{CodeInvalidParameter, "touser holds more than 1000 users"})
		return
	case msg.Text.Content == "":
		writeJSON(w, http.StatusOK, apiError{CodeEmptyContent, errmsg(CodeEmptyContent)})
		return
	}
	guid := corp + ":" + strconv.FormatInt(msg.AgentID, 10)
	res, err := m.send(r.Context(), sendCall{guid: guid, toIDs: users, keys: make([]string, len(users)),
		content: msg.Text.Content, wholeCallRate: true, memberLimit: true})
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
	if res.callCode != CodeOK {
		writeJSON(w, http.StatusOK, apiError{res.callCode, errmsg(res.callCode)})
		return
	}
	ans := WecomAppAnswer{Errmsg: "ok"}
	var invalid []string
	for i, o := range res.outcomes {
		switch {
		case o.code == CodeRecipientInvalid || o.code == CodeInvalidRecipient:
			invalid = append(invalid, users[i])
		case o.msgid != "" && ans.MsgID == "":
			ans.MsgID = o.msgid
		}
	}
	if len(invalid) == len(users) {
		writeJSON(w, http.StatusOK, apiError{CodeRecipientInvalid, errmsg(CodeRecipientInvalid)})
		return
	}
	ans.InvalidUser = strings.Join(invalid, "|")
	ans.ResponseCode = "rc-" + ans.MsgID
	writeJSON(w, http.StatusOK, ans)
}
