package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/breaker"
	"github.com/qunfa/qunfa/internal/store"
)

// jsonOut decodes a command's --output json.
func jsonOut(t *testing.T, r result, v any) {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if err := json.Unmarshal([]byte(r.stdout), v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, r.stdout)
	}
}

func writeFile(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestJobsListsNewestFirstWithPaging(t *testing.T) {
	srv := newAPIServer(t)
	ctx := context.Background()
	var ids []string
	for range 3 {
		ids = append(ids, submitted(t, srv, "-"))
		srv.clock.Advance(1e9)
	}
	r := runCLI(ctx, srv, "", "jobs", "--limit", "2")
	r.want(t, 0, []string{"ID", "NAME", "STATUS", ids[2], ids[1], "spring sale", "0/3", "more: qunfa jobs --cursor "}, nil)
	if strings.Contains(r.stdout, ids[0]) || strings.Index(r.stdout, ids[2]) > strings.Index(r.stdout, ids[1]) {
		t.Errorf("page 1 is not the two newest, newest first:\n%s", r.stdout)
	}
	cursor := strings.TrimSpace(r.stdout[strings.LastIndex(r.stdout, "--cursor ")+len("--cursor "):])
	r = runCLI(ctx, srv, "", "jobs", "--limit", "2", "--cursor", cursor)
	r.want(t, 0, []string{ids[0]}, nil)
	if strings.Contains(r.stdout, "more:") {
		t.Errorf("the last page offers more:\n%s", r.stdout)
	}
	var l struct {
		Jobs []struct {
			ID string `json:"id"`
		} `json:"jobs"`
		NextCursor string `json:"next_cursor"`
	}
	jsonOut(t, runCLI(ctx, srv, "", "jobs", "--output", "json"), &l)
	if len(l.Jobs) != 3 || l.Jobs[0].ID != ids[2] {
		t.Errorf("jobs --output json: %+v", l)
	}
	runCLI(ctx, srv, "", "jobs", "--output", "yaml").want(t, 2, nil, []string{"--output must be table or json"})
	runCLI(ctx, srv, "", "jobs", "--cursor", "bogus").want(t, 1, nil, []string{"(HTTP 400)", "cursor"})
	runCLI(ctx, srv, "", "jobs", "--limit", "-1").want(t, 2, nil, []string{"--limit"})
}

func TestItemsRedriveResolveLimits(t *testing.T) {
	srv := newAPIServer(t)
	ctx := context.Background()
	id := submitted(t, srv, "-")
	finish(t, srv, id, true, "partial")

	runCLI(ctx, srv, "", "items", id).want(t, 0, []string{"SEQ", "u1", "u2", "u3", "confirmed", "failed", "permanent 81013: invalid recipient"}, nil)
	r := runCLI(ctx, srv, "", "items", id, "--status", "failed", "--category", "permanent")
	r.want(t, 0, []string{"failed"}, nil)
	if strings.Contains(r.stdout, "confirmed") {
		t.Errorf("--status failed lists confirmed items:\n%s", r.stdout)
	}
	var l struct {
		Items []struct {
			Seq    int64  `json:"seq"`
			Status string `json:"status"`
		} `json:"items"`
	}
	jsonOut(t, runCLI(ctx, srv, "", "items", id, "--status", "confirmed", "--output", "json"), &l)
	if len(l.Items) != 1 || l.Items[0].Status != "confirmed" {
		t.Errorf("items --output json: %+v", l)
	}
	runCLI(ctx, srv, "", "items", id, "--ref", "nobody").want(t, 0, []string{"SEQ"}, nil)
	runCLI(ctx, srv, "", "items", id, "--status", "lost").want(t, 1, nil, []string{"(HTTP 400)", "status"})
	runCLI(ctx, srv, "", "items", "nope").want(t, 1, nil, []string{"Not found (HTTP 404)"})
	runCLI(ctx, srv, "", "items").want(t, 2, nil, []string{"missing JOB"})

	runCLI(ctx, srv, "", "redrive", id, "--category", "bogus").want(t, 1, nil, []string{"(HTTP 422)", "  category:"})
	runCLI(ctx, srv, "", "redrive", id, "--category", "exhausted").want(t, 0, []string{id + ": 0 items redriven"}, nil)
	runCLI(ctx, srv, "", "redrive", id, "--category", "permanent").want(t, 0, []string{id + ": 2 items redriven"}, nil)
	runCLI(ctx, srv, "", "redrive", id).want(t, 2, nil, []string{"--category is required"})

	runCLI(ctx, srv, "", "resolve", id, "0", "resend").want(t, 1, nil, []string{"(HTTP 409)"})
	runCLI(ctx, srv, "", "resolve", id, "999", "delivered").want(t, 1, nil, []string{"(HTTP 404)"})
	runCLI(ctx, srv, "", "resolve", id, "x", "delivered").want(t, 2, nil, []string{"SEQ must be an item's number"})
	runCLI(ctx, srv, "", "resolve", id, "0", "maybe").want(t, 2, nil, []string{"delivered or resend"})

	running := submitted(t, srv, "-")
	runCLI(ctx, srv, "", "limits", running, "--rate", "5", "--budget", "2").want(t, 0, []string{running + " running: rate cap 5/s, budget 2"}, nil)
	runCLI(ctx, srv, "", "limits", running).want(t, 2, nil, []string{"give --rate, --budget or both"})
	runCLI(ctx, srv, "", "cancel", running).want(t, 0, []string{"cancelled"}, nil)
	runCLI(ctx, srv, "", "limits", running, "--rate", "1").want(t, 1, nil, []string{"(HTTP 409)"})
}

func TestAccountsCommand(t *testing.T) {
	srv := newAPIServer(t)
	ctx := context.Background()
	runCLI(ctx, srv, "", "accounts").want(t, 0, []string{"ACCOUNT", "acct-a", "acct-b", "closed"}, nil)
	runCLI(ctx, srv, "", "accounts", "put", "acct-c", "--rate", "10", "--burst", "10", "--reserve", "2",
		"--breaker-failures", "20", "--breaker-rate", "0.5", "--breaker-min-samples", "50", "--breaker-cooldown", "60",
		"--max-content-bytes", "2048", "--warmup-sec", "300", "--frequency-cap-max", "2", "--frequency-cap-window-sec", "86400").
		want(t, 0, []string{"account acct-c", "batch rate 8/s", "after 20 failures", "cool-down 60s", "at most 2048 bytes a message",
			"after 300s without a send, batch rate ramps from 10% to 100% over 300s", "at most 2 messages to a recipient in any 86400s"}, nil)
	file := writeFile(t, "acct.json", `{"rate_per_sec": 4, "burst": 4, "max_recipients_per_call": 3}`)
	runCLI(ctx, srv, "", "accounts", "put", "acct-d", "--file", file, "--burst", "8").want(t, 0, []string{"4/s, burst 8", "3 recipients", "at most 4096 bytes", "warm-up:   none", "frequency: no cap"}, nil)
	runCLI(ctx, srv, "", "accounts", "get", "acct-d").want(t, 0, []string{"account acct-d", "4/s, burst 8", "sizing:    not measured yet"}, nil)
	if err := srv.store.SaveAccountSizing(ctx, store.SaveAccountSizingParams{Tenant: "tenant-a", Account: "acct-d",
		Sizing: store.AccountSizing{BatchSize: 2, Concurrency: 1, P99: 2100 * time.Millisecond, At: srv.clock.Now()}}); err != nil {
		t.Fatal(err)
	}
	runCLI(ctx, srv, "", "accounts", "get", "acct-d").want(t, 0, []string{"sizing:    2 recipients per call of identical content, 1 calls in flight (P99 latency 2100 ms, "}, nil)
	runCLI(ctx, srv, "", "accounts", "get", "acct-d").want(t, 0, []string{"account acct-d", "4/s, burst 8", "provider:  wecomapi (status look-up)"}, nil)
	runCLI(ctx, srv, "", "accounts", "put", "acct-d", "--rate", "4", "--status-lookup=false").
		want(t, 0, []string{"provider:  wecomapi (no status look-up: unanswered items go to review)"}, nil)
	runCLI(ctx, srv, "", "accounts", "put", "acct-d", "--rate", "4", "--provider", "wecom-app").
		want(t, 1, nil, []string{"(HTTP 422)", "  account: a wecom-app account is <corpid>:<agentid>"})
	runCLI(ctx, srv, "", "accounts", "put", "acct-d", "--rate", "4", "--max-recipients", "1000").
		want(t, 0, []string{"provider:  wecomapi", "1000 recipients"}, nil)
	runCLI(ctx, srv, "", "accounts", "put", "acct-d", "--rate", "4", "--provider", "wechat-mp-mass").
		want(t, 0, []string{"provider:  wechat-mp-mass (no status look-up: unanswered items go to review)"}, nil)
	smsFile := writeFile(t, "sms.json", `{"rate_per_sec": 2, "provider": "http", "http": {"url": "https://93.184.215.14/send", "accepted": [200, 202]}}`)
	runCLI(ctx, srv, "", "accounts", "put", "sms-a", "--file", smsFile).
		want(t, 0, []string{"provider:  http (no status look-up: unanswered items go to review)", "calls:     POST https://93.184.215.14/send"}, nil)
	runCLI(ctx, srv, "", "accounts", "put", "acct-d", "--rate", "4", "--provider", "sms").want(t, 2, nil, []string{`unknown --provider "sms"`})
	runCLI(ctx, srv, "", "accounts", "put", "acct-d", "--rate", "4", "--provider", "wechat-mp-template", "--max-recipients", "5").
		want(t, 1, nil, []string{"(HTTP 422)", "  max_recipients_per_call: the wechat-mp-template provider takes at most 1 recipients per call"})
	runCLI(ctx, srv, "", "accounts", "get", "acct-d").want(t, 0, []string{"account acct-d", "pacing:    token bucket"}, nil)
	runCLI(ctx, srv, "", "accounts", "put", "acct-d", "--rate", "10", "--pacing", "random", "--min-gap-ms", "30").
		want(t, 0, []string{"pacing:    random gaps around 1/batch rate, at least 30 ms apart"}, nil)
	pacedFile := writeFile(t, "paced.json", `{"rate_per_sec": 10, "pacing": {"mode": "random", "min_gap_ms": 20}}`)
	runCLI(ctx, srv, "", "accounts", "put", "acct-d", "--file", pacedFile, "--min-gap-ms", "40").want(t, 0, []string{"at least 40 ms apart"}, nil)
	runCLI(ctx, srv, "", "accounts", "put", "acct-d", "--file", pacedFile, "--pacing", "token-bucket").want(t, 0, []string{"pacing:    token bucket"}, nil)
	runCLI(ctx, srv, "", "accounts", "put", "acct-d", "--rate", "10", "--min-gap-ms", "30").want(t, 2, nil, []string{"--min-gap-ms needs --pacing random"})
	runCLI(ctx, srv, "", "accounts", "put", "acct-d", "--rate", "10", "--pacing", "jitter").want(t, 2, nil, []string{"--pacing must be random or token-bucket"})
	runCLI(ctx, srv, "", "accounts", "put", "acct-d", "--rate", "10", "--pacing", "random", "--min-gap-ms", "100").
		want(t, 1, nil, []string{"(HTTP 422)", "  pacing.min_gap_ms:"})
	runCLI(ctx, srv, "", "accounts", "put", "acct-d", "--file", file, "--burst", "8").want(t, 0, []string{"pacing:    token bucket"}, nil)
	runCLI(ctx, srv, "", "accounts", "put", "acct-e", "--rate", "1", "--frequency-cap-max", "2").
		want(t, 2, nil, []string{"give both --frequency-cap-max and --frequency-cap-window-sec"})
	capFile := writeFile(t, "capped.json", `{"rate_per_sec": 4, "frequency_cap": {"max": 1, "window_sec": 3600}}`)
	runCLI(ctx, srv, "", "accounts", "put", "acct-e", "--file", capFile, "--frequency-cap-max", "3").
		want(t, 0, []string{"at most 3 messages to a recipient in any 3600s"}, nil)
	var a struct {
		Account    string  `json:"account"`
		RatePerSec float64 `json:"rate_per_sec"`
	}
	jsonOut(t, runCLI(ctx, srv, "", "accounts", "get", "acct-c", "--output", "json"), &a)
	if a.Account != "acct-c" || a.RatePerSec != 10 {
		t.Errorf("accounts get --output json: %+v", a)
	}
	var l struct{ Accounts []any }
	jsonOut(t, runCLI(ctx, srv, "", "accounts", "list", "--output", "json"), &l)
	if len(l.Accounts) != 6 { // acct-a to acct-e, sms-a
		t.Errorf("accounts list --output json: %d accounts", len(l.Accounts))
	}

	runCLI(ctx, srv, "", "accounts", "get", "nope").want(t, 1, nil, []string{"Not found (HTTP 404)"})
	runCLI(ctx, srv, "", "accounts", "put", "acct-e").want(t, 2, nil, []string{"give --rate"})
	runCLI(ctx, srv, "", "accounts", "put", "acct-e", "--rate", "fast").want(t, 2, nil, []string{"not a number"})
	runCLI(ctx, srv, "", "accounts", "put", "acct-e", "--rate", "5", "--reserve", "5").want(t, 1, nil, []string{"(HTTP 422)", "  online_reserve_per_sec:"})
	runCLI(ctx, srv, "", "accounts", "put", "acct-e", "--file", writeFile(t, "a.json", `{"rate": 1}`)).want(t, 1, nil, []string{`unknown field "rate"`})
	runCLI(ctx, srv, "", "accounts", "frob").want(t, 2, nil, []string{`unknown subcommand "frob"`, "usage: qunfa accounts"})

	// Breaker history: each transition with its figures, newest first.
	runCLI(ctx, srv, "", "accounts", "history", "acct-c").want(t, 0, []string{"the breaker of acct-c never changed state"}, nil)
	brk := &breaker.Breakers{Store: srv.store, Clock: srv.clock}
	if _, err := brk.OpenFor(ctx, "tenant-a", "acct-c", breaker.Cause{Reason: "failure rate 60% over 120 attempts in 1m0s", FailureRate: 0.6, Attempts: 120}); err != nil {
		t.Fatal(err)
	}
	srv.clock.Advance(time.Minute)
	if _, err := brk.Gate(ctx, "tenant-a", "acct-c", "job/0"); err != nil {
		t.Fatal(err)
	}
	r := runCLI(ctx, srv, "", "accounts", "history", "acct-c")
	r.want(t, 0, []string{"AT", "open → half_open", "closed → open", "60% of 120 attempts, until 2025-03-01 09:01:00", "cool-down over: probing"}, nil)
	if strings.Index(r.stdout, "open → half_open") > strings.Index(r.stdout, "closed → open") {
		t.Errorf("history not newest first:\n%s", r.stdout)
	}
	var h struct {
		Transitions []struct{ From, To string }
	}
	jsonOut(t, runCLI(ctx, srv, "", "accounts", "history", "acct-c", "--output", "json"), &h)
	if len(h.Transitions) != 2 || h.Transitions[0].To != "half_open" {
		t.Errorf("accounts history --output json: %+v", h)
	}
	runCLI(ctx, srv, "", "accounts", "history", "nope").want(t, 1, nil, []string{"Not found (HTTP 404)"})
	runCLI(ctx, srv, "", "accounts", "history").want(t, 2, nil, []string{"missing ACCOUNT"})
}

func TestCampaignsCommand(t *testing.T) {
	srv := newAPIServer(t)
	ctx := context.Background()
	file := writeFile(t, "campaign.json", `{"id": "weekly", "name": "weekly news", "schedule": "rate(7 days)", "mode": "snapshot",
		"request": {"template": "Hi {{name}}", "recipients": [{"account": "acct-a", "to": "u1", "vars": {"name": "Li"}}]}}`)
	runCLI(ctx, srv, "", "campaigns", "create", file).want(t, 0, []string{"campaign weekly \"weekly news\"", "rate(7 days) in the stack's time zone (UTC)", "1 recipients"}, nil)
	// --timezone sets the campaign's zone over the file's; an unknown one
	// is refused by the API, naming the field.
	zoned := writeFile(t, "zoned.json", `{"id": "morning", "name": "morning", "schedule": "cron(0 9 * * ? *)", "timezone": "UTC", "mode": "snapshot",
		"request": {"template": "Hi", "recipients": [{"account": "acct-a", "to": "u1"}]}}`)
	runCLI(ctx, srv, "", "campaigns", "create", zoned, "--timezone", "America/New_York").
		want(t, 0, []string{"cron(0 9 * * ? *) in America/New_York"}, nil)
	var m struct{ Timezone string }
	jsonOut(t, runCLI(ctx, srv, "", "campaigns", "get", "morning", "--output", "json"), &m)
	if m.Timezone != "America/New_York" {
		t.Errorf("campaign created with --timezone America/New_York has zone %q", m.Timezone)
	}
	runCLI(ctx, srv, "", "campaigns", "create", "--timezone", "Mars/Olympus", zoned).want(t, 1, nil, []string{"(HTTP 422)", "  timezone:"})
	runCLI(ctx, srv, "", "campaigns", "create", "--timezone", "UTC", writeFile(t, "list.json", `[1]`)).want(t, 1, nil, []string{"want a JSON object"})
	runCLI(ctx, srv, "", "campaigns").want(t, 0, []string{"ID", "weekly", "rate(7 days)", "snapshot", "yes"}, nil)
	runCLI(ctx, srv, "", "campaigns", "get", "weekly").want(t, 0, []string{"campaign weekly", "Hi {{name}}"}, nil)
	var k struct{ ID, Schedule string }
	jsonOut(t, runCLI(ctx, srv, "", "campaigns", "get", "weekly", "--output", "json"), &k)
	if k.ID != "weekly" || k.Schedule != "rate(7 days)" {
		t.Errorf("campaigns get --output json: %+v", k)
	}
	runCLI(ctx, srv, "", "campaigns", "create", writeFile(t, "bad.json", `{"name": "x", "schedule": "whenever", "mode": "snapshot", "request": {"template": "t"}}`)).
		want(t, 1, nil, []string{"(HTTP 422)", "  schedule:"})
	runCLI(ctx, srv, "", "campaigns", "create", writeFile(t, "broken.json", `{"name":`)).want(t, 1, nil, []string{"not valid JSON"})
	runCLI(ctx, srv, "", "campaigns", "delete", "weekly").want(t, 0, []string{"campaign weekly deleted"}, nil)
	runCLI(ctx, srv, "", "campaigns", "get", "weekly").want(t, 1, nil, []string{"(HTTP 404)"})
	runCLI(ctx, srv, "", "campaigns", "delete", "weekly").want(t, 1, nil, []string{"(HTTP 404)"})
}

func TestSuppressCommand(t *testing.T) {
	srv := newAPIServer(t)
	ctx := context.Background()
	runCLI(ctx, srv, "", "suppress", "add", "acct-a", "u1", "--reason", "asked to stop").want(t, 0, []string{"acct-a u1 suppressed"}, nil)
	csvFile := writeFile(t, "list.csv", "account,to,reason\nacct-a,u2,bounced\nacct-b,u3,\n")
	runCLI(ctx, srv, "", "suppress", "import", csvFile).want(t, 0, []string{"2 entries read, 2 added"}, nil)
	jsonFile := writeFile(t, "list.json", `{"entries": [{"account": "acct-b", "to": "u4"}, {"account": "acct-a", "to": "u6"}]}`)
	runCLI(ctx, srv, "", "suppress", "import", jsonFile).want(t, 0, []string{"2 entries read"}, nil)
	runCLI(ctx, srv, `[{"account": "acct-b", "to": "u5"}]`, "suppress", "import", "-").want(t, 0, []string{"1 entries read, 1 added"}, nil)
	r := runCLI(ctx, srv, "", "suppress", "list")
	r.want(t, 0, []string{"ACCOUNT", "u1", "asked to stop", "u2", "bounced", "u3", "u4", "u5", "u6"}, nil)
	runCLI(ctx, srv, "", "suppress", "list", "--limit", "2").want(t, 0, []string{"more: qunfa suppress list --cursor"}, nil)
	var l struct{ Suppressions []any }
	jsonOut(t, runCLI(ctx, srv, "", "suppress", "list", "--output", "json"), &l)
	if len(l.Suppressions) != 6 {
		t.Errorf("suppress list --output json: %d entries", len(l.Suppressions))
	}
	runCLI(ctx, srv, "", "suppress", "remove", "acct-a", "u1").want(t, 0, []string{"no longer suppressed"}, nil)

	runCLI(ctx, srv, "", "suppress", "import", writeFile(t, "bad.csv", "who,what\nx,y\n")).want(t, 1, nil, []string{"header must name the columns account and to"})
	runCLI(ctx, srv, "", "suppress", "import", writeFile(t, "gap.csv", "account,to\nacct-a,\n")).want(t, 1, nil, []string{"line 2: account and to must not be empty"})
	runCLI(ctx, srv, "", "suppress", "import", writeFile(t, "bad.json", `{"entries": [{"acct": "a"}]}`)).want(t, 1, nil, []string{"not suppression JSON"})
	runCLI(ctx, srv, "", "suppress", "import", writeFile(t, "empty.csv", "")).want(t, 1, nil, []string{"is empty"})
	runCLI(ctx, srv, "", "suppress", "add", "acct-a").want(t, 2, nil, []string{"missing ACCOUNT TO"})
	runCLI(ctx, srv, "", "suppress").want(t, 2, nil, []string{"missing subcommand"})
}

func TestWebhooksCommand(t *testing.T) {
	srv := newAPIServer(t)
	ctx := context.Background()
	r := runCLI(ctx, srv, "", "webhooks", "create", "--url", "http://127.0.0.1:9/hook", "--event", "job.finished,job.paused", "--event", "items.outcomes", "--secret", "a-long-random-secret")
	r.want(t, 0, []string{"webhook ", "http://127.0.0.1:9/hook", "job.finished,job.paused,items.outcomes"}, nil)
	id := strings.TrimSuffix(strings.Fields(r.stdout)[1], ":")
	runCLI(ctx, srv, "", "webhooks").want(t, 0, []string{"ID", id, "http://127.0.0.1:9/hook"}, nil)
	var l struct{ Webhooks []struct{ ID string } }
	jsonOut(t, runCLI(ctx, srv, "", "webhooks", "list", "--output", "json"), &l)
	if len(l.Webhooks) != 1 || l.Webhooks[0].ID != id {
		t.Errorf("webhooks list --output json: %+v", l)
	}
	runCLI(ctx, srv, "", "webhooks", "deliveries", id).want(t, 0, []string{"ID", "EVENT", "STATUS"}, nil)
	runCLI(ctx, srv, "", "webhooks", "deliveries", id, "--output", "json").want(t, 0, []string{`"deliveries"`}, nil)
	runCLI(ctx, srv, "", "webhooks", "redeliver", id, "nope").want(t, 1, nil, []string{"(HTTP 404)"})
	runCLI(ctx, srv, "", "webhooks", "create", "--url", "http://127.0.0.1:9/x", "--event", "job.exploded").want(t, 1, nil, []string{"(HTTP 422)", "  events"})
	runCLI(ctx, srv, "", "webhooks", "create", "--url", "http://127.0.0.1:9/x").want(t, 2, nil, []string{"at least one --event"})
	runCLI(ctx, srv, "", "webhooks", "delete", id).want(t, 0, []string{"webhook " + id + " deleted"}, nil)

	// A WeCom group robot: no secret, its key masked wherever it is shown.
	robot := runCLI(ctx, srv, "", "webhooks", "create", "--kind", "wecom_robot", "--url", "http://127.0.0.1:9/cgi-bin/webhook/send?key=robot-secret-key",
		"--event", "breaker.opened,job.finished")
	robot.want(t, 0, []string{"(wecom_robot)", "key=%2A%2A%2A%2A-key", "breaker.opened"}, nil)
	runCLI(ctx, srv, "", "webhooks").want(t, 0, []string{"KIND", "wecom_robot"}, nil)
	if all := runCLI(ctx, srv, "", "webhooks", "--output", "json"); strings.Contains(robot.stdout+all.stdout, "robot-secret-key") {
		t.Errorf("the robot's key is shown: %s%s", robot.stdout, all.stdout)
	}
	runCLI(ctx, srv, "", "webhooks", "create", "--kind", "wecom_robot", "--url", "http://127.0.0.1:9/send?key=k", "--event", "items.outcomes").
		want(t, 1, nil, []string{"(HTTP 422)", "events[0]"})
	runCLI(ctx, srv, "", "webhooks", "create", "--kind", "smtp", "--url", "http://127.0.0.1:9/x", "--event", "job.finished").
		want(t, 2, nil, []string{"--kind must be http or wecom_robot"})
	runCLI(ctx, srv, "", "webhooks", "delete", id).want(t, 1, nil, []string{"(HTTP 404)"})
}

func TestOpenAPICommand(t *testing.T) {
	ctx := context.Background()
	for version, want := range map[string]string{"3.1": "3.1.0", "3.0": "3.0.3"} {
		var doc struct{ OpenAPI string }
		jsonOut(t, runCLI(ctx, nil, "", "openapi", "--version", version), &doc)
		if doc.OpenAPI != want {
			t.Errorf("openapi --version %s: %q", version, doc.OpenAPI)
		}
	}
	runCLI(ctx, nil, "", "openapi", "--version", "2.0").want(t, 2, nil, []string{"--version must be 3.1 or 3.0"})
}

func TestCompletion(t *testing.T) {
	ctx := context.Background()
	for _, sh := range []string{"bash", "zsh", "fish"} {
		r := runCLI(ctx, nil, "", "completion", sh)
		r.want(t, 0, []string{"qunfa", "accounts", "webhooks", "deliveries", "import", "completion"}, nil)
		if sh == "bash" {
			if bash, err := exec.LookPath("bash"); err == nil {
				script := writeFile(t, "qunfa.bash", r.stdout+"\nCOMP_WORDS=(qunfa webhooks de); COMP_CWORD=2; _qunfa; echo \"${COMPREPLY[*]}\"\n"+
					"COMP_WORDS=(qunfa sup); COMP_CWORD=1; _qunfa; echo \"${COMPREPLY[*]}\"\n")
				out, err := exec.Command(bash, script).CombinedOutput()
				if err != nil || !strings.Contains(string(out), "delete deliveries") || !strings.Contains(string(out), "suppress") {
					t.Errorf("bash completion: %v\n%s", err, out)
				}
				// Flags: of the command, of the subcommand named, of the
				// default subcommand when none is.
				for _, c := range []struct{ words, want string }{
					{"qunfa items job-1 --r", "--ref --review"},
					{"qunfa accounts put acct-a --breaker-c", "--breaker-cooldown"},
					{"qunfa accounts --o", "--output"},
					{"qunfa webhooks create --u", "--url"},
					{"qunfa dev --allow", "--allow-private-urls"},
					{"qunfa watch --s", "--strict"},
				} {
					words := strings.Fields(c.words)
					script := writeFile(t, "flags.bash", fmt.Sprintf("%s\nCOMP_WORDS=(%s); COMP_CWORD=%d; _qunfa; echo \"${COMPREPLY[*]}\"\n",
						r.stdout, c.words, len(words)-1))
					out, err := exec.Command(bash, script).CombinedOutput()
					if got := strings.TrimSpace(string(out)); err != nil || got != c.want {
						t.Errorf("bash completion of %q = %q (%v), want %q", c.words, got, err, c.want)
					}
				}
			}
		}
		if sh == "fish" {
			for _, want := range []string{
				"-n '__fish_seen_subcommand_from items' -l ref -r -d",
				"-n '__fish_seen_subcommand_from dev' -l allow-private-urls -d",
				"-n '__fish_seen_subcommand_from accounts; and __fish_seen_subcommand_from put' -l breaker-cooldown -r -d",
				"-n '__fish_seen_subcommand_from accounts; and not __fish_seen_subcommand_from list get put history' -l output -r -d",
			} {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("fish completion lacks %q", want)
				}
			}
		}
	}
	runCLI(ctx, nil, "", "completion", "tcsh").want(t, 2, nil, []string{"no completion for \"tcsh\""})
}

