package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"

	"github.com/qunfa/qunfa/apiclient"
)

// group runs one subcommand of a command that has them (accounts,
// campaigns, suppress, webhooks); with none given, or only flags, it runs
// def.
func (c *cli) group(ctx context.Context, name string, args []string, subs map[string]func(context.Context, []string) error, def string) error {
	sub := def
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		sub, args = args[0], args[1:]
	}
	run, ok := subs[sub]
	if !ok {
		if sub == "" {
			return usagef("missing subcommand")
		}
		return usagef("unknown subcommand %q", sub)
	}
	return run(ctx, args)
}

func (c *cli) accounts(ctx context.Context, args []string) error {
	return c.group(ctx, "accounts", args, map[string]func(context.Context, []string) error{
		"list": c.accountsList, "get": c.accountsGet, "put": c.accountsPut, "history": c.accountsHistory,
	}, "list")
}

func (c *cli) accountsList(ctx context.Context, args []string) error {
	fs := c.newFlagSet("accounts")
	out := outputFlag(fs)
	_, cl, err := c.parseRead(fs, out, args, 0, "")
	if err != nil {
		return err
	}
	resp, err := cl.ListAccountsWithResponse(ctx)
	if err := cl.check(resp, err, http.StatusOK); err != nil {
		return err
	}
	return c.show(*out, resp.Body, func(w io.Writer) {
		rows := make([][]any, 0, len(resp.JSON200.Accounts))
		for _, a := range resp.JSON200.Accounts {
			rows = append(rows, []any{a.Account, a.RatePerSec, a.Burst, a.OnlineReservePerSec, a.BatchRatePerSec,
				a.MaxRecipientsPerCall, breakerText(a.BreakerState)})
		}
		table(w, "ACCOUNT\tRATE/S\tBURST\tRESERVE/S\tBATCH RATE/S\tPER CALL\tBREAKER", rows)
	})
}

func breakerText(b apiclient.BreakerState) string {
	s := string(b.State)
	if b.State != apiclient.Closed {
		if b.Reason != "" {
			s += ": " + b.Reason
		}
		if b.Until != nil {
			s += " until " + shortTime(b.Until)
		}
	}
	return s
}

func (c *cli) accountsGet(ctx context.Context, args []string) error {
	fs := c.newFlagSet("accounts")
	out := outputFlag(fs)
	pos, cl, err := c.parseRead(fs, out, args, 1, "ACCOUNT")
	if err != nil {
		return err
	}
	resp, err := cl.GetAccountWithResponse(ctx, pos[0])
	if err := cl.check(resp, err, http.StatusOK); err != nil {
		return err
	}
	return c.show(*out, resp.Body, func(w io.Writer) { printAccount(w, *resp.JSON200) })
}

// accountsHistory lists an account's breaker transitions, newest first.
func (c *cli) accountsHistory(ctx context.Context, args []string) error {
	fs := c.newFlagSet("accounts")
	out := outputFlag(fs)
	pos, cl, err := c.parseRead(fs, out, args, 1, "ACCOUNT")
	if err != nil {
		return err
	}
	resp, err := cl.GetBreakerHistoryWithResponse(ctx, pos[0])
	if err := cl.check(resp, err, http.StatusOK); err != nil {
		return err
	}
	return c.show(*out, resp.Body, func(w io.Writer) {
		if len(resp.JSON200.Transitions) == 0 {
			fmt.Fprintf(w, "the breaker of %s never changed state\n", resp.JSON200.Account)
			return
		}
		rows := make([][]any, 0, len(resp.JSON200.Transitions))
		for _, tr := range resp.JSON200.Transitions {
			rows = append(rows, []any{shortTime(&tr.At), fmt.Sprintf("%s → %s", tr.From, tr.To), transitionFigures(tr), tr.Reason})
		}
		table(w, "AT\tTRANSITION\tFIGURES\tREASON", rows)
	})
}

