package mockprovider

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/qunfa/qunfa/internal/jsonshape"
)

// errmsgs are the texts that go with the codes the mock answers.
var errmsgs = map[int]string{
	CodeOK:               "ok",
	CodeSystemBusy:       "system busy",
	CodeInvalidRecipient: "invalid userid",
	CodeInvalidToken:     "invalid access_token",
	CodeInvalidParameter: "invalid parameter",
	CodeInvalidURL:       "invalid url",
	CodeTokenExpired:     "access_token expired",
	CodeEmptyContent:     "empty content",
	CodeFrequencyLimit:   "api freq out of limit",
	CodeConcurrencyLimit: "api concurrent out of limit",
	CodeDataFormat:       "data format error",
	CodeRecipientInvalid: "user unlicensed or not found",
}

func errmsg(code int) string {
	if s, ok := errmsgs[code]; ok {
		return s
	}
	return "injected error " + strconv.Itoa(code)
}

// apiError is the body of every refusal.
type apiError struct {
	Errcode int    `json:"errcode"`
	Errmsg  string `json:"errmsg"`
}

func (m *Mock) routes() *http.ServeMux {
	mux := http.NewServeMux()
	if m.speaks(ProtocolWecomAPI) {
		mux.HandleFunc("POST /message/sendText", m.handleSendText)
		mux.HandleFunc("POST /message/send", m.handleSend)
		mux.HandleFunc("GET /message/status", m.handleStatus)
	}
	if m.speaks(ProtocolWecomApp) {
		mux.HandleFunc("GET /cgi-bin/gettoken", m.handleGetToken)
		mux.HandleFunc("POST /cgi-bin/message/send", m.handleWecomAppSend)
	}
	if m.speaks(ProtocolWechatMP) {
		mux.HandleFunc("GET /cgi-bin/token", m.handleWechatToken)
		mux.HandleFunc("POST /cgi-bin/message/template/send", m.handleWechatTemplateSend)
		mux.HandleFunc("POST /cgi-bin/message/mass/send", m.handleWechatMassSend)
		mux.HandleFunc("POST /cgi-bin/message/mass/get", m.handleWechatMassGet)
		mux.HandleFunc("POST /cgi-bin/message/custom/send", m.handleWechatCustomSend)
	}
	if m.speaks(ProtocolHTTP) {
		mux.HandleFunc("POST /sms/send", m.handleSMSSend)
	}
	mux.HandleFunc("PUT /_mock/accounts/{guid}", m.handlePutAccount)
	mux.HandleFunc("GET /_mock/accounts/{guid}", m.handleGetAccount)
	mux.HandleFunc("GET /_mock/stats", m.handleStats)
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusNotFound, apiError{CodeInvalidURL, errmsg(CodeInvalidURL)})
	})
	return mux
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"errcode":-1,"errmsg":"encode answer"}`)
	}
	writeRaw(w, status, b)
}

func writeRaw(w http.ResponseWriter, status int, b []byte) {
	h := w.Header()
	h["Content-Type"] = []string{"application/json"}
	h["Content-Length"] = []string{strconv.Itoa(len(b))}
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func badRequest(w http.ResponseWriter, code int, detail string) {
	writeJSON(w, http.StatusBadRequest, apiError{code, errmsg(code) + ": " + detail})
}

// readJSON decodes a bounded body into v, answering 400 itself on failure.
func readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	return readJSONWith(w, r, v, nil)
}

// readJSONWith is readJSON trying fast first: a reader of v's expected
// shape (see jsonshape) that answers false at anything else, when
// json.Unmarshal decodes the body instead.
func readJSONWith(w http.ResponseWriter, r *http.Request, v any, fast func(body []byte) bool) bool {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		badRequest(w, CodeDataFormat, "body unreadable or too large")
		return false
	}
	if fast != nil && fast(body) {
		return true
	}
	if err := json.Unmarshal(body, v); err != nil {
		badRequest(w, CodeDataFormat, "body is not a valid JSON object")
		return false
	}
	return true
}

// sendCall is one parsed send request.
type sendCall struct {
	guid    string
	toIDs   []string
	keys    []string // one per toID; "" when absent
	content string
	token   string // the bearer token of the call
	// wholeCallRate: over the account's rate the whole call is refused
	// (45009, nothing delivered), as the WeCom API refuses a call.
	wholeCallRate bool
	// memberLimit applies the account's per-member limit (silent drop).
	memberLimit bool
}

// outcome is what happened to one recipient.
type outcome struct {
	code  int
	msgid string
}

// sendResult is what a send call decided.
type sendResult struct {
	callCode int       // non-zero: the whole call was refused
	outcomes []outcome // one per recipient when callCode is 0
	hold     bool      // withhold the answer
	gateway  int       // non-zero: answer this HTTP status with an HTML body
}

// send runs one call through the account's behaviour (see the package
// doc for the order) and logs what it delivers.
func (m *Mock) send(ctx context.Context, c sendCall) (sendResult, error) {
	if m.closed.Load() {
		return sendResult{callCode: CodeSystemBusy}, nil
	}
	a := m.account(c.guid)
	callNo := a.calls.Add(1)
	b := a.behaviour.Load()
	n := int64(len(c.toIDs))
	latency := time.Duration(int64(b.LatencyMS)+n*int64(b.LatencyPerRecipientMS)) * time.Millisecond
	if err := m.wait(ctx, latency); err != nil {
		return sendResult{}, err
	}
	var gw GatewayError
	if len(b.GatewayErrors) > 0 {
		r, acc := m.draw(), 0.0
		for _, g := range b.GatewayErrors {
			acc += g.Ratio
			if r < acc {
				gw = g
				break
			}
		}
	}
	if gw.Status != 0 {
		a.gatewayErrors.Add(1)
		if !gw.AfterDelivery {
			return sendResult{gateway: gw.Status}, nil
		}
	}
	if b.Down || b.Token != "" && c.token != b.Token {
		a.failed.Add(n)
		return sendResult{callCode: CodeTokenExpired, gateway: gw.Status}, nil
	}
	if len(b.Errors) > 0 {
		r, acc := m.draw(), 0.0
		for _, e := range b.Errors {
			acc += e.Ratio
			if r < acc {
				a.failed.Add(n)
				return sendResult{callCode: e.Errcode, gateway: gw.Status}, nil
			}
		}
	}
	res := sendResult{outcomes: make([]outcome, len(c.toIDs))}
	eligible := len(c.toIDs)
	if b.invalid != nil {
		eligible = 0
		for i, to := range c.toIDs {
			if _, bad := b.invalid[to]; bad {
				res.outcomes[i].code = CodeRecipientInvalid
				a.failed.Add(1)
			} else {
				eligible++
			}
		}
	}
	if c.wholeCallRate && !a.takeAll(b, eligible, m.cfg.Clock.Now()) {
		a.rateLimited.Add(n)
		return sendResult{callCode: CodeFrequencyLimit, gateway: gw.Status}, nil
	}
	granted := eligible
	if !c.wholeCallRate {
		granted = a.take(b, eligible, m.cfg.Clock.Now())
	}
	var deliveries []Delivery
	var now time.Time
	if granted > 0 {
		now = m.cfg.Clock.Now().UTC()
		deliveries = make([]Delivery, 0, granted)
	}
	for i := range res.outcomes {
		o := &res.outcomes[i]
		if o.code != CodeOK {
			continue
		}
		switch {
		case granted > 0 && c.memberLimit && !a.memberAllowed(b, c.toIDs[i], m.cfg.Clock.Now()):
			granted--
			o.msgid = m.nextMsgID()
			a.dropped.Add(1)
		case granted > 0:
			granted--
			o.msgid = m.nextMsgID()
			d := Delivery{TS: now, GUID: c.guid, ToID: c.toIDs[i], Content: c.content, Key: c.keys[i]}
			if latency > 0 {
				// Lines keep the contract's shape unless latency was
				// injected; then they tell the call and its latency.
				d.Call, d.CallRecipients, d.LatencyMS = callNo, len(c.toIDs), latency.Milliseconds()
			}
			deliveries = append(deliveries, d)
		case m.cfg.SilentDrop:
			o.msgid = m.nextMsgID()
			a.dropped.Add(1)
		default:
			o.code = CodeFrequencyLimit
			a.rateLimited.Add(1)
		}
	}
	if err := m.log.append(deliveries); err != nil {
		m.cfg.Logger.Error("mock provider cannot log deliveries",
			slog.String("guid", c.guid), slog.Any("err", err))
		return sendResult{callCode: CodeSystemBusy}, nil
	}
	a.accepted.Add(int64(len(deliveries)))
	if gw.Status != 0 {
		res.gateway = gw.Status // delivered and logged; the gateway answers
		return res, nil
	}
	if b.TimeoutRatio > 0 && m.draw() < b.TimeoutRatio {
		a.timeouts.Add(1)
		res.hold = true
	}
	return res, nil
}

// holdAnswer withholds the answer until the client goes away or the mock
// closes, then aborts the connection so the client never gets a response.
func (m *Mock) holdAnswer(r *http.Request) {
	if m.onHold != nil {
		m.onHold()
	}
	select {
	case <-r.Context().Done():
	case <-m.closing:
	}
	// http.ErrAbortHandler is the net/http way to drop a connection
	// without answering; the server recovers it silently.
	panic(http.ErrAbortHandler)
}

type sendTextRequest struct {
	GUID    string `json:"guid"`
	ToID    string `json:"toId"`
	Content string `json:"content"`
}

func (m *Mock) handleSendText(w http.ResponseWriter, r *http.Request) {
	var req sendTextRequest
	if !readJSON(w, r, &req) {
		return
	}
	switch {
	case req.GUID == "":
		badRequest(w, CodeInvalidParameter, "guid is required")
		return
	case req.ToID == "":
		badRequest(w, CodeInvalidParameter, "toId is required")
		return
	case req.Content == "":
		badRequest(w, CodeEmptyContent, "content is required")
		return
	}
	res, err := m.send(r.Context(), sendCall{
		guid: req.GUID, toIDs: []string{req.ToID}, content: req.Content,
		keys: []string{r.Header.Get("Idempotency-Key")}, token: bearer(r),
	})
	if err != nil {
		return // the client went away during injected latency
	}
	if res.hold {
		m.holdAnswer(r)
	}
	if res.gateway != 0 {
		writeGatewayError(w, res.gateway)
		return
	}
	code := res.callCode
	if code == CodeOK {
		code = res.outcomes[0].code
	}
	if code != CodeOK {
		writeJSON(w, http.StatusOK, apiError{code, errmsg(code)})
		return
	}
	msgid := res.outcomes[0].msgid
	b := make([]byte, 0, 48+len(msgid))
	b = append(b, `{"errcode":0,"errmsg":"ok","msgid":"`...)
	b = append(b, msgid...)
	b = append(b, `"}`...)
	writeRaw(w, http.StatusOK, b)
}

