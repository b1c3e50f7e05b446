package e2e

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/api"
)

// fakeRobot is a WeCom group robot on 127.0.0.1: it answers its first
// message HTTP 500, its second errcode 45009 (the robot's rate limit),
// then errcode 0, and keeps the markdown contents it took.
type fakeRobot struct {
	URL string

	mu    sync.Mutex
	posts int
	took  []string
	bad   []string
}

func startRobot(t *testing.T, key string) *fakeRobot {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &fakeRobot{URL: "http://" + ln.Addr().String() + "/cgi-bin/webhook/send?key=" + key}
	srv := &http.Server{Handler: r, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return r
}

func (r *fakeRobot) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.posts++
	switch r.posts {
	case 1:
		w.WriteHeader(http.StatusInternalServerError)
		return
	case 2:
		_, _ = w.Write([]byte(`{"errcode":45009,"errmsg":"api freq out of limit"}`))
		return
	}
	var m struct {
		MsgType  string `json:"msgtype"`
		Markdown struct {
			Content string `json:"content"`
		} `json:"markdown"`
	}
	if err := json.Unmarshal(body, &m); err != nil || m.MsgType != "markdown" || m.Markdown.Content == "" || len(m.Markdown.Content) > 4096 {
		r.bad = append(r.bad, string(body))
		_, _ = w.Write([]byte(`{"errcode":40008,"errmsg":"invalid message type"}`))
		return
	}
	r.took = append(r.took, m.Markdown.Content)
	_, _ = w.Write([]byte(`{"errcode":0,"errmsg":"ok"}`))
}

func (r *fakeRobot) messages() (int, []string, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.posts, append([]string(nil), r.took...), append([]string(nil), r.bad...)
}

// TestWeComRobotGetsBreakerAlert registers a WeCom group robot on
// 127.0.0.1 (qunfa dev --allow-private-urls) for breaker.opened and
// job.started, runs a job on an account whose credential the provider
// refuses, and checks that both alerts arrived as markdown, each exactly
// once, after the robot refused the first two tries; the robot's key is
// never in the log nor in an answer.
func TestWeComRobotGetsBreakerAlert(t *testing.T) {
	t.Parallel()
	const key = "e2e-robot-key-5f1c9a"
	robot := startRobot(t, key)
	m := startMock(t)
	d := startDev(t, m, devOptions{Extra: []string{"--allow-private-urls", "--webhook-retry-base", "200ms"}})

	var hook api.Webhook
	r := d.call("POST", "/v1/webhooks", nil, mustJSON(t, map[string]any{
		"kind": "wecom_robot", "url": robot.URL, "events": []string{"breaker.opened", "job.started"},
	}))
	d.decode(r, http.StatusCreated, &hook)
	if hook.Kind != "wecom_robot" || strings.Contains(hook.URL, key) {
		t.Fatalf("registered robot %+v: kind or masked key wrong", hook)
	}

	const acct = "robot-down"
	m.setAccount(acct, map[string]any{"rate_per_sec": 20, "burst": 5, "errors": []map[string]any{{"errcode": 40001, "ratio": 1}}})
	d.putAccount(acct, map[string]any{"rate_per_sec": 20, "burst": 5, "online_reserve_per_sec": 0, "max_recipients_per_call": 1,
		"breaker": map[string]any{"consecutive_failures": 3, "failure_rate": 0, "min_samples": 0, "cooldown_sec": 600}})
	job := d.submit("robot-1", jobRequest{Name: "robot alerts", Template: testTemplate, Recipients: recipientsFor(acct, 5)})

	count := func(took []string, what string) int {
		n := 0
		for _, c := range took {
			n += strings.Count(c, what)
		}
		return n
	}
	arrived := poll(30*time.Second, 50*time.Millisecond, func() bool {
		_, took, _ := robot.messages()
		return count(took, "Breaker opened") >= 1 && count(took, "Job started") >= 1
	})
	posts, took, bad := robot.messages()
	if !arrived {
		t.Fatalf("the alerts did not arrive: %d posts, took %q, bad %q", posts, took, bad)
	}
	// Give a duplicate time to show up.
	time.Sleep(2 * time.Second)
	posts, took, bad = robot.messages()
	if len(bad) > 0 {
		t.Errorf("the robot got messages that are not markdown: %q", bad)
	}
	if posts < 3 {
		t.Errorf("%d posts: the robot refused the first two, so at least 3 were needed", posts)
	}
	if n := count(took, "Breaker opened"); n != 1 {
		t.Errorf("breaker.opened arrived %d times, want exactly once: %q", n, took)
	}
	if n := count(took, "Job started"); n != 1 {
		t.Errorf("job.started arrived %d times, want exactly once: %q", n, took)
	}
	all := strings.Join(took, "\n")
	for _, want := range []string{"> account: " + acct, "> job_id: " + job.ID, "credential"} {
		if !strings.Contains(all, want) {
			t.Errorf("the messages lack %q:\n%s", want, all)
		}
	}
	// The delivery log shows both delivered, after the refused tries.
	var log api.WebhookDeliveryList
	d.decode(d.call("GET", "/v1/webhooks/"+hook.ID+"/deliveries", nil, nil), http.StatusOK, &log)
	if len(log.Deliveries) != 2 {
		t.Fatalf("delivery log %+v, want 2 deliveries", log)
	}
	for _, dl := range log.Deliveries {
		if dl.Status != "delivered" {
			t.Errorf("delivery %s (%s): %s", dl.ID, dl.EventType, dl.Status)
		}
	}
	logText, err := os.ReadFile(d.stderr)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(logText), key) {
		t.Errorf("the robot's key is in qunfa dev's log")
	}
}
