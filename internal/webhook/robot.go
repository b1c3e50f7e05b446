package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/qunfa/qunfa/internal/store"
)

// Operator event types: alerts for the people who run campaigns, which a
// WeCom group robot may subscribe to (HTTP webhooks get job events only).
const (
	BreakerOpened   EventType = "breaker.opened"
	BreakerClosed   EventType = "breaker.closed"
	CountsMismatch  EventType = "counts.mismatch"
	CampaignSkipped EventType = "campaign.skipped"
)

// RobotEventTypes lists the event types a WeCom group robot may subscribe
// to: the job events and the operator alerts, not the per-recipient
// outcomes (a group is no place for them).
func RobotEventTypes() []EventType {
	return []EventType{JobStarted, JobPaused, JobCanaryReady, JobFinished, JobDeadLetters, JobItemsNeedReview,
		BreakerOpened, BreakerClosed, CountsMismatch, CampaignSkipped}
}

// ValidFor reports whether a webhook of kind may subscribe to t.
func (t EventType) ValidFor(kind store.WebhookKind) bool {
	list := EventTypes()
	if kind == store.WebhookWeComRobot {
		list = RobotEventTypes()
	}
	for _, v := range list {
		if t == v {
			return true
		}
	}
	return false
}

// Limits of a WeCom group robot.
const (
	// RobotMaxContent is the most bytes of a markdown message's content.
	RobotMaxContent = 4096
	// RobotPerMinute is the most messages a robot takes a minute.
	RobotPerMinute = 20
)

// robotTitles are the message headings, by event type.
var robotTitles = map[EventType]string{
	JobStarted: "Job started", JobPaused: "Job paused", JobCanaryReady: "Canary ready for approval",
	JobFinished: "Job finished", JobDeadLetters: "Dead letters", JobItemsNeedReview: "Items need review",
	BreakerOpened: "Breaker opened", BreakerClosed: "Breaker closed", CountsMismatch: "Counts do not add up",
	CampaignSkipped: "Campaign firing skipped",
}

// robotWarnings are the event types shown in the warning colour.
var robotWarnings = map[EventType]bool{
	JobPaused: true, JobDeadLetters: true, JobItemsNeedReview: true, BreakerOpened: true, CountsMismatch: true, CampaignSkipped: true,
}

// robotMessage is the body a WeCom group robot takes.
type robotMessage struct {
	MsgType  string `json:"msgtype"`
	Markdown struct {
		Content string `json:"content"`
	} `json:"markdown"`
}

// RobotMarkdown renders an event as a robot's markdown: a heading, then
// the event's data one field a line, then its id and time. It is at most
// RobotMaxContent bytes (cut at a character, with "…").
func RobotMarkdown(ev Event) string {
	var b strings.Builder
	title := robotTitles[ev.Type]
	if title == "" {
		title = string(ev.Type)
	}
	color := "info"
	if robotWarnings[ev.Type] {
		color = "warning"
	}
	fmt.Fprintf(&b, "**qunfa: <font color=\"%s\">%s</font>**", color, title)
	var fields map[string]json.RawMessage
	_ = json.Unmarshal(ev.Data, &fields)
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := fields[k]
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			var compact bytes.Buffer
			if json.Compact(&compact, v) == nil {
				s = compact.String()
			} else {
				s = string(v)
			}
		}
		if s == "" || s == "null" || s == "{}" {
			continue
		}
		fmt.Fprintf(&b, "\n> %s: %s", k, strings.ReplaceAll(s, "\n", " "))
	}
	fmt.Fprintf(&b, "\n<font color=\"comment\">%s · %s</font>", ev.CreatedAt.UTC().Format(time.RFC3339), ev.ID)
	return truncate(b.String(), RobotMaxContent)
}

// truncate cuts s to at most n bytes at a character boundary, ending in
// "…" when cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const ell = "…"
	cut := n - len(ell)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + ell
}

// robotBody is the delivery body of a robot message with content.
func robotBody(content string) ([]byte, error) {
	var m robotMessage
	m.MsgType = "markdown"
	m.Markdown.Content = content
	return json.Marshal(m)
}

// robotContent reads the content back from a robot delivery's body.
func robotContent(body []byte) (string, error) {
	var m robotMessage
	if err := json.Unmarshal(body, &m); err != nil || m.MsgType != "markdown" {
		return "", fmt.Errorf("not a robot markdown message: %v", err)
	}
	return m.Markdown.Content, nil
}

// robotAnswer checks a robot's answer: HTTP 2xx and errcode 0 in the body
// ({"errcode":0,"errmsg":"ok"}); 45009 is its rate limit.
func robotAnswer(a Answer) error {
	if a.Status < 200 || a.Status >= 300 {
		return fmt.Errorf("HTTP %d", a.Status)
	}
	var r struct {
		ErrCode *int   `json:"errcode"`
		ErrMsg  string `json:"errmsg"`
	}
	if err := json.Unmarshal(a.Body, &r); err != nil || r.ErrCode == nil {
		return errors.New("the robot's answer has no errcode")
	}
	if *r.ErrCode != 0 {
		return fmt.Errorf("errcode %d: %s", *r.ErrCode, truncate(r.ErrMsg, 200))
	}
	return nil
}

