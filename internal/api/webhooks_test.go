package api_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/alert"
	"github.com/qunfa/qunfa/internal/api"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/webhook"
)

const publicHook = "https://93.184.215.14/qunfa-hook"

// publishFinished stores the deliveries of a JobFinished alert of tenant
// through the real webhook publisher.
func publishFinished(t *testing.T, s *stack, tenant, job string) {
	t.Helper()
	pub := &webhook.Publisher{Store: s.store, Clock: s.clock}
	if err := pub.Publish(t.Context(), alert.Event{Type: alert.JobFinished, Tenant: tenant, Time: s.clock.Now(),
		Detail: alert.JobFinishedDetail{JobID: job, Status: "completed"}}); err != nil {
		t.Fatal(err)
	}
}

// webhookConformance drives every webhook route, success and error
// answers, for TestOpenAPIConformance.
func webhookConformance(t *testing.T, c *conformance, s *stack) {
	t.Helper()
	var hook api.Webhook
	c.run(s, specCall{method: "POST", path: "/v1/webhooks", token: tokenA, want: 201,
		body: `{"url": "` + publicHook + `", "events": ["job.finished", "items.outcomes"], "secret": "0123456789abcdef-secret"}`})[0].json(t, &hook)
	publishFinished(t, s, "tenant-a", "job-spec")
	var log api.WebhookDeliveryList
	hookPath := "/v1/webhooks/" + hook.ID
	c.run(s, specCall{method: "GET", path: hookPath + "/deliveries?limit=1", token: tokenA, want: 200})[0].json(t, &log)
	if len(log.Deliveries) != 1 {
		t.Fatalf("delivery log: %+v", log)
	}
	dl := log.Deliveries[0].ID
	c.run(s,
		specCall{method: "POST", path: "/v1/webhooks", token: tokenA, body: `{"url": "http://127.0.0.1:9/x", "events": ["job.nope"], "secret": ""}`, want: 422},
		specCall{method: "POST", path: "/v1/webhooks", token: tokenA, body: `{"url": 1}`, want: 400},
		specCall{method: "POST", path: "/v1/webhooks", token: tokenA, body: `{"url": "` + publicHook + `", "events": ["job.finished"], "secret": "0123456789abcdef-secret"}`, headers: []string{"Content-Type", "text/plain"}, want: 415},
		specCall{method: "GET", path: "/v1/webhooks", token: tokenA, want: 200},
		specCall{method: "GET", path: hookPath + "/deliveries", token: tokenA, want: 200},
		specCall{method: "GET", path: hookPath + "/deliveries?limit=0", token: tokenA, want: 400},
		specCall{method: "GET", path: hookPath + "/deliveries", token: tokenB, want: 404},
		specCall{method: "POST", path: hookPath + "/deliveries/" + dl + "/redeliver", token: tokenA, want: 202},
		specCall{method: "POST", path: hookPath + "/deliveries/nope/redeliver", token: tokenA, want: 404},
		specCall{method: "DELETE", path: hookPath, token: tokenB, want: 404},
		specCall{method: "DELETE", path: hookPath, token: tokenA, want: 204},
		specCall{method: "DELETE", path: hookPath, token: tokenA, want: 404},
	)
}

// resolver answers host names from a table (no DNS in tests).
type resolver map[string]string

func (r resolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	ip, ok := r[host]
	if !ok {
		return nil, errors.New("no such host")
	}
	return []netip.Addr{netip.MustParseAddr(ip)}, nil
}

