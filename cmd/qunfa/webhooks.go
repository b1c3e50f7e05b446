package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/qunfa/qunfa/apiclient"
)

func (c *cli) webhooks(ctx context.Context, args []string) error {
	return c.group(ctx, "webhooks", args, map[string]func(context.Context, []string) error{
		"list": c.webhooksList, "create": c.webhooksCreate, "delete": c.webhooksDelete,
		"deliveries": c.webhooksDeliveries, "redeliver": c.webhooksRedeliver,
	}, "list")
}

func (c *cli) webhooksList(ctx context.Context, args []string) error {
	fs := c.newFlagSet("webhooks")
	out := outputFlag(fs)
	_, cl, err := c.parseRead(fs, out, args, 0, "")
	if err != nil {
		return err
	}
	resp, err := cl.ListWebhooksWithResponse(ctx)
	if err := cl.check(resp, err, http.StatusOK); err != nil {
		return err
	}
	return c.show(*out, resp.Body, func(w io.Writer) {
		rows := make([][]any, 0, len(resp.JSON200.Webhooks))
		for _, h := range resp.JSON200.Webhooks {
			rows = append(rows, []any{h.Id, h.Kind, h.Url, eventsText(h.Events), shortTime(&h.CreatedAt)})
		}
		table(w, "ID\tKIND\tURL\tEVENTS\tCREATED", rows)
	})
}

func eventsText(ev []apiclient.WebhookEventType) string {
	s := make([]string, len(ev))
	for i, e := range ev {
		s[i] = string(e)
	}
	return strings.Join(s, ",")
}

// listFlag is a flag that may be given several times, or once with
// comma-separated values.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(s string) error {
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			*l = append(*l, v)
		}
	}
	return nil
}

func (c *cli) webhooksCreate(ctx context.Context, args []string) error {
	fs := c.newFlagSet("webhooks")
	out := outputFlag(fs)
	kind := fs.String("kind", "http", "http (your endpoint gets signed JSON events) or wecom_robot (a WeCom group robot gets markdown messages)")
	url := fs.String("url", "", "the endpoint qunfa POSTs events to (https); for a robot https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=KEY")
	secret := fs.String("secret", "", "the shared secret of the signatures (Qunfa-Signature); none for a robot")
	var events listFlag
	fs.Var(&events, "event", "an event type to receive (repeat, or separate with commas): job.started, job.paused, job.canary_ready, job.finished, job.dead_letters, job.items_need_review, items.outcomes (http only); "+
		"breaker.opened, breaker.closed, counts.mismatch, campaign.skipped (wecom_robot only)")
	if _, err := c.parse(fs, args, 0, ""); err != nil {
		return err
	}
	if err := checkOutput(*out); err != nil {
		return err
	}
	if *url == "" || len(events) == 0 {
		return usagef("give --url and at least one --event")
	}
	if *kind != "http" && *kind != "wecom_robot" {
		return usagef("--kind must be http or wecom_robot")
	}
	k := apiclient.WebhookKind(*kind)
	req := apiclient.WebhookRequest{Kind: &k, Url: *url, Secret: ptrIf(*secret)}
	for _, e := range events {
		req.Events = append(req.Events, apiclient.WebhookEventType(e))
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	resp, err := cl.CreateWebhookWithResponse(ctx, req)
	if err := cl.check(resp, err, http.StatusCreated); err != nil {
		return err
	}
	h := resp.JSON201
	return c.show(*out, resp.Body, func(w io.Writer) {
		fmt.Fprintf(w, "webhook %s (%s): %s (%s)\n", h.Id, h.Kind, h.Url, eventsText(h.Events))
	})
}

func (c *cli) webhooksDelete(ctx context.Context, args []string) error {
	fs := c.newFlagSet("webhooks")
	pos, err := c.parse(fs, args, 1, "WEBHOOK")
	if err != nil {
		return err
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	resp, err := cl.DeleteWebhookWithResponse(ctx, pos[0])
	if err := cl.check(resp, err, http.StatusNoContent); err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "webhook %s deleted\n", pos[0])
	return nil
}

func (c *cli) webhooksDeliveries(ctx context.Context, args []string) error {
	fs := c.newFlagSet("webhooks")
	out := outputFlag(fs)
	limit, cursor := pageFlags(fs)
	pos, cl, err := c.parseRead(fs, out, args, 1, "WEBHOOK")
	if err != nil {
		return err
	}
	resp, err := cl.ListWebhookDeliveriesWithResponse(ctx, pos[0], &apiclient.ListWebhookDeliveriesParams{Cursor: ptrIf(*cursor), Limit: ptrIf(*limit)})
	if err := cl.check(resp, err, http.StatusOK); err != nil {
		return err
	}
	l := resp.JSON200
	return c.show(*out, resp.Body, func(w io.Writer) {
		rows := make([][]any, 0, len(l.Deliveries))
		for _, d := range l.Deliveries {
			last := "-"
			if d.LastStatus != 0 || d.LastError != "" {
				last = strings.TrimSpace(fmt.Sprintf("%d %s", d.LastStatus, d.LastError))
			}
			rows = append(rows, []any{d.Id, d.EventType, d.Status, d.Attempts, last, shortTime(d.NextAttemptAt), shortTime(d.DeliveredAt)})
		}
		table(w, "ID\tEVENT\tSTATUS\tATTEMPTS\tLAST ANSWER\tNEXT ATTEMPT\tDELIVERED", rows)
		moreHint(w, l.NextCursor, "qunfa webhooks deliveries "+pos[0])
	})
}

func (c *cli) webhooksRedeliver(ctx context.Context, args []string) error {
	fs := c.newFlagSet("webhooks")
	pos, err := c.parse(fs, args, 2, "WEBHOOK DELIVERY")
	if err != nil {
		return err
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	resp, err := cl.RedeliverWebhookDeliveryWithResponse(ctx, pos[0], pos[1])
	if err := cl.check(resp, err, http.StatusAccepted); err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "delivery %s queued again (%s)\n", resp.JSON202.Id, resp.JSON202.Status)
	return nil
}

var _ flag.Value = (*listFlag)(nil)
