package webhook_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/qunfa/qunfa/internal/alert"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/webhook"
)

// robotEndpoint is a fake WeCom group robot: it answers each message with
// the next scripted errcode (-1: HTTP 500), then 0, and keeps the
// messages it took.
type robotEndpoint struct {
	mu     sync.Mutex
	script []int
	posts  int
	took   []string
}

func (e *robotEndpoint) Post(_ context.Context, r webhook.Request) (webhook.Answer, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.posts++
	code := 0
	if len(e.script) > 0 {
		code, e.script = e.script[0], e.script[1:]
	}
	if code < 0 {
		return webhook.Answer{Status: 500}, nil
	}
	if code == 0 {
		var m struct {
			MsgType  string `json:"msgtype"`
			Markdown struct {
				Content string `json:"content"`
			} `json:"markdown"`
		}
		if err := json.Unmarshal(r.Body, &m); err != nil || m.MsgType != "markdown" || r.Header.Get(webhook.SignatureHeader) != "" {
			return webhook.Answer{Status: 200, Body: []byte(`{"errcode":40008,"errmsg":"invalid message type"}`)}, nil
		}
		e.took = append(e.took, m.Markdown.Content)
	}
	return webhook.Answer{Status: 200, Body: fmt.Appendf(nil, `{"errcode":%d,"errmsg":"scripted"}`, code)}, nil
}