func TestWebhookRegistration(t *testing.T) {
	s := newStack(t, func(d *api.Deps) {
		d.Resolver = resolver{"hooks.example.com": "93.184.215.14", "intranet.example.com": "10.1.2.3"}
	})
	secret := "whsec-0123456789abcdef"
	r := s.do("POST", "/v1/webhooks", tokenA, `{"url": "https://hooks.example.com/q", "events": ["job.started", "job.finished"], "secret": "`+secret+`"}`)
	if r.status != http.StatusCreated {
		t.Fatalf("POST /v1/webhooks: %d %s", r.status, r.body)
	}
	if strings.Contains(string(r.body), secret) {
		t.Errorf("the answer shows the secret: %s", r.body)
	}
	var hook api.Webhook
	r.json(t, &hook)
	if hook.ID == "" || hook.URL != "https://hooks.example.com/q" || len(hook.Events) != 2 || hook.CreatedAt.IsZero() ||
		r.header.Get("Location") != "/v1/webhooks/"+hook.ID {
		t.Fatalf("created webhook %+v, Location %q", hook, r.header.Get("Location"))
	}
	stored, err := s.store.GetWebhook(t.Context(), "tenant-a", hook.ID)
	if err != nil || stored.Secret != secret {
		t.Fatalf("stored webhook %+v, %v: the secret must be kept to sign", stored, err)
	}
	var list api.WebhookList
	s.do("GET", "/v1/webhooks", tokenA, nil).json(t, &list)
	if len(list.Webhooks) != 1 || list.Webhooks[0].ID != hook.ID {
		t.Fatalf("tenant-a's webhooks: %+v", list)
	}
	s.do("GET", "/v1/webhooks", tokenB, nil).json(t, &list)
	if len(list.Webhooks) != 0 {
		t.Fatalf("tenant-b sees tenant-a's webhooks: %+v", list)
	}

	// Refused registrations name the field and store nothing.
	for name, tc := range map[string]struct{ body, field string }{
		"unknown event":      {`{"url": "` + publicHook + `", "events": ["job.exploded"], "secret": "` + secret + `"}`, "events[0]"},
		"repeated event":     {`{"url": "` + publicHook + `", "events": ["job.paused", "job.paused"], "secret": "` + secret + `"}`, "events[1]"},
		"no events":          {`{"url": "` + publicHook + `", "events": [], "secret": "` + secret + `"}`, "events"},
		"missing secret":     {`{"url": "` + publicHook + `", "events": ["job.paused"]}`, "secret"},
		"short secret":       {`{"url": "` + publicHook + `", "events": ["job.paused"], "secret": "short"}`, "secret"},
		"missing url":        {`{"events": ["job.paused"], "secret": "` + secret + `"}`, "url"},
		"not http":           {`{"url": "ftp://hooks.example.com/x", "events": ["job.paused"], "secret": "` + secret + `"}`, "url"},
		"loopback":           {`{"url": "http://127.0.0.1:8080/x", "events": ["job.paused"], "secret": "` + secret + `"}`, "url"},
		"localhost":          {`{"url": "http://localhost:8080/x", "events": ["job.paused"], "secret": "` + secret + `"}`, "url"},
		"metadata endpoint":  {`{"url": "http://169.254.169.254/latest", "events": ["job.paused"], "secret": "` + secret + `"}`, "url"},
		"resolves privately": {`{"url": "https://intranet.example.com/x", "events": ["job.paused"], "secret": "` + secret + `"}`, "url"},
	} {
		r := s.do("POST", "/v1/webhooks", tokenA, tc.body)
		var p api.Problem
		r.json(t, &p)
		found := false
		for _, e := range p.Errors {
			found = found || e.Field == tc.field
		}
		if r.status != http.StatusUnprocessableEntity || !found {
			t.Errorf("%s: %d %s; want 422 naming %s", name, r.status, r.body, tc.field)
		}
	}
	if hooks, _ := s.store.ListWebhooks(t.Context(), "tenant-a"); len(hooks) != 1 {
		t.Errorf("refused registrations stored webhooks: %d", len(hooks))
	}

	// With private URLs allowed (qunfa dev --allow-private-urls), loopback is fine.
	local := newStack(t, func(d *api.Deps) { d.AllowPrivateURLs = true })
	if r := local.do("POST", "/v1/webhooks", tokenA, `{"url": "http://127.0.0.1:8080/x", "events": ["job.paused"], "secret": "`+secret+`"}`); r.status != http.StatusCreated {
		t.Errorf("loopback with AllowPrivateURLs: %d %s", r.status, r.body)
	}
}

