package sender

import (
	"testing"
	"time"
)

// TestConfigDefaultsAsDocumented: a Sender configured with zero values —
// or negative ones — runs with the defaults Config documents (a deployment
// sets only what it changes), and a value that is set is kept.
func TestConfigDefaultsAsDocumented(t *testing.T) {
	documented := Config{
		ClaimBatch:         10,
		Concurrency:        16,
		MaxWait:            300 * time.Millisecond,
		TurnDuration:       60 * time.Second,
		DeadlineMargin:     3 * time.Second,
		BackoffBase:        time.Second,
		BackoffCap:         30 * time.Second,
		MaxAttempts:        5,
		MinSlowFactor:      0.05,
		RenewAfterReceives: 4,
		StragglerWait:      time.Second,
		MaxStragglers:      16, // Concurrency
		StatePoll:          100 * time.Millisecond,
		AccountRefresh:     time.Second,
		AccountConcurrency: 64, // 4 × Concurrency
		MaxHandBack:        15 * time.Minute,
		FoldEvery:          2,
	}
	if got := (Config{}).withDefaults(); got != documented {
		t.Errorf("zero config runs with\n%+v\nwant the documented defaults\n%+v", got, documented)
	}
	negative := Config{
		ClaimBatch: -1, Concurrency: -1, MaxWait: -1, TurnDuration: -1, DeadlineMargin: -1,
		BackoffBase: -1, BackoffCap: -1, MaxAttempts: -1, MinSlowFactor: -1, RenewAfterReceives: -1,
		StragglerWait: -1, MaxStragglers: -1, StatePoll: -1, AccountRefresh: -1, AccountConcurrency: -1,
		MaxHandBack: -1, FoldEvery: -1,
	}
	if got := negative.withDefaults(); got != documented {
		t.Errorf("negative config runs with\n%+v\nwant the documented defaults\n%+v", got, documented)
	}
	// Every value set (none equal to its default), and the two defaults
	// derived from Concurrency follow a Concurrency that is set.
	set := Config{
		ClaimBatch: 1, Concurrency: 3, MaxWait: time.Millisecond, TurnDuration: 2 * time.Second,
		DeadlineMargin: time.Millisecond, BackoffBase: 2 * time.Millisecond, BackoffCap: 3 * time.Millisecond,
		MaxAttempts: 1, MinSlowFactor: 0.5, RenewAfterReceives: 1, StragglerWait: 4 * time.Millisecond,
		MaxStragglers: 1, StatePoll: 5 * time.Millisecond, AccountRefresh: 6 * time.Millisecond,
		AccountConcurrency: 1, MaxHandBack: 7 * time.Millisecond, FoldEvery: 1,
	}
	if got := set.withDefaults(); got != set {
		t.Errorf("config set to\n%+v\nruns with\n%+v", set, got)
	}
	derived := Config{Concurrency: 3}.withDefaults()
	if derived.MaxStragglers != 3 || derived.AccountConcurrency != 12 {
		t.Errorf("with Concurrency 3: MaxStragglers %d (want 3), AccountConcurrency %d (want 12)",
			derived.MaxStragglers, derived.AccountConcurrency)
	}
}
