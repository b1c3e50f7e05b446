package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"

	"github.com/qunfa/qunfa/apiclient"
)

func (c *cli) campaigns(ctx context.Context, args []string) error {
	return c.group(ctx, "campaigns", args, map[string]func(context.Context, []string) error{
		"list": c.campaignsList, "get": c.campaignsGet, "create": c.campaignsCreate, "delete": c.campaignsDelete,
	}, "list")
}

func (c *cli) campaignsList(ctx context.Context, args []string) error {
	fs := c.newFlagSet("campaigns")
	out := outputFlag(fs)
	_, cl, err := c.parseRead(fs, out, args, 0, "")
	if err != nil {
		return err
	}
	resp, err := cl.ListCampaignsWithResponse(ctx)
	if err := cl.check(resp, err, http.StatusOK); err != nil {
		return err
	}
	return c.show(*out, resp.Body, func(w io.Writer) {
		rows := make([][]any, 0, len(resp.JSON200.Campaigns))
		for _, k := range resp.JSON200.Campaigns {
			rows = append(rows, []any{k.Id, orDash(k.Name), k.Schedule, k.Mode, enabledText(k.Enabled), shortTime(k.NextFireAt), shortTime(k.LastFiredAt)})
		}
		table(w, "ID\tNAME\tSCHEDULE\tMODE\tENABLED\tNEXT FIRING\tLAST FIRING", rows)
	})
}

func enabledText(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func (c *cli) campaignsGet(ctx context.Context, args []string) error {
	fs := c.newFlagSet("campaigns")
	out := outputFlag(fs)
	pos, cl, err := c.parseRead(fs, out, args, 1, "CAMPAIGN")
	if err != nil {
		return err
	}
	resp, err := cl.GetCampaignWithResponse(ctx, pos[0])
	if err := cl.check(resp, err, http.StatusOK); err != nil {
		return err
	}
	return c.show(*out, resp.Body, func(w io.Writer) { printCampaign(w, *resp.JSON200) })
}

func printCampaign(w io.Writer, k apiclient.Campaign) {
	fmt.Fprintf(w, "campaign %s %q\n", k.Id, k.Name)
	zone := k.Timezone
	if zone == "" {
		zone = "the stack's time zone (" + k.EffectiveTimezone + ")"
	}
	fmt.Fprintf(w, "  schedule:  %s in %s (%s), enabled: %s, at most %ds late\n", k.Schedule, zone, k.Mode, enabledText(k.Enabled), k.MaxDelaySec)
	if k.Source != "" {
		fmt.Fprintf(w, "  source:    %s\n", k.Source)
	}
	n := 0
	if k.Request.Recipients != nil {
		n = len(*k.Request.Recipients)
	}
	fmt.Fprintf(w, "  template:  %q, %d recipients in the snapshot\n", k.Request.Template, n)
	fmt.Fprintf(w, "  next:      %s\n", shortTime(k.NextFireAt))
	fmt.Fprintf(w, "  last:      %s\n", shortTime(k.LastFiredAt))
}

// campaignsCreate creates (or, with an id, replaces) a campaign from a
// JSON file: the body of POST /v1/campaigns. --timezone sets the
// campaign's time zone over the file's.
func (c *cli) campaignsCreate(ctx context.Context, args []string) error {
	fs := c.newFlagSet("campaigns")
	out := outputFlag(fs)
	zone := fs.String("timezone", "", "IANA time zone the cron schedule is read in, e.g. Asia/Shanghai (overrides the file's timezone; \"\" for the stack's)")
	pos, err := c.parse(fs, args, 1, "FILE (the campaign's JSON, or - for stdin)")
	if err != nil {
		return err
	}
	zoneSet := false
	fs.Visit(func(f *flag.Flag) { zoneSet = zoneSet || f.Name == "timezone" })
	if err := checkOutput(*out); err != nil {
		return err
	}
	body, err := c.readInput(pos[0], maxSubmitBytes)
	if err != nil {
		return err
	}
	if !json.Valid(body) {
		return fmt.Errorf("%s is not valid JSON", pos[0])
	}
	if zoneSet {
		if body, err = withField(body, "timezone", *zone); err != nil {
			return fmt.Errorf("%s: %w", pos[0], err)
		}
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	resp, err := cl.PutCampaignWithBodyWithResponse(ctx, "application/json", bytes.NewReader(body))
	if err := cl.check(resp, err, http.StatusOK, http.StatusCreated); err != nil {
		return err
	}
	k := resp.JSON201
	if k == nil {
		k = resp.JSON200
	}
	return c.show(*out, resp.Body, func(w io.Writer) { printCampaign(w, *k) })
}

// withField sets one top-level field of a JSON object.
func withField(body []byte, name string, value any) ([]byte, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(body, &obj); err != nil || obj == nil {
		return nil, fmt.Errorf("want a JSON object")
	}
	v, err := json.Marshal(value)
	if err != nil {
		return nil, err
	}
	obj[name] = v
	return json.Marshal(obj)
}

func (c *cli) campaignsDelete(ctx context.Context, args []string) error {
	fs := c.newFlagSet("campaigns")
	pos, err := c.parse(fs, args, 1, "CAMPAIGN")
	if err != nil {
		return err
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	resp, err := cl.DeleteCampaignWithResponse(ctx, pos[0])
	if err := cl.check(resp, err, http.StatusNoContent); err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "campaign %s deleted\n", pos[0])
	return nil
}