type sendMultiRequest struct {
	GUID    string   `json:"guid"`
	ToIDs   []string `json:"toIds"`
	Content string   `json:"content"`
	Keys    []string `json:"keys"`
}

// read decodes body into req when it has the shape qunfa sends (see
// jsonshape), byte for byte what json.Unmarshal would make of it, and
// reports whether it did; req is left as it was otherwise. Decoding the
// request with json.Unmarshal was a fifth of the mock's CPU at 100
// recipients per call.
func (req *sendMultiRequest) read(body []byte) bool {
	var v sendMultiRequest
	d := jsonshape.NewDecoder(body)
	if !d.Object(func(name []byte) bool {
		switch string(name) {
		case `"guid"`:
			return d.String(&v.GUID)
		case `"toIds"`:
			return v.ToIDs == nil && d.Strings(&v.ToIDs)
		case `"content"`:
			return d.String(&v.Content)
		case `"keys"`:
			return v.Keys == nil && d.Strings(&v.Keys)
		}
		return false
	}) || !d.End() {
		return false
	}
	*req = v
	return true
}

// RecipientResult is one entry of a /message/send answer.
type RecipientResult struct {
	ToID    string `json:"toId"`
	Errcode int    `json:"errcode"`
	Errmsg  string `json:"errmsg"`
	MsgID   string `json:"msgid,omitempty"`
}

