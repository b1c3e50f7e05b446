package handlers_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/qunfa/qunfa/internal/api"
	"github.com/qunfa/qunfa/internal/control"
	"github.com/qunfa/qunfa/internal/handlers"
	"github.com/qunfa/qunfa/internal/submit"
)

// v2Event is an API Gateway HTTP API (payload 2.0) event as API Gateway
// sends it, with placeholders for method, path, query, headers and body.
const v2Event = `{
  "version": "2.0",
  "routeKey": "$default",
  "rawPath": "RAWPATH",
  "rawQueryString": "RAWQUERY",
  "cookies": ["session=abc"],
  "headers": {
    "accept": "application/json",
    "authorization": "AUTH",
    "content-type": "application/json",
    "host": "abc123.execute-api.ap-east-1.amazonaws.com",
    "idempotency-key": "campaign-42",
    "user-agent": "curl/8.5.0",
    "x-amzn-trace-id": "Root=1-65f0a1b2-0123456789abcdef01234567",
    "x-forwarded-for": "203.0.113.7",
    "x-forwarded-port": "443",
    "x-forwarded-proto": "https"
  },
  "requestContext": {
    "accountId": "123456789012",
    "apiId": "abc123",
    "domainName": "abc123.execute-api.ap-east-1.amazonaws.com",
    "domainPrefix": "abc123",
    "http": {
      "method": "METHOD",
      "path": "RAWPATH",
      "protocol": "HTTP/1.1",
      "sourceIp": "203.0.113.7",
      "userAgent": "curl/8.5.0"
    },
    "requestId": "Jm3xSgFKoAMEVpw=",
    "routeKey": "$default",
    "stage": "STAGE",
    "time": "01/Mar/2025:09:00:00 +0000",
    "timeEpoch": 1740819600000
  },
  "body": "BODY",
  "isBase64Encoded": BASE64
}`

func event(t *testing.T, method, stage, path, query, auth, body string, b64 bool) events.APIGatewayV2HTTPRequest {
	t.Helper()
	bodyJSON, _ := json.Marshal(body)
	r := strings.NewReplacer("METHOD", method, "STAGE", stage, "RAWPATH", path, "RAWQUERY", query, "AUTH", auth,
		`"BODY"`, string(bodyJSON), "BASE64", map[bool]string{true: "true", false: "false"}[b64])
	var ev events.APIGatewayV2HTTPRequest
	if err := json.Unmarshal([]byte(r.Replace(v2Event)), &ev); err != nil {
		t.Fatal(err)
	}
	return ev
}

func TestAPIOverAPIGatewayEvents(t *testing.T) {
	ctx := context.Background()
	st, q, clk := embedded(t, "tok", time.Date(2025, 3, 1, 9, 0, 0, 0, time.UTC))
	h := handlers.API(api.New(api.Deps{
		Store:     st,
		Submitter: &submit.Submitter{Store: st, Queue: q, Clock: clk},
		Control:   &control.Controller{Store: st, Queue: q, Clock: clk},
		Clock:     clk,
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
	}))

	body := `{"name": "n", "template": "Hi {{name}}", "recipients": [{"account": "acct-a", "to": "u1", "vars": {"name": "Li"}}]}`
	resp, err := h(ctx, event(t, "POST", "$default", "/v1/jobs", "", "Bearer tok", base64.StdEncoding.EncodeToString([]byte(body)), true))
	if err != nil || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("submit: %v %d %s", err, resp.StatusCode, resp.Body)
	}
	if resp.Headers["Content-Type"] != "application/json" || resp.IsBase64Encoded {
		t.Errorf("headers %v, base64 %v", resp.Headers, resp.IsBase64Encoded)
	}
	var job api.Job
	if err := json.Unmarshal([]byte(resp.Body), &job); err != nil || job.Total != 1 || job.Status != "running" {
		t.Fatalf("job %s: %v", resp.Body, err)
	}
	if resp.Headers["Location"] != "/v1/jobs/"+job.ID {
		t.Errorf("Location = %q", resp.Headers["Location"])
	}

	// The same key and body, plain body, through a named stage: same job.
	resp, _ = h(ctx, event(t, "POST", "prod", "/prod/v1/jobs", "", "Bearer tok", body, false))
	var again api.Job
	if resp.StatusCode != http.StatusAccepted || resp.Headers["Idempotent-Replayed"] != "true" ||
		json.Unmarshal([]byte(resp.Body), &again) != nil || again.ID != job.ID {
		t.Fatalf("repeat: %d %v %s", resp.StatusCode, resp.Headers, resp.Body)
	}

	resp, _ = h(ctx, event(t, "GET", "$default", "/v1/jobs/"+job.ID+"/items", "status=pending&limit=5", "Bearer tok", "", false))
	var items api.ItemList
	if resp.StatusCode != 200 || json.Unmarshal([]byte(resp.Body), &items) != nil || len(items.Items) != 1 || items.Items[0].To != "u1" {
		t.Fatalf("items: %d %s", resp.StatusCode, resp.Body)
	}
	resp, _ = h(ctx, event(t, "GET", "$default", "/v1/jobs/"+job.ID+"/items", "status=bogus", "Bearer tok", "", false))
	if resp.StatusCode != 400 || resp.Headers["Content-Type"] != "application/problem+json" {
		t.Errorf("bad query: %d %v", resp.StatusCode, resp.Headers)
	}

	resp, _ = h(ctx, event(t, "GET", "$default", "/v1/jobs/"+job.ID, "", "Bearer wrong", "", false))
	if resp.StatusCode != 401 || !strings.HasPrefix(resp.Headers["Www-Authenticate"], "Bearer") {
		t.Errorf("wrong token: %d %v", resp.StatusCode, resp.Headers)
	}
	resp, _ = h(ctx, event(t, "DELETE", "$default", "/v1/jobs/"+job.ID, "", "Bearer tok", "", false))
	if resp.StatusCode != 405 || resp.Headers["Allow"] == "" {
		t.Errorf("wrong method: %d %v", resp.StatusCode, resp.Headers)
	}
	resp, _ = h(ctx, event(t, "GET", "$default", "/healthz", "", "", "", false))
	if resp.StatusCode != 200 {
		t.Errorf("healthz: %d %s", resp.StatusCode, resp.Body)
	}
	resp, err = h(ctx, event(t, "POST", "$default", "/v1/jobs", "", "Bearer tok", "not base64!", true))
	if err != nil || resp.StatusCode != 400 || !json.Valid([]byte(resp.Body)) {
		t.Errorf("bad base64: %v %d %s", err, resp.StatusCode, resp.Body)
	}
	resp, err = h(ctx, events.APIGatewayV2HTTPRequest{})
	if err != nil || resp.StatusCode != 400 {
		t.Errorf("empty event: %v %d", err, resp.StatusCode)
	}
}
