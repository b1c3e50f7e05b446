package awsrun

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/qunfa/qunfa/internal/campaign"
	"github.com/qunfa/qunfa/internal/campaign/awsscheduler"
	"github.com/qunfa/qunfa/internal/campaign/ebscheduler"
	"github.com/qunfa/qunfa/internal/sender"
)

// Config is a function's configuration, read once in main by Load.
type Config struct {
	Table    string
	QueueURL string
	LogLevel slog.Level

	// Provider (sender and reconciler only).
	ProviderURL string
	// ProviderSecret and TenantSecretPrefix name the provider secrets
	// (names, not values).
	ProviderSecret         string
	TenantSecretPrefix     string
	ProviderConnectTimeout time.Duration
	ProviderTimeout        time.Duration

	// Sender tuning: ClaimBatch, Concurrency, TurnDuration, DeadlineMargin.
	Sender sender.Config

	// Reconciler.
	StaleAfter  time.Duration
	SettleAfter time.Duration
	// ItemRetention is how long a finished job's item records are kept
	// (expires_at, DynamoDB TTL).
	ItemRetention time.Duration

	// AlertBus is the EventBridge bus of the alerts.
	AlertBus string
	// Campaign rules (api function): rule name prefix and target (the
	// submit function's ARN).
	CampaignRulePrefix string
	CampaignTarget     string
	// CampaignDeadLetter is the SQS queue ARN of undeliverable firings.
	CampaignDeadLetter string
	// Campaign schedules (api function): the schedule group, the role
	// the scheduler invokes submit with, the cron time zone.
	CampaignScheduleGroup string
	SchedulerRole         string
	CampaignTimeZone      string
	// PlatformTokenHash is the hex SHA-256 of the platform operator's token.
	PlatformTokenHash string

	fn Function
}

// Load reads fn's variables (fn.Env, nothing else) with getenv, fills the
// defaults and validates the result. All problems are reported together.
func Load(fn Function, getenv func(string) string) (Config, error) {
	c := Config{fn: fn}
	var errs []error
	get := func(name string) string {
		if !fn.reads(name) {
			return ""
		}
		return strings.TrimSpace(getenv(name))
	}
	dur := func(name string, dst *time.Duration) {
		v := get(name)
		if v == "" {
			return
		}
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			errs = append(errs, fmt.Errorf("%s=%q: want a positive duration such as 10s", name, v))
			return
		}
		*dst = d
	}
	num := func(name string, dst *int) {
		v := get(name)
		if v == "" {
			return
		}
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			errs = append(errs, fmt.Errorf("%s=%q: want a positive integer", name, v))
			return
		}
		*dst = n
	}
	c.Table = get(EnvTable)
	c.QueueURL = get(EnvQueueURL)
	if v := get(EnvLogLevel); v != "" {
		if err := c.LogLevel.UnmarshalText([]byte(v)); err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: want debug, info, warn or error", EnvLogLevel, v))
		}
	}
	c.ProviderURL = get(EnvProviderURL)
	c.ProviderSecret = get(EnvProviderSecret)
	c.TenantSecretPrefix = get(EnvTenantSecretPrefix)
	dur(EnvProviderConnectTimeout, &c.ProviderConnectTimeout)
	dur(EnvProviderTimeout, &c.ProviderTimeout)
	num(EnvClaimBatch, &c.Sender.ClaimBatch)
	num(EnvConcurrency, &c.Sender.Concurrency)
	dur(EnvTurnDuration, &c.Sender.TurnDuration)
	dur(EnvMaxWait, &c.Sender.MaxWait)
	dur(EnvDeadlineMargin, &c.Sender.DeadlineMargin)
	dur(EnvStaleAfter, &c.StaleAfter)
	dur(EnvSettleAfter, &c.SettleAfter)
	if v := get(EnvItemRetention); v != "" {
		d, err := parseRetention(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: %w", EnvItemRetention, v, err))
		}
		c.ItemRetention = d
	}
	c.AlertBus = get(EnvAlertBus)
	c.CampaignRulePrefix = get(EnvCampaignRulePrefix)
	c.CampaignTarget = get(EnvCampaignTarget)
	c.CampaignDeadLetter = get(EnvCampaignDeadLetter)
	c.CampaignScheduleGroup = get(EnvCampaignScheduleGroup)
	c.SchedulerRole = get(EnvSchedulerRole)
	c.CampaignTimeZone = get(EnvCampaignTimeZone)
	c.PlatformTokenHash = get(EnvPlatformTokenHash)
	c = c.withDefaults()
	return c, errors.Join(append(errs, c.validate())...)
}

