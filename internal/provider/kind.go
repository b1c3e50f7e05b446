package provider

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Kind names the provider API an account sends through (the account's
// "provider" field).
type Kind string

// Kinds. An account that names none sends through KindWecomAPI.
const (
	// KindWecomAPI is the unified wecomapi protocol (guid/toId), with a
	// status look-up by message key unless the account says it has none.
	KindWecomAPI Kind = "wecomapi"
	// KindWecomApp is WeCom application messages (cgi-bin/message/send).
	KindWecomApp Kind = "wecom-app"
	// KindWechatMPMass is a WeChat Official Account mass send by OpenID
	// list (message/mass/send).
	KindWechatMPMass Kind = "wechat-mp-mass"
	// KindWechatMPTemplate is WeChat Official Account template messages
	// (message/template/send), one OpenID per call.
	KindWechatMPTemplate Kind = "wechat-mp-template"
	// KindHTTP is a generic HTTP provider (SMS gateways, in-house senders).
	KindHTTP Kind = "http"
)

// Kinds lists every provider kind an account may name.
var Kinds = []Kind{KindWecomAPI, KindWecomApp, KindWechatMPMass, KindWechatMPTemplate, KindHTTP}

// KindOf is the kind an account's stored provider name means ("" is
// KindWecomAPI).
func KindOf(name string) Kind {
	if name == "" {
		return KindWecomAPI
	}
	return Kind(name)
}

// Known reports whether k is one of Kinds.
func (k Kind) Known() bool { return slices.Contains(Kinds, k) }

// MaxPerCall is the most recipients one call of the provider may carry,
// as the provider documents it; the sender never packs more into a call,
// whatever the account's max_recipients_per_call says.
func (k Kind) MaxPerCall() int {
	switch k {
	case KindWecomAPI, KindWecomApp:
		return 1000
	case KindWechatMPMass:
		return 10000
	default:
		return 1
	}
}

// CheckAccount says what is wrong with an account id for the provider,
// or nil: a wecom-app account is "<corpid>:<agentid>" (the application),
// a wechat-mp-template account "<appid>:<template_id>".
func (k Kind) CheckAccount(id string) error {
	switch k {
	case KindWecomApp:
		i := strings.LastIndexByte(id, ':')
		if n, err := strconv.ParseInt(id[i+1:], 10, 64); i <= 0 || err != nil || n <= 0 {
			return fmt.Errorf("a wecom-app account is <corpid>:<agentid> (the application), e.g. ww1234567890:1000002")
		}
	case KindWechatMPTemplate:
		if app, tmpl, ok := strings.Cut(id, ":"); !ok || app == "" || tmpl == "" {
			return fmt.Errorf("a wechat-mp-template account is <appid>:<template_id>, e.g. wx1234567890:notice-1")
		}
	}
	return nil
}
