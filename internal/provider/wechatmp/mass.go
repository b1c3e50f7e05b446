package wechatmp

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/qunfa/qunfa/internal/provider"
	"github.com/qunfa/qunfa/internal/provider/httpcall"
)

var _ provider.Provider = (*Mass)(nil)

// Mass-send limits as WeChat documents them.
const (
	// MassMinOpenIDs is the fewest OpenIDs message/mass/send takes.
	MassMinOpenIDs = 2
	// MassMaxOpenIDs is the most OpenIDs one message/mass/send carries.
	MassMaxOpenIDs = 10000
)

// Mass is the Official Account mass-send adapter (message/mass/send by
// OpenID list); safe for concurrent use. The account is the appid.
//
// A call of 2 to 10,000 OpenIDs is accepted or refused whole: an answer
// {"errcode": 0, "msg_id": N} is every recipient's acceptance with msg_id
// N, awaiting confirmation (provider.RecipientResult.AwaitConfirm) (an invalid OpenID among them is not reported per recipient; WeChat
// counts it in the job's ErrorCount). A call of one OpenID cannot be a
// mass send: it goes out as a customer-service message
// (message/custom/send), which WeChat delivers only to a user who
// interacted with the account within 48 hours (45015 otherwise:
// Permanent) and which carries no msg_id.
//
// Status looks a msg_id up with message/mass/get: SEND_SUCCESS and DELETE
// (sent, then deleted by the account) are delivered; SENDING is an error
// (asked again later); SEND_FAIL and an item without a msg_id cannot be
// told apart from a partial delivery, so they answer
// provider.ErrStatusUnsupported and the item goes to review, never resent.
type Mass struct{ api *api }

// NewMass builds the mass-send adapter.
func NewMass(cfg Config) (*Mass, error) {
	a, err := newAPI(cfg)
	if err != nil {
		return nil, err
	}
	return &Mass{api: a}, nil
}

// Close drops idle connections.
func (m *Mass) Close() error {
	m.api.http.CloseIdleConnections()
	return nil
}

type textBody struct {
	Content string `json:"content"`
}

type massBody struct {
	ToUser  []string `json:"touser"`
	MsgType string   `json:"msgtype"`
	Text    textBody `json:"text"`
}

type customBody struct {
	ToUser  string   `json:"touser"`
	MsgType string   `json:"msgtype"`
	Text    textBody `json:"text"`
}

// Send sends req.Content to req.To (1 to MassMaxOpenIDs OpenIDs).
func (m *Mass) Send(ctx context.Context, req provider.SendRequest) (provider.SendResult, error) {
	switch n := len(req.To); {
	case req.Account == "":
		return provider.SendResult{}, fmt.Errorf("%w: no account (appid)", ErrInvalidRequest)
	case n == 0 || n > MassMaxOpenIDs || len(req.Keys) != n:
		return provider.SendResult{}, fmt.Errorf("%w: 1 to %d OpenIDs with one key each, got %d", ErrInvalidRequest, MassMaxOpenIDs, n)
	case req.Content == "":
		return provider.SendResult{}, fmt.Errorf("%w: empty content", ErrInvalidRequest)
	}
	for _, to := range req.To {
		if to == "" {
			return provider.SendResult{}, fmt.Errorf("%w: empty OpenID", ErrInvalidRequest)
		}
	}
	var body any = massBody{ToUser: req.To, MsgType: "text", Text: textBody{req.Content}}
	path := "/cgi-bin/message/mass/send"
	if len(req.To) < MassMinOpenIDs {
		body, path = customBody{ToUser: req.To[0], MsgType: "text", Text: textBody{req.Content}}, "/cgi-bin/message/custom/send"
	}
	raw, err := json.Marshal(body)
	if err != nil {
		return provider.SendResult{}, fmt.Errorf("%w: encode: %v", ErrInvalidRequest, err)
	}
	res, err := m.api.send(ctx, req.Account, req.Account, path, raw, len(req.To))
	if len(req.To) >= MassMinOpenIDs {
		for i := range res.Recipients {
			// The job's result comes later: MASSSENDJOBFINISH or mass/get.
			res.Recipients[i].AwaitConfirm = res.Recipients[i].Accepted
		}
	}
	return res, err
}

// Status asks message/mass/get about req.MsgID.
func (m *Mass) Status(ctx context.Context, req provider.StatusRequest) (provider.Status, error) {
	id, err := strconv.ParseInt(req.MsgID, 10, 64)
	if req.MsgID == "" || err != nil {
		return "", fmt.Errorf("wechat-mp-mass: no mass msg_id for %s: %w", req.Key, provider.ErrStatusUnsupported)
	}
	raw, _ := json.Marshal(map[string]int64{"msg_id": id})
	ap := app{appID: req.Account}
	if ap.tenant, ap.secret, err = m.api.secret(ctx, req.Account); err != nil {
		return "", err
	}
	for attempt := 0; ; attempt++ {
		tok, refused := m.api.accessToken(ctx, &ap, attempt > 0)
		if refused != nil {
			return "", fmt.Errorf("wechat-mp-mass: mass/get: %s %s", refused.Code, refused.Message)
		}
		ex := httpcall.Do(ctx, m.api.http, m.api.cfg.Timeouts, http.MethodPost,
			m.api.base+"/cgi-bin/message/mass/get?access_token="+url.QueryEscape(tok),
			http.Header{"Content-Type": {"application/json"}}, raw)
		if ex.Err != nil {
			return "", fmt.Errorf("wechat-mp-mass: mass/get: %w", ex.Err)
		}
		var ans answer
		if err := json.Unmarshal(ex.Body, &ans); ex.Status != http.StatusOK || err != nil {
			return "", fmt.Errorf("wechat-mp-mass: mass/get answered %d: %s", ex.Status, httpcall.Snippet(ex.Body))
		}
		if ans.Errcode != nil && *ans.Errcode != 0 {
			if tokenRefused(*ans.Errcode) && attempt == 0 {
				m.api.tokens.Drop(ap.appID, ap.secret, tok)
				continue
			}
			return "", fmt.Errorf("wechat-mp-mass: mass/get: %d %s", *ans.Errcode, ans.Errmsg)
		}
		switch ans.MsgStatus {
		case "SEND_SUCCESS", "DELETE":
			return provider.StatusDelivered, nil
		case "SEND_FAIL":
			return "", fmt.Errorf("wechat-mp-mass: msg_id %d is SEND_FAIL, which may have reached some OpenIDs: %w", id, provider.ErrStatusUnsupported)
		default:
			return "", fmt.Errorf("wechat-mp-mass: msg_id %d is %q: ask again later", id, ans.MsgStatus)
		}
	}
}