func (c Config) withDefaults() Config {
	if c.ProviderConnectTimeout <= 0 {
		c.ProviderConnectTimeout = 3 * time.Second
	}
	if c.ProviderTimeout <= 0 {
		c.ProviderTimeout = 10 * time.Second
	}
	if c.Sender.ClaimBatch <= 0 {
		c.Sender.ClaimBatch = 10
	}
	if c.Sender.Concurrency <= 0 {
		c.Sender.Concurrency = 16
	}
	if c.Sender.TurnDuration <= 0 {
		c.Sender.TurnDuration = 60 * time.Second
	}
	if c.Sender.DeadlineMargin <= 0 {
		c.Sender.DeadlineMargin = c.LongestProviderCall() + 5*time.Second
	}
	if c.StaleAfter <= 0 {
		c.StaleAfter = 2 * time.Minute
	}
	if c.SettleAfter <= 0 {
		c.SettleAfter = c.LongestProviderCall() + 5*time.Second
	}
	if c.ItemRetention <= 0 {
		c.ItemRetention = DefaultItemRetention
	}
	return c
}

// DefaultItemRetention keeps a finished job's item records 30 days.
const DefaultItemRetention = 30 * 24 * time.Hour

// parseRetention reads "30d" (days, as the template's ItemRetentionDays
// gives it) or a Go duration of at least an hour.
func parseRetention(v string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(v, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n < 1 || n > 3650 {
			return 0, errors.New("want days from 1d to 3650d, or a Go duration such as 72h")
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < time.Hour {
		return 0, errors.New("want days such as 30d, or a Go duration of at least 1h")
	}
	return d, nil
}

// Bounds of the sender tuning.
const (
	maxClaimBatch  = 1000
	maxConcurrency = 256
)

func (c Config) validate() error {
	var errs []error
	if c.Table == "" {
		errs = append(errs, fmt.Errorf("%s is required (the DynamoDB table)", EnvTable))
	}
	if c.QueueURL == "" {
		errs = append(errs, fmt.Errorf("%s is required (the SQS FIFO work queue URL)", EnvQueueURL))
	} else if u, err := url.Parse(c.QueueURL); err != nil || u.Host == "" || !strings.HasSuffix(u.Path, ".fifo") {
		errs = append(errs, fmt.Errorf("%s=%q: want the URL of a FIFO queue (ending in .fifo)", EnvQueueURL, c.QueueURL))
	}
	if h := c.PlatformTokenHash; h != "" {
		if b, err := hex.DecodeString(h); err != nil || len(b) != sha256.Size || strings.ToLower(h) != h {
			errs = append(errs, fmt.Errorf("%s: want the lower-case hex SHA-256 of the platform token (64 characters), not the token", EnvPlatformTokenHash))
		}
	}
	if c.fn.reads(EnvAlertBus) && c.AlertBus == "" {
		errs = append(errs, fmt.Errorf("%s is required (the EventBridge bus of the alerts)", EnvAlertBus))
	}
	if c.fn.reads(EnvCampaignRulePrefix) {
		if _, err := ebscheduler.New(nil, ebscheduler.Config{RulePrefix: c.CampaignRulePrefix, TargetARN: c.CampaignTarget}); err != nil {
			errs = append(errs, fmt.Errorf("%s=%q, %s=%q: %w", EnvCampaignRulePrefix, c.CampaignRulePrefix, EnvCampaignTarget, c.CampaignTarget, err))
		}
	}
	if c.fn.reads(EnvCampaignScheduleGroup) {
		if _, err := awsscheduler.New(nil, c.scheduleConfig()); err != nil {
			errs = append(errs, fmt.Errorf("%s=%q, %s=%q, %s=%q: %w", EnvCampaignScheduleGroup, c.CampaignScheduleGroup,
				EnvSchedulerRole, c.SchedulerRole, EnvCampaignTimeZone, c.CampaignTimeZone, err))
		}
		if _, err := campaign.LoadZone(c.CampaignTimeZone, nil); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w (an IANA name such as Asia/Shanghai)", EnvCampaignTimeZone, err))
		}
	}
	if !c.fn.Provider {
		return errors.Join(errs...)
	}
	if c.ProviderURL == "" {
		errs = append(errs, fmt.Errorf("%s is required (the wecomapi provider)", EnvProviderURL))
	} else if u, err := url.Parse(c.ProviderURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, fmt.Errorf("%s=%q: want an http(s) URL", EnvProviderURL, c.ProviderURL))
	}
	call := c.LongestProviderCall()
	if c.fn.reads(EnvClaimBatch) {
		if c.Sender.ClaimBatch > maxClaimBatch {
			errs = append(errs, fmt.Errorf("%s=%d: at most %d", EnvClaimBatch, c.Sender.ClaimBatch, maxClaimBatch))
		}
		if c.Sender.Concurrency > maxConcurrency {
			errs = append(errs, fmt.Errorf("%s=%d: at most %d", EnvConcurrency, c.Sender.Concurrency, maxConcurrency))
		}
		if c.Sender.DeadlineMargin < call {
			errs = append(errs, fmt.Errorf("%s=%s: must cover the longest provider call (%s = connect + 2 × response timeout), or a batch may outlive the invocation",
				EnvDeadlineMargin, c.Sender.DeadlineMargin, call))
		}
	}
	if c.fn.reads(EnvSettleAfter) && c.SettleAfter <= call {
		errs = append(errs, fmt.Errorf("%s=%s: must exceed the longest provider call (%s), or a call still in flight could be looked up",
			EnvSettleAfter, c.SettleAfter, call))
	}
	return errors.Join(errs...)
}

