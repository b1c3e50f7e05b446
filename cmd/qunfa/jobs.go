package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/qunfa/qunfa/apiclient"
	"github.com/qunfa/qunfa/internal/api"
	"github.com/qunfa/qunfa/internal/store"
)

// maxSubmitBytes bounds a job file read by submit (the API's own limit is
// the same by default).
const maxSubmitBytes = api.DefaultMaxBodyBytes

func (c *cli) submit(ctx context.Context, args []string) error {
	fs := c.newFlagSet("submit")
	key := fs.String("idempotency-key", "", "idempotency key: submitting again with the same key and file gives the same job")
	fs.StringVar(key, "key", "", "the same as --idempotency-key (with --recipients: run again with it to resume an interrupted upload)")
	name := fs.String("name", "", "with --recipients: the job's name")
	template := fs.String("template", "", "with --recipients: the message, with {{var}} placeholders")
	recipients := fs.String("recipients", "", "a .csv or .ndjson file of recipients of any size, uploaded in parts (a staged job)")
	partSize := fs.Int("part-size", defaultPartBytes, "with --recipients: the most bytes per part")
	preview := fs.Bool("preview", false, "show what the job would send (totals, drops, per account, samples) and send nothing; with --recipients the parts are uploaded and the job stays staging")
	out := fs.String("output", "table", "with --preview: table or json (the API's answer)")
	canary := fs.Int64("canary", 0, "send this many items first, then pause until qunfa resume (approve) or qunfa cancel")
	canaryPct := fs.Float64("canary-percent", 0, "the same as --canary, as a percentage of the recipients (not with --recipients)")
	want := 1
	for _, a := range args {
		if a == "--recipients" || a == "-recipients" || strings.HasPrefix(a, "--recipients=") || strings.HasPrefix(a, "-recipients=") {
			want = 0
		}
	}
	pos, err := c.parse(fs, args, want, "FILE (the job's JSON body, or - for stdin)")
	if err != nil {
		return err
	}
	opts, err := submitOptionsOf(fs, *preview, *out, *canary, *canaryPct, *recipients != "")
	if err != nil {
		return err
	}
	if *recipients != "" {
		return c.submitStaged(ctx, stagedUpload{name: *name, template: *template, path: *recipients, key: *key, partBytes: *partSize, opts: opts})
	}
	if want == 0 {
		return usagef("--recipients needs a file")
	}
	if *name != "" || *template != "" {
		return usagef("--name and --template go with --recipients; a job FILE holds its own")
	}
	var rd io.Reader = c.stdin
	if pos[0] != "-" {
		f, err := os.Open(pos[0])
		if err != nil {
			return err
		}
		defer f.Close()
		rd = f
	}
	body, err := io.ReadAll(io.LimitReader(rd, maxSubmitBytes+1))
	if err != nil {
		return fmt.Errorf("read %s: %w", pos[0], err)
	}
	if len(body) > maxSubmitBytes {
		return fmt.Errorf("%s is larger than %d bytes", pos[0], maxSubmitBytes)
	}
	if !json.Valid(body) {
		return fmt.Errorf("%s is not valid JSON", pos[0])
	}
	if body, err = withCanary(body, opts.canary, pos[0]); err != nil {
		return err
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	if opts.preview {
		resp, err := cl.PreviewJobWithBodyWithResponse(ctx, "application/json", bytes.NewReader(body))
		if err := cl.check(resp, err, http.StatusOK); err != nil {
			return err
		}
		return c.show(opts.output, resp.Body, func(w io.Writer) {
			printPreview(w, *resp.JSON200)
			fmt.Fprintln(w, "nothing was sent: submit without --preview to send")
		})
	}
	params := &apiclient.SubmitJobParams{}
	if *key != "" {
		params.IdempotencyKey = key
	}
	resp, err := cl.SubmitJobWithBodyWithResponse(ctx, params, "application/json", bytes.NewReader(body))
	if err := cl.check(resp, err, http.StatusAccepted); err != nil {
		return err
	}
	job := resp.JSON202
	note := ""
	if resp.HTTPResponse.Header.Get("Idempotent-Replayed") == "true" {
		note = " (already submitted with this idempotency key)"
	}
	fmt.Fprintf(c.stdout, "%s %s%s\n", job.Id, job.Status, note)
	return nil
}

func (c *cli) status(ctx context.Context, args []string) error {
	fs := c.newFlagSet("status")
	out := outputFlag(fs)
	raw := fs.Bool("json", false, "the same as --output json")
	pos, err := c.parse(fs, args, 1, "JOB")
	if err != nil {
		return err
	}
	if *raw {
		*out = "json"
	}
	if err := checkOutput(*out); err != nil {
		return err
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	resp, err := cl.GetJobWithResponse(ctx, pos[0])
	if err := cl.check(resp, err, http.StatusOK); err != nil {
		return err
	}
	return c.show(*out, resp.Body, func(w io.Writer) { printJob(w, *resp.JSON200) })
}

func (c *cli) jobCommand(ctx context.Context, verb string, args []string) error {
	fs := c.newFlagSet(verb)
	pos, err := c.parse(fs, args, 1, "JOB")
	if err != nil {
		return err
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	var job *apiclient.Job
	switch verb {
	case "pause":
		resp, err := cl.PauseJobWithResponse(ctx, pos[0])
		if err := cl.check(resp, err, http.StatusOK); err != nil {
			return err
		}
		job = resp.JSON200
	case "resume":
		// Resuming a job that waits for its canary approves the canary:
		// say so, with the results the operator approved.
		before, err := cl.GetJobWithResponse(ctx, pos[0])
		if err := cl.check(before, err, http.StatusOK); err != nil {
			return err
		}
		resp, err := cl.ResumeJobWithResponse(ctx, pos[0])
		if err := cl.check(resp, err, http.StatusOK); err != nil {
			return err
		}
		job = resp.JSON200
		if waitingForCanary(*before.JSON200) && job.Canary != nil && job.Canary.Approved {
			fmt.Fprintf(c.stdout, "%s %s; canary approved (%d confirmed, %d failed)\n", job.Id,
				statusText(string(job.Status), job.PauseReason), job.Canary.Confirmed, job.Canary.Failed)
			return nil
		}
	default:
		resp, err := cl.CancelJobWithResponse(ctx, pos[0])
		if err := cl.check(resp, err, http.StatusOK); err != nil {
			return err
		}
		job = resp.JSON200
	}
	fmt.Fprintf(c.stdout, "%s %s\n", job.Id, statusText(string(job.Status), job.PauseReason))
	return nil
}

func statusText(status string, reason *apiclient.PauseReason) string {
	if reason != nil && *reason != "" {
		return status + " (" + string(*reason) + ")"
	}
	return status
}

func timeText(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// failuresText lists failures by category, largest first: "permanent 3,
// exhausted 1", or "none".
func failuresText(f map[string]int64) string {
	type kv struct {
		k string
		n int64
	}
	var l []kv
	for k, n := range f {
		if n != 0 {
			l = append(l, kv{k, n})
		}
	}
	if len(l) == 0 {
		return "none"
	}
	sort.Slice(l, func(i, j int) bool { return l[i].n > l[j].n || l[i].n == l[j].n && l[i].k < l[j].k })
	parts := make([]string, len(l))
	for i, e := range l {
		parts[i] = fmt.Sprintf("%s %d", e.k, e.n)
	}
	return strings.Join(parts, ", ")
}

func countsText(j apiclient.Job) string {
	c := j.Counts
	return fmt.Sprintf("pending %d, submitted %d, confirmed %d, failed %d, abandoned %d",
		c.Pending, c.Submitted, c.Confirmed, c.Failed, c.Abandoned)
}

// shardDone is how many of a shard's items are final.
func shardDone(s apiclient.Shard) int64 {
	return s.Counts.Confirmed + s.Counts.Failed + s.Counts.Abandoned
}

// printJob writes a human summary of a job.
func printJob(w io.Writer, j apiclient.Job) {
	name := ""
	if j.Name != "" {
		name = fmt.Sprintf(" %q", j.Name)
	}
	fmt.Fprintf(w, "job %s%s: %s\n", j.Id, name, statusText(string(j.Status), j.PauseReason))
	done := j.Counts.Confirmed + j.Counts.Failed + j.Counts.Abandoned
	fmt.Fprintf(w, "  progress:  %d of %d done (%s)\n", done, j.Total, countsText(j))
	fmt.Fprintf(w, "  failures:  %s\n", failuresText(j.Failures))
	if j.Budget > 0 || j.RatePerSec > 0 || j.Suppressed > 0 {
		var parts []string
		if j.Budget > 0 {
			parts = append(parts, fmt.Sprintf("budget %d (%d used)", j.Budget, j.BudgetUsed))
		}
		if j.RatePerSec > 0 {
			parts = append(parts, fmt.Sprintf("rate cap %g/s", j.RatePerSec))
		}
		if j.Suppressed > 0 {
			parts = append(parts, fmt.Sprintf("%d suppressed at submit", j.Suppressed))
		}
		fmt.Fprintf(w, "  limits:    %s\n", strings.Join(parts, ", "))
	}
	if c := canaryText(j); c != "" {
		fmt.Fprintf(w, "  %s\n", c)
	}
	fmt.Fprintf(w, "  created:   %s by %s\n", timeText(&j.CreatedAt), j.CreatedBy)
	fmt.Fprintf(w, "  started:   %s\n", timeText(j.StartedAt))
	fmt.Fprintf(w, "  finished:  %s\n", timeText(j.FinishedAt))
	if len(j.Shards) == 0 {
		return
	}
	fmt.Fprintln(w, "  shards:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "    #\tACCOUNT\tSTATUS\tDONE\tCONFIRMED\tFAILED\tABANDONED\tLAST ADVANCED")
	for _, s := range j.Shards {
		st := statusText(string(s.Status), s.PauseReason)
		if s.SlowFactor > 0 && s.SlowFactor < 1 {
			st += fmt.Sprintf(" slowed ×%.2f", s.SlowFactor)
		}
		fmt.Fprintf(tw, "    %d\t%s\t%s\t%d/%d\t%d\t%d\t%d\t%s\n", s.Index, s.Account, st, shardDone(s), s.Size,
			s.Counts.Confirmed, s.Counts.Failed, s.Counts.Abandoned, timeText(&s.LastAdvancedAt))
	}
	_ = tw.Flush()
}

// waitingForCanary reports whether the job is paused until its canary is
// approved.
func waitingForCanary(j apiclient.Job) bool {
	return j.Status == apiclient.JobStatusPaused && j.PauseReason != nil && *j.PauseReason == apiclient.Canary
}

// canaryText tells where a job's canary stands and, while the job waits
// for approval, what to run; "" when the job has no canary.
func canaryText(j apiclient.Job) string {
	c := j.Canary
	if c == nil {
		return ""
	}
	results := fmt.Sprintf("%d confirmed, %d failed", c.Confirmed, c.Failed)
	switch {
	case c.Approved:
		return fmt.Sprintf("canary: approved (%s)", results)
	case waitingForCanary(j):
		return fmt.Sprintf("canary: %d done of %d — %s; waiting for approval: qunfa resume %s (approve) or qunfa cancel %s",
			c.Confirmed+c.Failed, c.Count, results, j.Id, j.Id)
	case store.JobFinal(store.JobStatus(j.Status)):
		return fmt.Sprintf("canary: %d done of %d — %s; not approved", c.Confirmed+c.Failed, c.Count, results)
	}
	return fmt.Sprintf("canary: %d done of %d — %s; sending", c.Confirmed+c.Failed, c.Count, results)
}