// TestWeComRobotRegistration: a WeCom group robot registers without a
// secret, with operator alerts among its events; its key is never shown
// (masked in the URL, not in logs) and is required; HTTP webhooks cannot
// take operator alerts, robots cannot take per-recipient outcomes.
func TestWeComRobotRegistration(t *testing.T) {
	var logs strings.Builder
	s := newStack(t, func(d *api.Deps) {
		d.Resolver = resolver{"qyapi.weixin.qq.com": "101.226.0.1", "hooks.example.com": "93.184.215.14"}
		d.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	const key = "693a91f6-7aoc-4bc4-97a0-0ec2sifa5aaa"
	robotURL := "https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=" + key
	r := s.do("POST", "/v1/webhooks", tokenA, `{"kind": "wecom_robot", "url": "`+robotURL+`", "events": ["breaker.opened", "counts.mismatch", "job.finished"]}`)
	if r.status != http.StatusCreated {
		t.Fatalf("POST /v1/webhooks (robot): %d %s", r.status, r.body)
	}
	var hook api.Webhook
	r.json(t, &hook)
	if hook.Kind != "wecom_robot" || hook.URL != "https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=%2A%2A%2A%2A5aaa" || len(hook.Events) != 3 {
		t.Fatalf("created robot %+v", hook)
	}
	var list api.WebhookList
	s.do("GET", "/v1/webhooks", tokenA, nil).json(t, &list)
	if len(list.Webhooks) != 1 || list.Webhooks[0].Kind != "wecom_robot" || strings.Contains(list.Webhooks[0].URL, key) {
		t.Fatalf("webhooks list %+v", list)
	}
	if !strings.Contains(logs.String(), "webhook registered") || strings.Contains(logs.String(), key) {
		t.Errorf("the robot's key reached the log:\n%s", logs.String())
	}
	if stored, err := s.store.GetWebhook(t.Context(), "tenant-a", hook.ID); err != nil || stored.URL != robotURL || stored.Kind != store.WebhookWeComRobot {
		t.Fatalf("stored robot %+v, %v: the URL must be kept whole to post", stored, err)
	}
	for name, tc := range map[string]struct{ body, field string }{
		"robot with a secret":     {`{"kind": "wecom_robot", "url": "` + robotURL + `", "events": ["job.finished"], "secret": "whsec-0123456789abcdef"}`, "secret"},
		"robot without key":       {`{"kind": "wecom_robot", "url": "https://qyapi.weixin.qq.com/cgi-bin/webhook/send", "events": ["job.finished"]}`, "url"},
		"robot with outcomes":     {`{"kind": "wecom_robot", "url": "` + robotURL + `", "events": ["items.outcomes"]}`, "events[0]"},
		"http with an alert":      {`{"url": "https://hooks.example.com/q", "events": ["breaker.opened"], "secret": "whsec-0123456789abcdef"}`, "events[0]"},
		"unknown kind":            {`{"kind": "smtp", "url": "https://hooks.example.com/q", "events": ["job.finished"], "secret": "whsec-0123456789abcdef"}`, "kind"},
		"robot on a private host": {`{"kind": "wecom_robot", "url": "http://127.0.0.1:9/cgi-bin/webhook/send?key=k", "events": ["job.finished"]}`, "url"},
	} {
		r := s.do("POST", "/v1/webhooks", tokenA, tc.body)
		var p api.Problem
		r.json(t, &p)
		found := false
		for _, e := range p.Errors {
			found = found || e.Field == tc.field
		}
		if r.status != http.StatusUnprocessableEntity || !found {
			t.Errorf("%s: %d %s; want 422 naming %s", name, r.status, r.body, tc.field)
		}
	}
	if hooks, _ := s.store.ListWebhooks(t.Context(), "tenant-a"); len(hooks) != 1 {
		t.Errorf("refused registrations stored webhooks: %d", len(hooks))
	}
}

func TestWebhookDeliveryLogAndRedeliver(t *testing.T) {
	s := newStack(t)
	var hook api.Webhook
	s.do("POST", "/v1/webhooks", tokenA, `{"url": "`+publicHook+`", "events": ["job.finished"], "secret": "0123456789abcdef"}`).json(t, &hook)
	for _, job := range []string{"j1", "j2", "j3"} {
		publishFinished(t, s, "tenant-a", job)
		s.clock.Advance(time.Millisecond) // delivery ids sort by event time
	}
	publishFinished(t, s, "tenant-b", "jb") // tenant-b has no webhook: nothing
	path := "/v1/webhooks/" + hook.ID + "/deliveries"
	var page api.WebhookDeliveryList
	s.do("GET", path+"?limit=2", tokenA, nil).json(t, &page)
	if len(page.Deliveries) != 2 || page.NextCursor == "" {
		t.Fatalf("first page: %+v", page)
	}
	first := page.Deliveries[0]
	if first.Status != "pending" || first.EventType != "job.finished" || first.NextAttemptAt == nil || first.Attempts != 0 {
		t.Errorf("newest delivery: %+v", first)
	}
	var rest api.WebhookDeliveryList
	s.do("GET", path+"?limit=2&cursor="+page.NextCursor, tokenA, nil).json(t, &rest)
	if len(rest.Deliveries) != 1 || rest.NextCursor != "" || rest.Deliveries[0].ID >= page.Deliveries[1].ID {
		t.Fatalf("second page: %+v after %+v", rest, page)
	}

	// A failed delivery is made due again, with the same event.
	d, err := s.store.GetDelivery(t.Context(), "tenant-a", hook.ID, first.ID)
	if err != nil {
		t.Fatal(err)
	}
	d.Status, d.Attempts, d.LastStatus, d.LastError = "failed", 15, 500, "HTTP 500"
	if _, err := s.store.UpdateDelivery(t.Context(), d); err != nil {
		t.Fatal(err)
	}
	r := s.do("POST", path+"/"+first.ID+"/redeliver", tokenA, nil)
	var again api.WebhookDelivery
	r.json(t, &again)
	if r.status != http.StatusAccepted || again.Status != "pending" || again.Attempts != 0 || again.EventID != first.EventID ||
		again.NextAttemptAt == nil || !again.NextAttemptAt.Equal(s.clock.Now()) {
		t.Fatalf("redeliver: %d %+v", r.status, again)
	}
	if r := s.do("POST", path+"/"+first.ID+"/redeliver", tokenB, nil); r.status != http.StatusNotFound {
		t.Errorf("another tenant redelivered: %d", r.status)
	}
}