// TestEveryReadCommandTakesOutputJSON holds the command table to
// --output on every read command.
func TestEveryReadCommandTakesOutputJSON(t *testing.T) {
	for name, cmd := range commands {
		if cmd.read != strings.Contains(cmd.usage, "--output table|json") {
			t.Errorf("%s: read = %v but its usage says %q", name, cmd.read, cmd.usage)
		}
	}
	for _, name := range []string{"status", "jobs", "items", "accounts", "campaigns", "suppress", "webhooks"} {
		if !commands[name].read {
			t.Errorf("%s is a read command without --output", name)
		}
	}
}

func TestTokensCommand(t *testing.T) {
	srv := newAPIServer(t)
	ctx := context.Background()
	r := runCLI(ctx, srv, "", "tokens", "create", "--name", "crm", "--role", "operate", "--expires-in", "720h")
	r.want(t, 0, []string{"token tok_", "(crm, operate): qf_", "shown once"}, nil)
	id := strings.Fields(r.stdout)[1]
	secret := strings.Fields(r.stdout)[4]
	runCLI(ctx, srv, "", "tokens").want(t, 0, []string{"ID", "ROLE", id, "crm", "operate"}, nil)
	if l := runCLI(ctx, srv, "", "tokens", "list", "--output", "json"); strings.Contains(l.stdout, secret) || !strings.Contains(l.stdout, `"tokens"`) {
		t.Errorf("tokens list --output json shows a secret or no tokens: %s", l.stdout)
	}
	runCLI(ctx, srv, "", "tokens", "create", "--name", "x", "--role", "root").want(t, 1, nil, []string{"(HTTP 422)", "  role"})
	runCLI(ctx, srv, "", "tokens", "create", "--name", "x").want(t, 2, nil, []string{"give --name and --role"})
	runCLI(ctx, srv, "", "tokens", "revoke", id).want(t, 0, []string{"token " + id + " revoked"}, nil)
	runCLI(ctx, srv, "", "tokens", "revoke", id).want(t, 1, nil, []string{"(HTTP 404)"})
}