// SendAnswer is the body of a /message/send answer whose errcode is 0.
type SendAnswer struct {
	Errcode int               `json:"errcode"`
	Errmsg  string            `json:"errmsg"`
	Results []RecipientResult `json:"results"`
	Invalid []string          `json:"invalid"`
}

func (m *Mock) handleSend(w http.ResponseWriter, r *http.Request) {
	var req sendMultiRequest
	if !readJSONWith(w, r, &req, req.read) {
		return
	}
	switch {
	case req.GUID == "":
		badRequest(w, CodeInvalidParameter, "guid is required")
		return
	case len(req.ToIDs) == 0:
		badRequest(w, CodeInvalidParameter, "toIds must hold at least one recipient")
		return
	case req.Keys != nil && len(req.Keys) != len(req.ToIDs):
		badRequest(w, CodeInvalidParameter, "keys must hold one key per toId")
		return
	case req.Content == "":
		badRequest(w, CodeEmptyContent, "content is required")
		return
	}
	for _, to := range req.ToIDs {
		if to == "" {
			badRequest(w, CodeInvalidParameter, "toIds must not hold an empty id")
			return
		}
	}
	keys := req.Keys
	if keys == nil {
		keys = make([]string, len(req.ToIDs))
	}
	res, err := m.send(r.Context(), sendCall{guid: req.GUID, toIDs: req.ToIDs, keys: keys, content: req.Content, token: bearer(r)})
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
	ans := SendAnswer{Errmsg: errmsg(CodeOK), Results: make([]RecipientResult, len(req.ToIDs)), Invalid: []string{}}
	for i, o := range res.outcomes {
		ans.Results[i] = RecipientResult{ToID: req.ToIDs[i], Errcode: o.code, Errmsg: errmsg(o.code), MsgID: o.msgid}
		if o.code == CodeRecipientInvalid || o.code == CodeInvalidRecipient {
			ans.Invalid = append(ans.Invalid, req.ToIDs[i])
		}
	}
	writeJSON(w, http.StatusOK, ans)
}