// scheduleConfig is the campaign schedules' configuration.
func (c Config) scheduleConfig() awsscheduler.Config {
	return awsscheduler.Config{Group: c.CampaignScheduleGroup, TargetARN: c.CampaignTarget, RoleARN: c.SchedulerRole,
		DeadLetterARN: c.CampaignDeadLetter, TimeZone: c.CampaignTimeZone}
}

// LongestProviderCall is how long one provider call can last: connect, then
// the response timeout for the headers and again for the body (wecomapi).
func (c Config) LongestProviderCall() time.Duration {
	return c.ProviderConnectTimeout + 2*c.ProviderTimeout
}

// Function is the function the configuration was loaded for.
func (c Config) Function() Function { return c.fn }

// LogValue prints the configuration (secret names, never a secret).
func (c Config) LogValue() slog.Value {
	attrs := []slog.Attr{
		slog.String("function", c.fn.Name), slog.String("table", c.Table), slog.String("queue_url", c.QueueURL),
		slog.String("alert_bus", c.AlertBus),
	}
	if c.fn.reads(EnvCampaignRulePrefix) {
		attrs = append(attrs, slog.String("campaign_rule_prefix", c.CampaignRulePrefix), slog.String("campaign_target", c.CampaignTarget),
			slog.String("campaign_dead_letter", c.CampaignDeadLetter), slog.String("campaign_schedule_group", c.CampaignScheduleGroup),
			slog.String("campaign_time_zone", c.CampaignTimeZone))
	}
	if c.fn.Provider {
		attrs = append(attrs, slog.String("provider_url", c.ProviderURL),
			slog.String("provider_secret", c.ProviderSecret), slog.String("tenant_secret_prefix", c.TenantSecretPrefix),
			slog.Duration("provider_connect_timeout", c.ProviderConnectTimeout),
			slog.Duration("provider_timeout", c.ProviderTimeout))
	}
	return slog.GroupValue(attrs...)
}