func newRobotFixture(t *testing.T, events []string, script ...int) (*fixture, *robotEndpoint) {
	t.Helper()
	f := newFixture(t)
	robot := &robotEndpoint{script: script}
	f.del.Poster = robot
	if err := f.st.CreateWebhook(t.Context(), store.Webhook{Tenant: "t1", ID: "wh_robot", Kind: store.WebhookWeComRobot,
		URL: "https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=robot-key", Events: events, CreatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	return f, robot
}

func robotLog(t *testing.T, f *fixture) []store.Delivery {
	t.Helper()
	ds, err := f.st.ListDeliveries(t.Context(), store.ListDeliveriesParams{Tenant: "t1", WebhookID: "wh_robot", Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

// TestRobotGetsAlertsAsOneMarkdownMessageRetried: the alerts a robot
// subscribes to (an operator alert among them) reach it as markdown, the
// ones due together in one message; a refused message (HTTP 500, then the
// robot's rate-limit errcode) is retried with backoff and taken once.
func TestRobotGetsAlertsAsOneMarkdownMessageRetried(t *testing.T) {
	f, robot := newRobotFixture(t, []string{"breaker.opened", "job.finished"}, -1, 45009)
	ctx := t.Context()
	err := f.pub.Publish(ctx,
		alert.Event{Type: alert.BreakerOpened, Tenant: "t1", Time: t0, Detail: alert.BreakerDetail{Account: "acct-a", Reason: "5 failed sends in a row", Until: t0.Add(time.Minute), Opens: 1}},
		alert.Event{Type: alert.JobStarted, Tenant: "t1", Time: t0, Detail: alert.JobStartedDetail{JobID: "j1", Name: "spring", Total: 3, Shards: 1}},
		alert.Event{Type: alert.JobFinished, Tenant: "t1", Time: t0.Add(time.Second), Detail: alert.JobFinishedDetail{JobID: "j1", Name: "spring", Status: "completed"}},
		alert.Event{Type: alert.BreakerOpened, Tenant: "t2", Time: t0, Detail: alert.BreakerDetail{Account: "acct-b"}})
	if err != nil {
		t.Fatal(err)
	}
	if ds := robotLog(t, f); len(ds) != 2 {
		t.Fatalf("%d deliveries for the robot, want 2 (breaker.opened and job.finished of its tenant)", len(ds))
	}
	for i := range 3 {
		if _, err := f.del.RunDue(ctx); err != nil {
			t.Fatal(err)
		}
		f.clk.Advance(time.Minute)
		if i == 0 && robot.posts != 1 {
			t.Fatalf("first round: %d posts, want 1 (both alerts in one message)", robot.posts)
		}
	}
	if robot.posts != 3 || len(robot.took) != 1 {
		t.Fatalf("%d posts, %d messages taken; want 3 posts (500, 45009, ok) and one message", robot.posts, len(robot.took))
	}
	msg := robot.took[0]
	for _, want := range []string{"Breaker opened", "> account: acct-a", "> reason: 5 failed sends in a row", "Job finished", "> status: completed"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the message lacks %q:\n%s", want, msg)
		}
	}
	if strings.Index(msg, "Breaker opened") > strings.Index(msg, "Job finished") || strings.Contains(msg, "Job started") || strings.Contains(msg, "acct-b") {
		t.Errorf("the message is not the robot's two alerts in order:\n%s", msg)
	}
	for _, d := range robotLog(t, f) {
		if d.Status != store.DeliveryDelivered || d.Attempts != 3 {
			t.Errorf("delivery %s (%s): %s after %d attempts, want delivered after 3", d.ID, d.EventType, d.Status, d.Attempts)
		}
	}
}

// TestRobotMessagesAreBoundedAndRateLimited: a message's content stays
// within the robot's 4,096 bytes, and a robot gets at most 20 messages a
// minute; the rest wait for the next minute, none lost or sent twice.
func TestRobotMessagesAreBoundedAndRateLimited(t *testing.T) {
	f, robot := newRobotFixture(t, []string{"breaker.opened"})
	ctx := t.Context()
	for i := range 25 {
		// Each alert is over half the limit, so no two share a message;
		// the last is over the limit by itself.
		reason := strings.Repeat("原因", 400) // 2,400 bytes
		if i == 24 {
			reason = strings.Repeat("原因", 2000)
		}
		if err := f.pub.Publish(ctx, alert.Event{Type: alert.BreakerOpened, Tenant: "t1", Time: t0.Add(time.Duration(i) * time.Millisecond),
			Detail: alert.BreakerDetail{Account: fmt.Sprintf("acct-%02d", i), Reason: reason}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.del.RunDue(ctx); err != nil {
		t.Fatal(err)
	}
	if robot.posts != webhook.RobotPerMinute {
		t.Fatalf("%d messages in the first minute, want %d", robot.posts, webhook.RobotPerMinute)
	}
	f.clk.Advance(30 * time.Second)
	if _, err := f.del.RunDue(ctx); err != nil {
		t.Fatal(err)
	}
	if robot.posts != webhook.RobotPerMinute {
		t.Fatalf("%d messages within the minute, want still %d", robot.posts, webhook.RobotPerMinute)
	}
	f.clk.Advance(31 * time.Second)
	if _, err := f.del.RunDue(ctx); err != nil {
		t.Fatal(err)
	}
	if robot.posts != 25 || len(robot.took) != 25 {
		t.Fatalf("%d posts, %d taken after the minute; want 25 each", robot.posts, len(robot.took))
	}
	seen := map[string]bool{}
	for _, m := range robot.took {
		if len(m) > webhook.RobotMaxContent || !utf8.ValidString(m) {
			t.Errorf("a message of %d bytes (valid UTF-8: %v), limit %d", len(m), utf8.ValidString(m), webhook.RobotMaxContent)
		}
		i := strings.Index(m, "acct-")
		seen[m[i:i+7]] = true
	}
	if len(seen) != 25 {
		t.Errorf("%d distinct accounts in the messages, want 25", len(seen))
	}
	for _, d := range robotLog(t, f) {
		if d.Status != store.DeliveryDelivered || d.Attempts != 1 {
			t.Errorf("delivery %s: %s after %d attempts, want delivered at the first", d.ID, d.Status, d.Attempts)
		}
	}
}

func TestEventTypesValidFor(t *testing.T) {
	if webhook.BreakerOpened.ValidFor(store.WebhookHTTP) || !webhook.BreakerOpened.ValidFor(store.WebhookWeComRobot) {
		t.Error("breaker.opened must be for robots only")
	}
	if webhook.ItemsOutcomes.ValidFor(store.WebhookWeComRobot) || !webhook.ItemsOutcomes.ValidFor(store.WebhookHTTP) {
		t.Error("items.outcomes must be for HTTP webhooks only")
	}
	if !webhook.JobFinished.ValidFor(store.WebhookHTTP) || !webhook.JobFinished.ValidFor(store.WebhookWeComRobot) {
		t.Error("job.finished must be for both")
	}
}
