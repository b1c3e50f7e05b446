package awsrun_test

import (
	"strings"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/awsrun"
)

func TestLoad(t *testing.T) {
	base := map[string]string{
		awsrun.EnvTable:                 "qunfa",
		awsrun.EnvQueueURL:              "https://sqs.ap-east-1.amazonaws.com/123456789012/work.fifo",
		awsrun.EnvProviderURL:           "https://provider.example",
		awsrun.EnvAlertBus:              "qunfa-alerts",
		awsrun.EnvCampaignRulePrefix:    "qunfa-dev-c-",
		awsrun.EnvCampaignTarget:        "arn:aws:lambda:ap-east-1:123456789012:function:submit",
		awsrun.EnvCampaignScheduleGroup: "qunfa-dev",
		awsrun.EnvSchedulerRole:         "arn:aws:iam::123456789012:role/qunfa-dev-SchedulerRole",
	}
	with := func(kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	tests := []struct {
		name    string
		fn      awsrun.Function
		env     map[string]string
		wantErr []string // substrings, all reported together
	}{
		{name: "api defaults", fn: awsrun.API, env: with()},
		{name: "sender defaults", fn: awsrun.Sender, env: with()},
		{name: "reconciler defaults", fn: awsrun.Reconciler, env: with()},
		{name: "api ignores provider settings it does not read", fn: awsrun.API, env: with(awsrun.EnvProviderURL, "::bad", awsrun.EnvClaimBatch, "x")},
		{name: "missing table and queue", fn: awsrun.Submit, env: map[string]string{},
			wantErr: []string{awsrun.EnvTable, awsrun.EnvQueueURL}},
		{name: "standard queue refused", fn: awsrun.Submit, env: with(awsrun.EnvQueueURL, "https://sqs.x/1/work"),
			wantErr: []string{"FIFO"}},
		{name: "sender without provider", fn: awsrun.Sender, env: with(awsrun.EnvProviderURL, ""),
			wantErr: []string{awsrun.EnvProviderURL}},
		{name: "bad values all reported", fn: awsrun.Sender,
			env:     with(awsrun.EnvProviderURL, "ftp://x", awsrun.EnvClaimBatch, "0", awsrun.EnvProviderTimeout, "soon", awsrun.EnvLogLevel, "loud"),
			wantErr: []string{awsrun.EnvProviderURL, awsrun.EnvClaimBatch, awsrun.EnvProviderTimeout, awsrun.EnvLogLevel}},
		{name: "deadline margin shorter than a provider call", fn: awsrun.Sender,
			env:     with(awsrun.EnvProviderTimeout, "10s", awsrun.EnvDeadlineMargin, "5s"),
			wantErr: []string{awsrun.EnvDeadlineMargin}},
		{name: "no alert bus", fn: awsrun.Breaker, env: with(awsrun.EnvAlertBus, ""),
			wantErr: []string{awsrun.EnvAlertBus}},
		{name: "campaign rules without prefix or target", fn: awsrun.API,
			env:     with(awsrun.EnvCampaignRulePrefix, "", awsrun.EnvCampaignTarget, ""),
			wantErr: []string{awsrun.EnvCampaignRulePrefix, "target"}},
		{name: "campaign schedules without group or role", fn: awsrun.API,
			env:     with(awsrun.EnvCampaignScheduleGroup, "", awsrun.EnvSchedulerRole, ""),
			wantErr: []string{awsrun.EnvCampaignScheduleGroup, "role"}},
		{name: "campaign time zone unknown", fn: awsrun.API, env: with(awsrun.EnvCampaignTimeZone, "Mars/Olympus"),
			wantErr: []string{awsrun.EnvCampaignTimeZone}},
		{name: "campaign time zone Local", fn: awsrun.API, env: with(awsrun.EnvCampaignTimeZone, "Local"),
			wantErr: []string{awsrun.EnvCampaignTimeZone}},
		{name: "campaign time zone", fn: awsrun.API, env: with(awsrun.EnvCampaignTimeZone, "Asia/Shanghai")},
		{name: "campaign rule prefix too long", fn: awsrun.API, env: with(awsrun.EnvCampaignRulePrefix, strings.Repeat("p", 41)),
			wantErr: []string{awsrun.EnvCampaignRulePrefix}},
		{name: "platform token given instead of its hash", fn: awsrun.API, env: with(awsrun.EnvPlatformTokenHash, "qf_secret"),
			wantErr: []string{awsrun.EnvPlatformTokenHash}},
		{name: "platform token hash", fn: awsrun.API, env: with(awsrun.EnvPlatformTokenHash, strings.Repeat("ab", 32))},
		{name: "submit ignores campaign rule settings", fn: awsrun.Submit, env: with(awsrun.EnvCampaignRulePrefix, "bad/prefix")},
		{name: "settle sooner than a provider call can last", fn: awsrun.Reconciler,
			env:     with(awsrun.EnvSettleAfter, "20s"),
			wantErr: []string{awsrun.EnvSettleAfter}},
		{name: "retention in days", fn: awsrun.Reconciler, env: with(awsrun.EnvItemRetention, "7d")},
		{name: "retention as a duration", fn: awsrun.Reconciler, env: with(awsrun.EnvItemRetention, "36h")},
		{name: "retention of no days", fn: awsrun.Reconciler, env: with(awsrun.EnvItemRetention, "0d"),
			wantErr: []string{awsrun.EnvItemRetention}},
		{name: "retention too short", fn: awsrun.Reconciler, env: with(awsrun.EnvItemRetention, "10m"),
			wantErr: []string{awsrun.EnvItemRetention}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := awsrun.Load(tt.fn, func(k string) string { return tt.env[k] })
			if len(tt.wantErr) == 0 {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error, want %v", tt.wantErr)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %s", err, w)
				}
			}
		})
	}
}

