// Package mockprovider is a local stand-in for a WeCom provider that speaks
// the wecomapi protocol. It enforces per-account rate limits, injects faults
// on demand, appends every delivered message to a JSON-lines log and answers
// status look-ups from that log. End-to-end tests judge qunfa by the log:
// one line per delivery, never de-duplicated, so a duplicate send is two
// lines.
//
// # Protocols
//
// Config.Protocol picks the API the mock speaks: "wecomapi" (the default,
// below), "wecom-app" (WeCom application messages: cgi-bin/gettoken and
// cgi-bin/message/send, see wecomapp.go), "wechat-mp" (Official Account
// template messages: cgi-bin/token and message/template/send, see
// wechatmp.go), "http" (a small SMS gateway for
// the generic http provider, see sms.go), or "all" (every one, as qunfa
// dev's own mock). The behaviour, stats and log below apply to every protocol;
// the account of a wecom-app call is "<corpid>:<agentid>", and its log
// lines carry no key (that API takes none).
//
// # Message endpoints
//
// POST /message/sendText sends to one recipient. Body
// {"guid": "<account>", "toId": "...", "content": "..."}; the message key
// travels in the Idempotency-Key header (optional; an empty key is logged as
// "" and cannot be looked up). Answer (HTTP 200):
//
//	{"errcode": 0, "errmsg": "ok", "msgid": "..."}
//
// or, when refused, {"errcode": <code>, "errmsg": "..."} with no msgid.
//
// POST /message/send sends one content to several recipients. Body
// {"guid", "toIds": [...], "content", "keys": [...]}; keys is optional and,
// when present, holds one message key per toId in the same order. Answer
// (HTTP 200):
//
//	{"errcode": 0, "errmsg": "ok",
//	 "results": [{"toId": "u1", "errcode": 0, "errmsg": "ok", "msgid": "..."},
//	             {"toId": "u2", "errcode": 45009, "errmsg": "..."},
//	             {"toId": "u3", "errcode": 81013, "errmsg": "..."}],
//	 "invalid": ["u3"]}
//
// The top-level errcode is about the call as a whole. When it is not 0 the
// call was refused before any recipient was looked at (account down, an
// injected error): nothing was delivered and results and invalid are
// absent. When it is 0, results holds exactly one entry per toId, in request
// order (duplicates included), and that entry alone says what happened to
// the recipient: errcode 0 with a msgid means delivered (or silently
// dropped, see below); 45009 means over the account's rate, nothing
// delivered; 81013 means the recipient is invalid. invalid repeats, for
// convenience, the toIds whose entry carries a recipient-invalid code.
//
// GET /message/status?key=<message key> answers {"errcode": 0, "status":
// "delivered"} when the key is in the log (this run or an earlier one, the
// log is loaded at start) and {"errcode": 0, "status": "unknown"} otherwise.
// Keys are global, not per account. A guid parameter, when given, applies
// that account's look-up behaviour: status_latency_ms delays the answer,
// status_lookup false answers 404 (a provider without a look-up),
// status_down answers 503; each such look-up counts in status_calls.
//
// # Behaviour per account
//
// Every account starts with the Config's Rate and Burst (0 rate =
// unlimited). PUT /_mock/accounts/{guid} changes it at run time; only the
// fields present in the body change:
//
//	{"rate_per_sec": 10, "burst": 10, "latency_ms": 50, "latency_per_recipient_ms": 0,
//	 "errors": [{"errcode": -1, "ratio": 0.1}], "timeout_ratio": 0.05,
//	 "down": false, "invalid_to_ids": ["u3"],
//	 "gateway_errors": [{"status": 502, "ratio": 0.05, "after_delivery": true}],
//	 "status_latency_ms": 200, "status_down": false, "status_lookup": true}
//
// GET /_mock/accounts/{guid} gives the whole current behaviour back. A call
// is handled in this order:
//
//  1. latency_ms: the answer is delayed (by the clock's Sleep when the
//     Config's Clock has one, else by a timer), plus
//     latency_per_recipient_ms for every recipient of the call (a provider
//     slower as batches grow);
//  2. gateway_errors: one draw picks at most one entry; without
//     after_delivery the call answers that HTTP status with an HTML body
//     at once (nothing delivered); with it, the call goes on (steps 3–6)
//     and the gateway's answer replaces the provider's;
//  2. down: every call answers 42001 (access token expired);
//  3. errors: one draw from the random source picks at most one injected
//     errcode for the whole call (ratios add up to at most 1);
//  4. invalid_to_ids: those recipients get 81013;
//  5. the token bucket: one token per recipient; a recipient without a
//     token gets 45009, or, with SilentDrop, errcode 0 and a msgid but is
//     neither delivered nor logged (counted as dropped);
//  6. delivered recipients are appended to the log, one write per call;
//  7. timeout_ratio: one draw decides whether the answer is withheld; the
//     message is already delivered and logged, and the request is held
//     until the client gives up or the mock closes (then the connection is
//     aborted without an answer).
//
// # Malformed requests
//
// They get HTTP 400 and a JSON body {"errcode", "errmsg"}, with WeCom-like
// codes: 47001 (body is not valid JSON, or too large), 40058 (a required
// field is missing or invalid: guid, toId/toIds, keys not matching toIds),
// 44004 (empty content). Unknown paths get HTTP 404 with errcode 40066.
//
// # Stats
//
// GET /_mock/stats → {"accounts": {"<guid>": {"calls", "accepted",
// "rate_limited", "failed", "timeouts", "dropped", "gateway_errors",
// "status_calls"}}}. calls counts send
// calls; accepted, rate_limited, failed and dropped count recipients
// (accepted = delivered and logged, so it equals the account's log lines
// from this run); timeouts counts calls whose answer was withheld;
// gateway_errors counts calls answered by an injected gateway error and
// status_calls the status look-ups naming the account.
package mockprovider