// writeGatewayError answers as a gateway in front of the provider does: an
// HTTP status with an HTML page, no wecomapi errcode.
func writeGatewayError(w http.ResponseWriter, status int) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = fmt.Fprintf(w, "<html><head><title>%d %s</title></head><body><center><h1>%d %s</h1></center><hr><center>gateway</center></body></html>\n",
		status, http.StatusText(status), status, http.StatusText(status))
}

// StatusAnswer is the body of a /message/status answer.
type StatusAnswer struct {
	Errcode int    `json:"errcode"`
	Status  string `json:"status"`
}

// bearer is the call's "Authorization: Bearer" token.
func bearer(r *http.Request) string {
	return strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
}

func (m *Mock) handleStatus(w http.ResponseWriter, r *http.Request) {
	key := r.URL.Query().Get("key")
	if key == "" {
		badRequest(w, CodeInvalidParameter, "key is required")
		return
	}
	if guid := r.URL.Query().Get("guid"); guid != "" {
		a := m.account(guid)
		a.statusCalls.Add(1)
		b := a.behaviour.Load()
		if err := m.wait(r.Context(), time.Duration(b.StatusLatencyMS)*time.Millisecond); err != nil {
			return // the client went away
		}
		if !b.lookupEnabled() {
			writeJSON(w, http.StatusNotFound, apiError{CodeInvalidURL, "status look-up not available for this account"})
			return
		}
		if b.StatusDown {
			writeJSON(w, http.StatusServiceUnavailable, apiError{CodeSystemBusy, "status look-up unavailable"})
			return
		}
	}
	status := "unknown"
	if m.log.delivered(key) {
		status = "delivered"
	}
	writeJSON(w, http.StatusOK, StatusAnswer{Status: status})
}

func (m *Mock) handlePutAccount(w http.ResponseWriter, r *http.Request) {
	var p behaviourPatch
	if !readJSON(w, r, &p) {
		return
	}
	guid := r.PathValue("guid")
	a := m.account(guid)
	b := p.apply(a.behaviour.Load().Behaviour)
	if err := b.validate(); err != nil {
		badRequest(w, CodeInvalidParameter, err.Error())
		return
	}
	a.setBehaviour(b, m.cfg.Clock.Now())
	m.cfg.Logger.Info("mock provider account changed", slog.String("guid", guid))
	writeJSON(w, http.StatusOK, b.forJSON())
}

func (m *Mock) handleGetAccount(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, m.Behaviour(r.PathValue("guid")).forJSON())
}

// forJSON shows absent lists as [] rather than null.
func (b Behaviour) forJSON() Behaviour {
	if b.Errors == nil {
		b.Errors = []InjectedError{}
	}
	if b.InvalidToIDs == nil {
		b.InvalidToIDs = []string{}
	}
	return b
}

// StatsAnswer is the body of a /_mock/stats answer.
type StatsAnswer struct {
	Accounts map[string]AccountStats `json:"accounts"`
}

func (m *Mock) handleStats(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, StatsAnswer{Accounts: m.Stats()})
}
