package mockprovider

import (
	"encoding/json"
	"io"
	"net/http"
)

// The http protocol: a small SMS gateway for the generic http provider.
//
//	POST /sms/send {"account": "<guid>", "to": "...", "content": "...", "key": "..."}
//	Authorization: Bearer <token> (checked when the account sets a token)
//
// answers 200 {"id": "<message id>"} when delivered, and otherwise an
// HTTP status with {"error": "..."}: 429 over the account's rate, 400 for
// an invalid recipient or a malformed body, 401 when the account is down
// or the token is wrong, and an injected errcode that is an HTTP status
// (errors: [{"errcode": 503, "ratio": 1}]) as that status (others as
// 500). Timeouts, latency and gateway errors work as for every protocol.
// The key is logged: a gateway that de-duplicates on it could use it; this
// one does not.

// SMSRequest is the body of POST /sms/send.
type SMSRequest struct {
	Account string `json:"account"`
	To      string `json:"to"`
	Content string `json:"content"`
	Key     string `json:"key"`
}

func smsError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}

func (m *Mock) handleSMSSend(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		smsError(w, http.StatusBadRequest, "body unreadable or too large")
		return
	}
	var req SMSRequest
	if err := json.Unmarshal(body, &req); err != nil {
		smsError(w, http.StatusBadRequest, "body is not a JSON object")
		return
	}
	if req.Account == "" || req.To == "" || req.Content == "" {
		smsError(w, http.StatusBadRequest, "account, to and content are required")
		return
	}
	res, err := m.send(r.Context(), sendCall{guid: req.Account, toIDs: []string{req.To}, keys: []string{req.Key},
		content: req.Content, token: bearer(r)})
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
	code := res.callCode
	if code == CodeOK {
		code = res.outcomes[0].code
	}
	switch {
	case code == CodeOK:
		writeJSON(w, http.StatusOK, map[string]string{"id": res.outcomes[0].msgid})
	case code == CodeFrequencyLimit || code == CodeConcurrencyLimit:
		smsError(w, http.StatusTooManyRequests, "rate limited")
	case code == CodeRecipientInvalid || code == CodeInvalidRecipient:
		smsError(w, http.StatusBadRequest, "invalid recipient")
	case code == CodeTokenExpired || code == CodeInvalidToken:
		smsError(w, http.StatusUnauthorized, "unauthorized")
	case code >= 100 && code <= 599:
		smsError(w, code, "injected")
	default:
		smsError(w, http.StatusInternalServerError, errmsg(code))
	}
}