// robotPostsSince counts the messages posted to a robot since t: the
// distinct attempt times of its latest deliveries (a coalesced message
// marks all its deliveries with one time), and the earliest of them.
func (d *Deliverer) robotPostsSince(ctx context.Context, hook store.Webhook, t time.Time) (int, time.Time, error) {
	recent, err := d.Store.ListDeliveries(ctx, store.ListDeliveriesParams{Tenant: hook.Tenant, WebhookID: hook.ID, Limit: 3 * RobotPerMinute})
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("recent deliveries of robot %s: %w", hook.ID, err)
	}
	seen := map[int64]bool{}
	var first time.Time
	for _, dl := range recent {
		if dl.LastAttemptAt.IsZero() || !dl.LastAttemptAt.After(t) || seen[dl.LastAttemptAt.UnixNano()] {
			continue
		}
		seen[dl.LastAttemptAt.UnixNano()] = true
		if first.IsZero() || dl.LastAttemptAt.Before(first) {
			first = dl.LastAttemptAt
		}
	}
	return len(seen), first, nil
}

// robot delivers the due deliveries of a WeCom group robot: several at
// once in one markdown message (up to RobotMaxContent bytes), at most
// RobotPerMinute messages a minute; the rest wait for the next minute.
// A failed message is retried with backoff, its deliveries together, and
// the later ones wait behind it, as for any webhook.
func (d *Deliverer) robot(ctx context.Context, hook store.Webhook, ds []store.Delivery) (RunResult, error) {
	var res RunResult
	now := d.Clock.Now()
	posted, first, err := d.robotPostsSince(ctx, hook, now.Add(-time.Minute))
	if err != nil {
		return res, err
	}
	// Group the deliveries into messages, in order.
	var groups [][]store.Delivery
	var contents []string
	for _, dl := range ds {
		c, err := robotContent(dl.Body)
		if err != nil {
			c = truncate(string(dl.Body), RobotMaxContent) // never expected: bodies are made by Deliver
		}
		if n := len(groups); n > 0 && len(contents[n-1])+2+len(c) <= RobotMaxContent {
			groups[n-1] = append(groups[n-1], dl)
			contents[n-1] += "\n\n" + c
			continue
		}
		groups = append(groups, []store.Delivery{dl})
		contents = append(contents, c)
	}
	for i, group := range groups {
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		if posted >= RobotPerMinute {
			// Over the robot's rate: the rest wait until the oldest
			// message of the minute is a minute old (not an attempt).
			until := first.Add(time.Minute)
			for _, g := range groups[i:] {
				for _, dl := range g {
					if dl.NextAttemptAt.Before(until) {
						dl.NextAttemptAt = until
						if _, err := d.Store.UpdateDelivery(ctx, dl); err != nil && !errors.Is(err, store.ErrConflict) {
							return res, fmt.Errorf("defer delivery %s: %w", dl.ID, err)
						}
					}
				}
			}
			return res, nil
		}
		var claimed []store.Delivery
		for _, dl := range group {
			c, err := d.claim(ctx, dl)
			if errors.Is(err, store.ErrConflict) {
				continue // another worker has it
			}
			if err != nil {
				return res, err
			}
			claimed = append(claimed, c)
		}
		if len(claimed) == 0 {
			continue
		}
		content := contents[i]
		if len(claimed) != len(group) { // some went to another worker: send only ours
			var parts []string
			for _, c := range claimed {
				if s, err := robotContent(c.Body); err == nil {
					parts = append(parts, s)
				}
			}
			content = strings.Join(parts, "\n\n")
		}
		body, err := robotBody(content)
		if err != nil {
			return res, err
		}
		h := http.Header{}
		h.Set("Content-Type", "application/json")
		h.Set("User-Agent", "qunfa-webhooks/1")
		ans, perr := d.Poster.Post(ctx, Request{URL: hook.URL, Header: h, Body: body})
		if perr == nil {
			perr = robotAnswer(ans)
			if perr != nil {
				ans.Status = 0
			}
		}
		posted++
		if first.IsZero() {
			first = d.Clock.Now()
		}
		var failed *store.Delivery
		for _, c := range claimed {
			out, err := d.record(ctx, c, ans.Status, perr)
			if err != nil {
				return res, err
			}
			switch out.Status {
			case store.DeliveryDelivered:
				res.Delivered++
			case store.DeliveryFailed:
				res.Failed++
			default:
				res.Retried++
				failed = &out
			}
		}
		if failed != nil {
			// The later messages wait behind the failed one.
			for _, g := range groups[i+1:] {
				for _, dl := range g {
					if dl.NextAttemptAt.Before(failed.NextAttemptAt) {
						dl.NextAttemptAt = failed.NextAttemptAt
						if _, err := d.Store.UpdateDelivery(ctx, dl); err != nil && !errors.Is(err, store.ErrConflict) {
							return res, fmt.Errorf("defer delivery %s: %w", dl.ID, err)
						}
					}
				}
			}
			return res, nil
		}
	}
	return res, nil
}
