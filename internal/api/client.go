package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Client calls the HTTP API v1. The qunfa command and tests use it. API
// errors come back as *Problem.
type Client struct {
	// BaseURL is the API's root, e.g. "http://127.0.0.1:8080".
	BaseURL string
	// Token is the bearer token.
	Token string
	// HTTP is the HTTP client (default: one with a 30 s timeout).
	HTTP *http.Client
}

// NewClient returns a client of the API at baseURL.
func NewClient(baseURL, token string) *Client {
	return &Client{BaseURL: strings.TrimRight(baseURL, "/"), Token: token, HTTP: &http.Client{Timeout: 30 * time.Second}}
}

// SubmitJob posts a job body (the JSON of POST /v1/jobs, sent as given).
// created is false when the idempotency key named an existing job (the
// answer carries Idempotent-Replayed: true).
func (c *Client) SubmitJob(ctx context.Context, body []byte, idempotencyKey string) (job Job, created bool, err error) {
	var hdr http.Header
	if idempotencyKey != "" {
		hdr = http.Header{"Idempotency-Key": {idempotencyKey}}
	}
	status, replayed, err := c.submit(ctx, hdr, body, &job)
	return job, status == http.StatusAccepted && !replayed, err
}

// submit posts a job and tells whether the answer was a replay.
func (c *Client) submit(ctx context.Context, hdr http.Header, body []byte, out *Job) (status int, replayed bool, err error) {
	var answer http.Header
	status, err = c.doHeader(ctx, "POST", "/v1/jobs", hdr, body, out, &answer)
	return status, answer.Get(replayedHeader) == "true", err
}

// Job reads a job.
func (c *Client) Job(ctx context.Context, id string) (Job, error) {
	var j Job
	_, err := c.do(ctx, "GET", "/v1/jobs/"+url.PathEscape(id), nil, nil, &j)
	return j, err
}

// Jobs reads a page of jobs, newest first ("" = the first page).
func (c *Client) Jobs(ctx context.Context, cursor string) (JobList, error) {
	var l JobList
	_, err := c.do(ctx, "GET", "/v1/jobs"+query("cursor", cursor), nil, nil, &l)
	return l, err
}

// ItemQuery filters and pages an item listing; empty fields are unset.
type ItemQuery struct {
	Status   string
	Category string
	Ref      string
	Cursor   string
	Limit    int
}

// Items reads a page of a job's items.
func (c *Client) Items(ctx context.Context, jobID string, q ItemQuery) (ItemList, error) {
	var l ItemList
	limit := ""
	if q.Limit > 0 {
		limit = fmt.Sprint(q.Limit)
	}
	path := "/v1/jobs/" + url.PathEscape(jobID) + "/items" +
		query("status", q.Status, "category", q.Category, "ref", q.Ref, "cursor", q.Cursor, "limit", limit)
	_, err := c.do(ctx, "GET", path, nil, nil, &l)
	return l, err
}

// Pause pauses a running job.
func (c *Client) Pause(ctx context.Context, id string) (Job, error) {
	return c.command(ctx, id, "pause")
}

// Resume resumes a paused job.
func (c *Client) Resume(ctx context.Context, id string) (Job, error) {
	return c.command(ctx, id, "resume")
}

// Cancel cancels a job, irreversibly.
func (c *Client) Cancel(ctx context.Context, id string) (Job, error) {
	return c.command(ctx, id, "cancel")
}

func (c *Client) command(ctx context.Context, id, verb string) (Job, error) {
	var j Job
	_, err := c.do(ctx, "POST", "/v1/jobs/"+url.PathEscape(id)+"/"+verb, nil, nil, &j)
	return j, err
}

// UpdateLimits changes a job's rate cap and/or budget.
func (c *Client) UpdateLimits(ctx context.Context, id string, req LimitsRequest) (Job, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return Job{}, err
	}
	var j Job
	_, err = c.do(ctx, "PATCH", "/v1/jobs/"+url.PathEscape(id), nil, body, &j)
	return j, err
}

// PutAccount creates or replaces a sending account.
func (c *Client) PutAccount(ctx context.Context, id string, req AccountRequest) (Account, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return Account{}, err
	}
	var a Account
	_, err = c.do(ctx, "PUT", "/v1/accounts/"+url.PathEscape(id), nil, body, &a)
	return a, err
}

// Account reads a sending account.
func (c *Client) Account(ctx context.Context, id string) (Account, error) {
	var a Account
	_, err := c.do(ctx, "GET", "/v1/accounts/"+url.PathEscape(id), nil, nil, &a)
	return a, err
}

// Accounts lists the sending accounts.
func (c *Client) Accounts(ctx context.Context) (AccountList, error) {
	var l AccountList
	_, err := c.do(ctx, "GET", "/v1/accounts", nil, nil, &l)
	return l, err
}

// query builds "?k=v&…" from the non-empty pairs.
func query(kv ...string) string {
	q := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" {
			q.Set(kv[i], kv[i+1])
		}
	}
	if len(q) == 0 {
		return ""
	}
	return "?" + q.Encode()
}

// maxAnswerBytes bounds an answer the client reads.
const maxAnswerBytes = 64 << 20

// do sends a request and decodes a 2xx answer into out; other answers
// become a *Problem.
func (c *Client) do(ctx context.Context, method, path string, hdr http.Header, body []byte, out any) (int, error) {
	return c.doHeader(ctx, method, path, hdr, body, out, nil)
}

// doHeader is do that also hands back the answer's header when answer is
// not nil.
func (c *Client) doHeader(ctx context.Context, method, path string, hdr http.Header, body []byte, out any, answer *http.Header) (int, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(c.BaseURL, "/")+path, rd)
	if err != nil {
		return 0, fmt.Errorf("qunfa API request: %w", err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json, application/problem+json")
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, fmt.Errorf("cannot reach the qunfa API at %s: %w", c.BaseURL, err)
	}
	defer resp.Body.Close()
	if answer != nil {
		*answer = resp.Header
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	if err != nil {
		return resp.StatusCode, fmt.Errorf("read the answer of %s %s: %w", method, path, err)
	}
	if resp.StatusCode >= 300 {
		var p Problem
		if json.Unmarshal(raw, &p) == nil && p.Title != "" {
			if p.Status == 0 {
				p.Status = resp.StatusCode
			}
			return resp.StatusCode, &p
		}
		detail := strings.TrimSpace(string(raw))
		if len(detail) > 300 {
			detail = detail[:300] + "…"
		}
		return resp.StatusCode, &Problem{Status: resp.StatusCode, Title: http.StatusText(resp.StatusCode), Detail: detail}
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return resp.StatusCode, fmt.Errorf("the answer of %s %s is not the expected JSON: %w", method, path, err)
		}
	}
	return resp.StatusCode, nil
}