func TestLoadDefaultsFollowProviderTimeouts(t *testing.T) {
	env := map[string]string{
		awsrun.EnvTable: "t", awsrun.EnvQueueURL: "http://127.0.0.1:1/000000000000/q.fifo", awsrun.EnvProviderURL: "http://127.0.0.1:2",
		awsrun.EnvProviderConnectTimeout: "2s", awsrun.EnvProviderTimeout: "4s", awsrun.EnvProviderSecret: "qunfa-dev/provider",
		awsrun.EnvTenantSecretPrefix: "qunfa-dev/tenants/", "QUNFA_PROVIDER_TOKEN": "secret-token",
		awsrun.EnvAlertBus: "alerts",
	}
	cfg, err := awsrun.Load(awsrun.Sender, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if cfg.LongestProviderCall() != 10*time.Second || cfg.Sender.DeadlineMargin != 15*time.Second {
		t.Errorf("longest call %v, margin %v", cfg.LongestProviderCall(), cfg.Sender.DeadlineMargin)
	}
	if cfg.ProviderSecret != "qunfa-dev/provider" || cfg.TenantSecretPrefix != "qunfa-dev/tenants/" {
		t.Errorf("secret names not read: %q %q", cfg.ProviderSecret, cfg.TenantSecretPrefix)
	}
	rc, err := awsrun.Load(awsrun.Reconciler, func(k string) string { return env[k] })
	if err != nil || rc.SettleAfter != 15*time.Second || rc.StaleAfter != 2*time.Minute || rc.ItemRetention != 30*24*time.Hour {
		t.Errorf("reconciler defaults: %v %v %v %v", err, rc.SettleAfter, rc.StaleAfter, rc.ItemRetention)
	}
	env[awsrun.EnvItemRetention] = "7d"
	if rc, err := awsrun.Load(awsrun.Reconciler, func(k string) string { return env[k] }); err != nil || rc.ItemRetention != 7*24*time.Hour {
		t.Errorf("retention 7d: %v %v", err, rc.ItemRetention)
	}
	var sb strings.Builder
	log := awsrun.NewLogger(&sb, 0, awsrun.Sender)
	log.Info("ready", "config", cfg)
	if strings.Contains(sb.String(), "secret-token") || !strings.Contains(sb.String(), `"function":"sender"`) {
		t.Errorf("log line %s", sb.String())
	}
}
