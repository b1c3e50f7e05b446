package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/qunfa/qunfa/apiclient"
)

// jobs lists jobs, newest first, a page at a time.
func (c *cli) jobs(ctx context.Context, args []string) error {
	fs := c.newFlagSet("jobs")
	out := outputFlag(fs)
	limit, cursor := pageFlags(fs)
	if _, err := c.parse(fs, args, 0, ""); err != nil {
		return err
	}
	if err := checkOutput(*out); err != nil {
		return err
	}
	if *limit < 0 {
		return usagef("--limit must not be negative")
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	resp, err := cl.ListJobsWithResponse(ctx, &apiclient.ListJobsParams{Cursor: ptrIf(*cursor), Limit: ptrIf(*limit)})
	if err := cl.check(resp, err, http.StatusOK); err != nil {
		return err
	}
	l := resp.JSON200
	return c.show(*out, resp.Body, func(w io.Writer) {
		rows := make([][]any, 0, len(l.Jobs))
		for _, j := range l.Jobs {
			done := j.Counts.Confirmed + j.Counts.Failed + j.Counts.Abandoned
			rows = append(rows, []any{j.Id, orDash(j.Name), statusText(string(j.Status), j.PauseReason),
				fmt.Sprintf("%d/%d", done, j.Total), failuresText(j.Failures), shortTime(&j.CreatedAt)})
		}
		table(w, "ID\tNAME\tSTATUS\tDONE\tFAILURES\tCREATED", rows)
		moreHint(w, l.NextCursor, "qunfa jobs")
	})
}

// items lists a job's items, filtered.
func (c *cli) items(ctx context.Context, args []string) error {
	fs := c.newFlagSet("items")
	out := outputFlag(fs)
	limit, cursor := pageFlags(fs)
	status := fs.String("status", "", "only items in this status (pending, submitted, confirmed, failed, abandoned)")
	category := fs.String("category", "", "only items whose error has this category (e.g. permanent, exhausted, uncertain)")
	ref := fs.String("ref", "", "only items of recipients with this ref")
	review := fs.Bool("review", false, "only items under review (waiting for qunfa resolve)")
	pos, cl, err := c.parseRead(fs, out, args, 1, "JOB")
	if err != nil {
		return err
	}
	params := &apiclient.ListItemsParams{Cursor: ptrIf(*cursor), Limit: ptrIf(*limit), Ref: ptrIf(*ref), Review: ptrIf(*review)}
	if *status != "" {
		params.Status = ptrIf(apiclient.ItemStatus(*status))
	}
	if *category != "" {
		params.Category = ptrIf(apiclient.ErrorCategory(*category))
	}
	resp, err := cl.ListItemsWithResponse(ctx, pos[0], params)
	if err := cl.check(resp, err, http.StatusOK); err != nil {
		return err
	}
	l := resp.JSON200
	return c.show(*out, resp.Body, func(w io.Writer) {
		rows := make([][]any, 0, len(l.Items))
		for _, it := range l.Items {
			st := string(it.Status)
			if it.UnderReview {
				st += " (under review)"
			}
			rows = append(rows, []any{it.Seq, it.Account, it.To, orDash(it.Ref), st, it.Attempts, itemErrorText(it.Error), shortTime(it.FinishedAt)})
		}
		table(w, "SEQ\tACCOUNT\tTO\tREF\tSTATUS\tATTEMPTS\tERROR\tFINISHED", rows)
		moreHint(w, l.NextCursor, "qunfa items "+pos[0])
	})
}

func itemErrorText(e *apiclient.ItemError) string {
	if e == nil {
		return "-"
	}
	s := string(e.Category)
	if e.Code != nil && *e.Code != "" {
		s += " " + *e.Code
	}
	if e.Message != nil && *e.Message != "" {
		s += ": " + *e.Message
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// redrive sends a job's failed items of one category again.
func (c *cli) redrive(ctx context.Context, args []string) error {
	fs := c.newFlagSet("redrive")
	category := fs.String("category", "", "the error category to send again (e.g. exhausted, the dead letters)")
	pos, err := c.parse(fs, args, 1, "JOB")
	if err != nil {
		return err
	}
	if *category == "" {
		return usagef("--category is required")
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	resp, err := cl.RedriveJobWithResponse(ctx, pos[0], apiclient.RedriveRequest{Category: apiclient.ErrorCategory(*category)})
	if err := cl.check(resp, err, http.StatusOK); err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "%s: %d items redriven\n", pos[0], resp.JSON200.Redriven)
	return nil
}

// resolve settles an item under review.
func (c *cli) resolve(ctx context.Context, args []string) error {
	fs := c.newFlagSet("resolve")
	pos, err := c.parse(fs, args, 3, "JOB SEQ delivered|resend")
	if err != nil {
		return err
	}
	seq, err := strconv.ParseInt(pos[1], 10, 64)
	if err != nil || seq < 0 {
		return usagef("SEQ must be an item's number (qunfa items %s --review lists them), not %q", pos[0], pos[1])
	}
	outcome := apiclient.ResolveRequestOutcome(pos[2])
	if outcome != apiclient.ResolveRequestOutcomeDelivered && outcome != apiclient.ResolveRequestOutcomeResend {
		return usagef("the outcome must be delivered or resend, not %q", pos[2])
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	resp, err := cl.ResolveItemWithResponse(ctx, pos[0], seq, apiclient.ResolveRequest{Outcome: outcome})
	if err := cl.check(resp, err, http.StatusOK); err != nil {
		return err
	}
	it := resp.JSON200
	fmt.Fprintf(c.stdout, "%s item %d: %s\n", pos[0], it.Seq, it.Status)
	return nil
}

// limits changes a running job's rate cap or budget.
func (c *cli) limits(ctx context.Context, args []string) error {
	fs := c.newFlagSet("limits")
	rate := fs.Float64("rate", -1, "the job's own rate cap in messages per second (0: none)")
	budget := fs.Int64("budget", -1, "the most items to send (0: no budget)")
	pos, err := c.parse(fs, args, 1, "JOB")
	if err != nil {
		return err
	}
	var req apiclient.LimitsRequest
	if *rate >= 0 {
		req.RatePerSec = rate
	}
	if *budget >= 0 {
		req.Budget = budget
	}
	if req.RatePerSec == nil && req.Budget == nil {
		return usagef("give --rate, --budget or both")
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	resp, err := cl.UpdateJobLimitsWithResponse(ctx, pos[0], req)
	if err := cl.check(resp, err, http.StatusOK); err != nil {
		return err
	}
	j := resp.JSON200
	fmt.Fprintf(c.stdout, "%s %s: rate cap %g/s, budget %d (%d used)\n", j.Id, statusText(string(j.Status), j.PauseReason), j.RatePerSec, j.Budget, j.BudgetUsed)
	return nil
}