// transitionFigures is what tripped a breaker, and the cool-down after an
// open: "60% of 120 attempts, until 09:01:00", "20 in a row", "-".
func transitionFigures(tr apiclient.BreakerTransition) string {
	var parts []string
	if tr.Attempts > 0 {
		parts = append(parts, fmt.Sprintf("%.0f%% of %d attempts", 100*tr.FailureRate, tr.Attempts))
	}
	if tr.ConsecutiveFailures > 0 {
		parts = append(parts, fmt.Sprintf("%d in a row", tr.ConsecutiveFailures))
	}
	if tr.To == apiclient.Open && tr.Until != nil {
		parts = append(parts, "until "+shortTime(tr.Until))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

func printAccount(w io.Writer, a apiclient.Account) {
	fmt.Fprintf(w, "account %s\n", a.Account)
	fmt.Fprintf(w, "  rate:      %g/s, burst %g, online reserve %g/s: batch rate %g/s\n", a.RatePerSec, a.Burst, a.OnlineReservePerSec, a.BatchRatePerSec)
	lookup := "status look-up"
	if !a.StatusLookup {
		lookup = "no status look-up: unanswered items go to review"
	}
	fmt.Fprintf(w, "  provider:  %s (%s)\n", a.Provider, lookup)
	if h := a.Http; h != nil {
		method := "POST"
		if h.Method != nil {
			method = string(*h.Method)
		}
		fmt.Fprintf(w, "  calls:     %s %s\n", method, h.Url)
	}
	fmt.Fprintf(w, "  per call:  %d recipients\n", a.MaxRecipientsPerCall)
	fmt.Fprintf(w, "  content:   at most %d bytes a message\n", a.MaxContentBytes)
	if a.WarmupSec > 0 {
		fmt.Fprintf(w, "  warm-up:   after %ds without a send, batch rate ramps from 10%% to 100%% over %ds\n", a.WarmupSec, a.WarmupSec)
	} else {
		fmt.Fprintf(w, "  warm-up:   none\n")
	}
	if c := a.FrequencyCap; c != nil {
		fmt.Fprintf(w, "  frequency: at most %d messages to a recipient in any %ds\n", c.Max, c.WindowSec)
	} else {
		fmt.Fprintf(w, "  frequency: no cap\n")
	}
	if z := a.Sizing; z != nil {
		fmt.Fprintf(w, "  sizing:    %d recipients per call of identical content, %d calls in flight (P99 latency %d ms, %s)\n",
			z.BatchSize, z.Concurrency, z.P99Ms, shortTime(&z.MeasuredAt))
	} else {
		fmt.Fprintf(w, "  sizing:    not measured yet\n")
	}
	if p := a.Pacing; p != nil {
		fmt.Fprintf(w, "  pacing:    random gaps around 1/batch rate, at least %d ms apart\n", p.MinGapMs)
	} else {
		fmt.Fprintf(w, "  pacing:    token bucket (bursts up to the burst)\n")
	}
	b := a.Breaker
	fmt.Fprintf(w, "  breaker:   opens after %d failures in a row or a failure rate of %g over %d sends; cool-down %ds\n",
		b.ConsecutiveFailures, b.FailureRate, b.MinSamples, b.CooldownSec)
	fmt.Fprintf(w, "  state:     %s (opened %d times)\n", breakerText(a.BreakerState), a.BreakerState.Opens)
	fmt.Fprintf(w, "  updated:   %s\n", shortTime(a.UpdatedAt))
}

// accountsPut creates or replaces an account from flags or a JSON file
// (the body of PUT /v1/accounts/{account}); flags given override the file.
func (c *cli) accountsPut(ctx context.Context, args []string) error {
	fs := c.newFlagSet("accounts")
	out := outputFlag(fs)
	file := fs.String("file", "", "a JSON file with the account's settings (- reads stdin)")
	var (
		rate     = optFloat(fs, "rate", "messages per second the provider allows the account")
		burst    = optFloat(fs, "burst", "token bucket size")
		reserve  = optFloat(fs, "reserve", "messages per second kept for online (non-bulk) sends")
		perCall  = optInt(fs, "max-recipients", "recipients per provider call")
		content  = optInt(fs, "max-content-bytes", "largest rendered message in bytes (default 4096)")
		warmup   = optInt(fs, "warmup-sec", "after this many seconds without a send, ramp the batch rate from 10% to 100% over as many (0: no warm-up)")
		capMax   = optInt(fs, "frequency-cap-max", "at most this many messages to one recipient in --frequency-cap-window-sec, across all jobs")
		capWin   = optInt(fs, "frequency-cap-window-sec", "the frequency cap's window in seconds (1 to 31 days)")
		failures = optInt(fs, "breaker-failures", "open the breaker after this many failures in a row (0: never)")
		fRate    = optFloat(fs, "breaker-rate", "open the breaker at this failure rate (0: never)")
		samples  = optInt(fs, "breaker-min-samples", "sends needed before the failure rate counts")
		cooldown = optInt(fs, "breaker-cooldown", "seconds before a probe may close the breaker")
		prov     = fs.String("provider", "", "the provider API: wecomapi (default), wecom-app, wechat-mp-mass, wechat-mp-template, http")
		lookup   = optBool(fs, "status-lookup", "false: the provider has no status look-up (unanswered items go to review, never resent)")
		pacing   = fs.String("pacing", "", "random: space sends by random gaps around 1/batch rate instead of the token bucket's bursts; token-bucket: back to the bucket")
		minGap   = optInt(fs, "min-gap-ms", "with --pacing random: the least milliseconds between two sends (below 1/batch rate; default 0)")
	)
	pos, err := c.parse(fs, args, 1, "ACCOUNT")
	if err != nil {
		return err
	}
	if err := checkOutput(*out); err != nil {
		return err
	}
	var req apiclient.AccountRequest
	if *file != "" {
		body, err := c.readInput(*file, 1<<20)
		if err != nil {
			return err
		}
		dec := json.NewDecoder(strings.NewReader(string(body)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			return fmt.Errorf("%s is not an account's JSON settings: %w", *file, err)
		}
	} else if rate.v == nil {
		return usagef("give --rate (or --file with the settings)")
	}
	if rate.v != nil {
		req.RatePerSec = *rate.v
	}
	req.Burst = cmpPtr(burst.v, req.Burst)
	req.OnlineReservePerSec = cmpPtr(reserve.v, req.OnlineReservePerSec)
	req.MaxRecipientsPerCall = cmpPtr(perCall.v, req.MaxRecipientsPerCall)
	req.MaxContentBytes = cmpPtr(content.v, req.MaxContentBytes)
	req.WarmupSec = cmpPtr(warmup.v, req.WarmupSec)
	if *prov != "" {
		p := apiclient.Provider(*prov)
		if !p.Valid() {
			return usagef("unknown --provider %q: give wecomapi, wecom-app, wechat-mp-mass, wechat-mp-template or http", *prov)
		}
		req.Provider = &p
	}
	req.StatusLookup = cmpPtr(lookup.v, req.StatusLookup)
	if capMax.v != nil || capWin.v != nil {
		if req.FrequencyCap == nil {
			if capMax.v == nil || capWin.v == nil {
				return usagef("give both --frequency-cap-max and --frequency-cap-window-sec")
			}
			req.FrequencyCap = &apiclient.FrequencyCap{}
		}
		if capMax.v != nil {
			req.FrequencyCap.Max = *capMax.v
		}
		if capWin.v != nil {
			req.FrequencyCap.WindowSec = *capWin.v
		}
	}
	switch *pacing {
	case "":
	case "random":
		req.Pacing = &apiclient.PacingInput{Mode: apiclient.PacingInputModeRandom}
	case "token-bucket":
		if minGap.v != nil {
			return usagef("--min-gap-ms applies to --pacing random only")
		}
		req.Pacing = nil
	default:
		return usagef("--pacing must be random or token-bucket, not %q", *pacing)
	}
	if minGap.v != nil {
		if req.Pacing == nil {
			return usagef("--min-gap-ms needs --pacing random")
		}
		req.Pacing.MinGapMs = minGap.v
	}
	if failures.v != nil || fRate.v != nil || samples.v != nil || cooldown.v != nil {
		if req.Breaker == nil {
			req.Breaker = &apiclient.BreakerConfigInput{}
		}
		b := req.Breaker
		b.ConsecutiveFailures = cmpPtr(failures.v, b.ConsecutiveFailures)
		b.FailureRate = cmpPtr(fRate.v, b.FailureRate)
		b.MinSamples = cmpPtr(samples.v, b.MinSamples)
		b.CooldownSec = cmpPtr(cooldown.v, b.CooldownSec)
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	resp, err := cl.PutAccountWithResponse(ctx, pos[0], req)
	if err := cl.check(resp, err, http.StatusOK); err != nil {
		return err
	}
	return c.show(*out, resp.Body, func(w io.Writer) { printAccount(w, *resp.JSON200) })
}

// cmpPtr returns a unless it is nil, else b.
func cmpPtr[T any](a, b *T) *T {
	if a != nil {
		return a
	}
	return b
}

// optional is a flag that remembers whether it was given.
type optional[T any] struct {
	v      *T
	parse  func(string) (T, error)
	isBool bool
}

// IsBoolFlag lets a boolean optional be given without a value.
func (o *optional[T]) IsBoolFlag() bool { return o.isBool }

func (o *optional[T]) String() string {
	if o.v == nil {
		return ""
	}
	return fmt.Sprint(*o.v)
}

func (o *optional[T]) Set(s string) error {
	v, err := o.parse(s)
	if err != nil {
		return err
	}
	o.v = &v
	return nil
}

func optFloat(fs *flag.FlagSet, name, usage string) *optional[float64] {
	o := &optional[float64]{parse: func(s string) (float64, error) {
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return 0, errors.New("not a number")
		}
		return f, nil
	}}
	fs.Var(o, name, usage)
	return o
}

// optBool is a boolean flag that remembers whether it was given
// (--name, --name=true, --name=false).
func optBool(fs *flag.FlagSet, name, usage string) *optional[bool] {
	o := &optional[bool]{parse: func(s string) (bool, error) {
		b, err := strconv.ParseBool(s)
		if err != nil {
			return false, errors.New("not true or false")
		}
		return b, nil
	}, isBool: true}
	fs.Var(o, name, usage)
	return o
}

func optInt(fs *flag.FlagSet, name, usage string) *optional[int64] {
	o := &optional[int64]{parse: func(s string) (int64, error) {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, errors.New("not a whole number")
		}
		return n, nil
	}}
	fs.Var(o, name, usage)
	return o
}

// readInput reads a file named on the command line ("-": stdin), at most
// limit bytes.
func (c *cli) readInput(name string, limit int64) ([]byte, error) {
	var rd io.Reader = c.stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		rd = f
	}
	body, err := io.ReadAll(io.LimitReader(rd, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	if int64(len(body)) > limit {
		return nil, fmt.Errorf("%s is larger than %d bytes", name, limit)
	}
	return body, nil
}
