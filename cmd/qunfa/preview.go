package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/qunfa/qunfa/apiclient"
)

// submitOptions are what submit's --preview, --output and --canary flags
// ask for, checked.
type submitOptions struct {
	preview bool
	output  string
	canary  *apiclient.CanaryRequest // nil: no canary
}

// submitOptionsOf checks submit's preview and canary flags together: a
// readable usage error for a combination that makes no sense.
func submitOptionsOf(fs *flag.FlagSet, preview bool, output string, count int64, percent float64, staged bool) (submitOptions, error) {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	o := submitOptions{preview: preview, output: output}
	if set["output"] && !preview {
		return o, usagef("--output goes with --preview (submit prints the job id)")
	}
	if err := checkOutput(output); err != nil {
		return o, err
	}
	switch {
	case set["canary"] && set["canary-percent"]:
		return o, usagef("--canary and --canary-percent: give one of them")
	case set["canary"]:
		if count < 1 {
			return o, usagef("--canary must be at least 1")
		}
		o.canary = &apiclient.CanaryRequest{Count: &count}
	case set["canary-percent"]:
		if percent <= 0 || percent > 100 {
			return o, usagef("--canary-percent must be more than 0 and at most 100")
		}
		if staged {
			return o, usagef("--canary-percent does not go with --recipients (a staged job takes --canary N only)")
		}
		o.canary = &apiclient.CanaryRequest{Percent: &percent}
	}
	return o, nil
}

// withCanary sets the canary of a job body; a body with its own canary and
// a --canary flag is a usage error rather than a silent choice.
func withCanary(body []byte, canary *apiclient.CanaryRequest, name string) ([]byte, error) {
	if canary == nil {
		return body, nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		return nil, fmt.Errorf("%s is not a JSON object", name)
	}
	if _, ok := fields["canary"]; ok {
		return nil, usagef("%s has its own canary: drop --canary/--canary-percent or the file's canary", name)
	}
	c, err := json.Marshal(canary)
	if err != nil {
		return nil, err
	}
	fields["canary"] = c
	return json.Marshal(fields)
}

// printPreview writes a job preview for people: totals, drops, each
// account's share and time, the samples and the largest message.
func printPreview(w io.Writer, p apiclient.JobPreview) {
	d := p.Dropped
	fmt.Fprintf(w, "preview: %d recipients would be sent to\n", p.Total)
	fmt.Fprintf(w, "  dropped: %d duplicate, %d suppressed, %d frequency capped\n", d.Duplicate, d.Suppressed, d.FrequencyCapped)
	fmt.Fprintf(w, "  largest message: %d bytes\n", p.MaxContentBytes)
	if len(p.ByAccount) > 0 {
		fmt.Fprintln(w, "  by account:")
		rows := make([][]any, len(p.ByAccount))
		for i, a := range p.ByAccount {
			rows[i] = []any{"    " + a.Account, a.Recipients, fmt.Sprintf("%g/s", a.BatchRatePerSec), estText(a.EstSeconds, a.BatchRatePerSec)}
		}
		table(w, "    ACCOUNT\tRECIPIENTS\tBATCH RATE\tEST. DURATION", rows)
	}
	if len(p.Samples) > 0 {
		fmt.Fprintf(w, "  samples (first %d):\n", len(p.Samples))
		for _, s := range p.Samples {
			fmt.Fprintf(w, "    %s → %s: %s\n", s.Account, s.To, oneLine(s.Content))
		}
	}
}

// estText is an estimated duration: "-" when the account sends nothing.
func estText(sec int64, rate float64) string {
	if rate <= 0 {
		return "- (rate 0)"
	}
	return (time.Duration(sec) * time.Second).String()
}

// oneLine shows a message on one line: newlines as ⏎, quoted when empty.
func oneLine(s string) string {
	if s == "" {
		return `""`
	}
	return strings.ReplaceAll(s, "\n", "⏎")
}
