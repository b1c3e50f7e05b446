package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/qunfa/qunfa/apiclient"
)

// apiClient is the generated client of the HTTP API with the address it
// was made for (for error messages).
type apiClient struct {
	*apiclient.ClientWithResponses
	base string
}

// client returns an API client from the environment: QUNFA_URL (default
// defaultURL) and QUNFA_API_TOKEN.
func (c *cli) client() (*apiClient, error) {
	base := strings.TrimRight(strings.TrimSpace(c.getenv("QUNFA_URL")), "/")
	if base == "" {
		base = defaultURL
	}
	if !strings.HasPrefix(base, "http://") && !strings.HasPrefix(base, "https://") {
		return nil, fmt.Errorf("QUNFA_URL %q must start with http:// or https://", base)
	}
	token := strings.TrimSpace(c.getenv("QUNFA_API_TOKEN"))
	if token == "" {
		return nil, errors.New("QUNFA_API_TOKEN is not set: export the API token (qunfa dev prints one at start)")
	}
	cl, err := apiclient.NewClientWithResponses(base,
		apiclient.WithHTTPClient(&http.Client{Timeout: 30 * time.Second}),
		apiclient.WithRequestEditorFn(func(_ context.Context, req *http.Request) error {
			req.Header.Set("Authorization", "Bearer "+token)
			req.Header.Set("Accept", "application/json, application/problem+json")
			return nil
		}))
	if err != nil {
		return nil, fmt.Errorf("QUNFA_URL %q: %w", base, err)
	}
	return &apiClient{ClientWithResponses: cl, base: base}, nil
}

// problem is an API error answer (RFC 9457), shown to the user as
// "TITLE (HTTP STATUS): DETAIL" and one line per field error.
type problem struct {
	Status int                    `json:"status"`
	Title  string                 `json:"title"`
	Detail string                 `json:"detail"`
	Errors []apiclient.FieldError `json:"errors"`
}

func (p *problem) Error() string {
	s := fmt.Sprintf("%s (HTTP %d)", p.Title, p.Status)
	if p.Detail != "" {
		s += ": " + p.Detail
	}
	return s
}

// answer is what every generated response has.
type answer interface {
	StatusCode() int
	GetBody() []byte
}

// check turns a call's outcome into an error: unreachable server, or any
// answer but the wanted status as a *problem (the answer's problem
// document, or its status and the start of its body when it is not one).
func (a *apiClient) check(r answer, err error, want ...int) error {
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return err
		}
		return fmt.Errorf("cannot reach the qunfa API at %s: %w", a.base, err)
	}
	code := r.StatusCode()
	for _, w := range want {
		if code == w {
			return nil
		}
	}
	if len(want) == 0 && code >= 200 && code < 300 {
		return nil
	}
	var p problem
	if json.Unmarshal(r.GetBody(), &p) == nil && p.Title != "" {
		if p.Status == 0 {
			p.Status = code
		}
		return &p
	}
	detail := strings.TrimSpace(string(r.GetBody()))
	if len(detail) > 300 {
		detail = detail[:300] + "…"
	}
	title := http.StatusText(code)
	if code < 300 {
		title = "Unexpected answer"
	}
	return &problem{Status: code, Title: title, Detail: detail}
}

// printProblem writes an API problem readably.
func printProblem(w io.Writer, cmd string, p *problem) {
	fmt.Fprintf(w, "qunfa %s: %s\n", cmd, p.Error())
	for _, f := range p.Errors {
		fmt.Fprintf(w, "  %s: %s\n", f.Field, f.Message)
	}
}

// job reads a job.
func (a *apiClient) job(ctx context.Context, id string) (apiclient.Job, error) {
	resp, err := a.GetJobWithResponse(ctx, id)
	if err := a.check(resp, err, http.StatusOK); err != nil {
		return apiclient.Job{}, err
	}
	return *resp.JSON200, nil
}
