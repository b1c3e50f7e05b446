package wechatmp

import (
	"crypto/sha1"
	"crypto/subtle"
	"encoding/hex"
	"encoding/xml"
	"fmt"
	"slices"
	"strings"
)

// Signature is WeChat's signature of a callback ("接入指南"): the hex
// SHA-1 of the account's callback token, the timestamp and the nonce,
// sorted and joined.
func Signature(token, timestamp, nonce string) string {
	parts := []string{token, timestamp, nonce}
	slices.Sort(parts)
	sum := sha1.Sum([]byte(strings.Join(parts, "")))
	return hex.EncodeToString(sum[:])
}

// VerifySignature reports whether signature is the one token gives
// (constant time); an empty token never verifies.
func VerifySignature(token, timestamp, nonce, signature string) bool {
	if token == "" || timestamp == "" || nonce == "" {
		return false
	}
	want := Signature(token, timestamp, nonce)
	return subtle.ConstantTimeCompare([]byte(want), []byte(strings.ToLower(signature))) == 1
}

// EventMassSendJobFinish is the event of a finished mass send.
const EventMassSendJobFinish = "MASSSENDJOBFINISH"

// Event is a callback's XML body (the fields qunfa reads).
type Event struct {
	XMLName      xml.Name `xml:"xml"`
	ToUserName   string   `xml:"ToUserName"`
	FromUserName string   `xml:"FromUserName"`
	CreateTime   int64    `xml:"CreateTime"`
	MsgType      string   `xml:"MsgType"`
	Event        string   `xml:"Event"`
	MsgID        string   `xml:"MsgID"`
	Status       string   `xml:"Status"`
	TotalCount   int      `xml:"TotalCount"`
	FilterCount  int      `xml:"FilterCount"`
	SentCount    int      `xml:"SentCount"`
	ErrorCount   int      `xml:"ErrorCount"`
}

// ParseEvent reads a callback body.
func ParseEvent(body []byte) (Event, error) {
	var e Event
	if err := xml.Unmarshal(body, &e); err != nil {
		return Event{}, fmt.Errorf("wechat callback: %w", err)
	}
	return e, nil
}

// MassOutcome is what a MASSSENDJOBFINISH event says of every item of
// its call.
type MassOutcome string

// Mass outcomes.
const (
	// MassConfirmed: "send success" without errors: every OpenID got it.
	MassConfirmed MassOutcome = "confirmed"
	// MassFailed: nothing was sent.
	MassFailed MassOutcome = "failed"
	// MassReview: some were sent and some not, and the event does not
	// say which: an operator decides (never resent).
	MassReview MassOutcome = "review"
)

// Outcome reads a MASSSENDJOBFINISH event.
func (e Event) Outcome() MassOutcome {
	switch {
	case e.Status == "send success" && e.ErrorCount == 0:
		return MassConfirmed
	case e.SentCount == 0:
		return MassFailed
	}
	return MassReview
}

// MassEventXML is the body WeChat posts when a mass send finishes.
func MassEventXML(e Event) ([]byte, error) {
	e.MsgType, e.Event = "event", EventMassSendJobFinish
	return xml.Marshal(e)
}

// EventTemplateSendJobFinish is the event of a template message's
// delivery ("模板消息: 事件推送"), about the msgid its send answered.
const EventTemplateSendJobFinish = "TEMPLATESENDJOBFINISH"

// Template delivery statuses as WeChat words them.
const (
	TemplateStatusSuccess      = "success"
	TemplateStatusUserBlock    = "failed:user block"
	TemplateStatusSystemFailed = "failed: system failed"
)

// TemplateOutcome is what a TEMPLATESENDJOBFINISH event says of its item.
type TemplateOutcome string

// Template outcomes.
const (
	// TemplateDelivered: "success".
	TemplateDelivered TemplateOutcome = "delivered"
	// TemplateRefused: "failed:user block", the user refuses the
	// account's template messages: sending again would be refused too.
	TemplateRefused TemplateOutcome = "refused"
	// TemplateNotDelivered: "failed: system failed", WeChat did not
	// deliver it for another reason: not delivered, and not retried by
	// itself.
	TemplateNotDelivered TemplateOutcome = "not_delivered"
	// TemplateUnknown: a status WeChat does not document.
	TemplateUnknown TemplateOutcome = "unknown"
)

// TemplateOutcome reads a TEMPLATESENDJOBFINISH event's Status (spaces
// after "failed:" as WeChat varies them).
func (e Event) TemplateOutcome() TemplateOutcome {
	st := strings.ToLower(strings.TrimSpace(e.Status))
	switch {
	case st == TemplateStatusSuccess:
		return TemplateDelivered
	case !strings.HasPrefix(st, "failed:"):
		return TemplateUnknown
	}
	switch strings.TrimSpace(strings.TrimPrefix(st, "failed:")) {
	case "user block":
		return TemplateRefused
	case "system failed":
		return TemplateNotDelivered
	}
	return TemplateUnknown
}

// TemplateEventXML is the body WeChat posts when a template message's
// delivery is known.
func TemplateEventXML(e Event) ([]byte, error) {
	e.MsgType, e.Event = "event", EventTemplateSendJobFinish
	return xml.Marshal(e)
}
