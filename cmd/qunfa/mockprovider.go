package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/qunfa/qunfa/internal/mockprovider"
	"github.com/qunfa/qunfa/internal/provider/wxcrypt"
)

func (c *cli) mockProvider(ctx context.Context, args []string) error {
	fs := c.newFlagSet("mock-provider")
	addr := fs.String("addr", "127.0.0.1:8081", "address to listen on")
	logPath := fs.String("log", "", "JSON-lines log of delivered messages (created if missing, loaded at start; required)")
	rate := fs.Float64("rate", 0, "every account's rate in messages per second (0 = unlimited)")
	burst := fs.Int("burst", 0, "every account's burst (0 = max(1, ceil(rate)))")
	silentDrop := fs.Bool("silent-drop", false, "accept over-rate messages without delivering them, instead of answering 45009")
	protocol := fs.String("protocol", mockprovider.ProtocolWecomAPI, "the provider API to speak: wecomapi, wecom-app (WeCom application messages), wechat-mp (Official Account template messages and mass send), http (an SMS gateway), or all")
	callbackURL := fs.String("wechat-callback-url", "", "wechat-mp: where each mass send's MASSSENDJOBFINISH and each template message's TEMPLATESENDJOBFINISH event is POSTed, {appid} replaced by the app (e.g. http://127.0.0.1:8080/v1/callbacks/wechat-mp/{appid}; empty: no events)")
	callbackToken := fs.String("wechat-callback-token", "", "wechat-mp: the callback token the events are signed with (the account's or its tenant's wechat-mp-callback credential of qunfa)")
	callbackAESKey := fs.String("wechat-callback-aes-key", "", "wechat-mp: an EncodingAESKey (43 characters): the events go out encrypted, in WeChat's safe mode (qunfa's wechat-mp-callback/aes credential); empty: plain events")
	callbackDelay := fs.Duration("wechat-callback-delay", time.Second, "wechat-mp: how long after a send its event is POSTed")
	pprofFlag := fs.String("pprof", "", "serve runtime profiles (/debug/pprof/) on this loopback address, e.g. 127.0.0.1:6061 (debugging; also QUNFA_MOCK_PPROF; off by default)")
	if _, err := c.parse(fs, args, 0, ""); err != nil {
		return err
	}
	tuneGC()
	if *logPath == "" {
		return usagef("--log FILE is required: the delivery log is how tests judge qunfa")
	}
	if *callbackAESKey != "" {
		if _, err := wxcrypt.New("check", *callbackAESKey, "check"); err != nil {
			return usagef("--wechat-callback-aes-key: %v", err)
		}
		if *callbackToken == "" {
			return usagef("--wechat-callback-aes-key needs --wechat-callback-token: encrypted events are signed with it")
		}
	}
	var memberLimit int
	switch *protocol {
	case mockprovider.ProtocolWecomAPI, mockprovider.ProtocolHTTP, mockprovider.ProtocolWechatMP:
	case mockprovider.ProtocolWecomApp, mockprovider.ProtocolAll:
		memberLimit = mockprovider.WecomAppMemberLimitPerMin
	default:
		return usagef("unknown --protocol %q: give wecomapi, wecom-app, wechat-mp, http or all", *protocol)
	}
	log := slog.New(slog.NewTextHandler(c.stderr, nil))
	if addr := flagOrEnv(*pprofFlag, "QUNFA_MOCK_PPROF"); addr != "" {
		at, err := startPprof(addr, log)
		if err != nil {
			return usagef("%v", err)
		}
		fmt.Fprintf(c.stderr, "pprof: http://%s/debug/pprof/\n", at)
	}
	err := mockprovider.Serve(ctx, *addr, mockprovider.Config{
		LogPath: *logPath, Rate: *rate, Burst: *burst, SilentDrop: *silentDrop, Logger: log,
		Protocol: *protocol, MemberLimitPerMin: memberLimit,
		WechatCallbackURL: *callbackURL, WechatCallbackToken: *callbackToken, WechatCallbackAESKey: *callbackAESKey, WechatCallbackDelay: *callbackDelay,
	})
	if err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("mock provider: %w", err)
	}
	return nil
}
