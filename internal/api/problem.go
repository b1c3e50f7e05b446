package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/qunfa/qunfa/internal/submit"
)

// Problem is an error answer of the API: an RFC 9457 problem details
// document, served as application/problem+json. Clients get it back from
// Client calls as an error.
type Problem struct {
	// Type identifies the kind of problem (a URN, "urn:qunfa:problem:<kind>").
	Type string `json:"type"`
	// Title is a short, human-readable summary of the kind of problem.
	Title string `json:"title"`
	// Status is the HTTP status code.
	Status int `json:"status"`
	// Detail explains this occurrence.
	Detail string `json:"detail,omitempty"`
	// Errors lists every invalid field of a rejected request.
	Errors []submit.FieldError `json:"errors,omitempty"`

	// accept, when set, is sent as the Accept header: the media types the
	// route would have taken (415 answers).
	accept string
}

// Error formats the problem on one line: title, detail and field errors.
func (p *Problem) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s (%d)", p.Title, p.Status)
	if p.Detail != "" {
		b.WriteString(": " + p.Detail)
	}
	for _, f := range p.Errors {
		b.WriteString("; " + f.Field + ": " + f.Message)
	}
	return b.String()
}

// Problem kinds. The URN names the kind; Title says it in words.
const (
	problemPrefix = "urn:qunfa:problem:"

	kindUnauthorized = "unauthorized"
	kindNotFound     = "not-found"
	kindMethod       = "method-not-allowed"
	kindBadRequest   = "bad-request"
	kindTooLarge     = "body-too-large"
	kindMediaType    = "unsupported-media-type"
	kindValidation   = "validation"
	kindIdempotency  = "idempotency-conflict"
	kindConflict     = "not-allowed"
	kindInternal     = "internal"
	kindForbidden    = "forbidden"
	kindQuota        = "quota-exceeded"
)

var problemTitles = map[string]string{
	kindUnauthorized: "Missing or unknown API token",
	kindNotFound:     "Not found",
	kindMethod:       "Method not allowed",
	kindBadRequest:   "Malformed request",
	kindTooLarge:     "Request body too large",
	kindMediaType:    "Unsupported media type",
	kindValidation:   "Invalid request",
	kindIdempotency:  "Idempotency key already used with a different request",
	kindConflict:     "Not allowed in the job's current status",
	kindInternal:     "Internal error",
	kindForbidden:    "Not allowed for this token",
	kindQuota:        "Over the tenant's quota",
}

func newProblem(status int, kind, detail string, errs ...submit.FieldError) *Problem {
	return &Problem{Type: problemPrefix + kind, Title: problemTitles[kind], Status: status, Detail: detail, Errors: errs}
}

// writeProblem sends p as application/problem+json.
func writeProblem(w http.ResponseWriter, p *Problem) {
	b, err := json.Marshal(p)
	if err != nil { // cannot happen: only strings and ints
		b = []byte(`{"type":"urn:qunfa:problem:internal","title":"Internal error","status":500}`)
		p.Status = http.StatusInternalServerError
	}
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	if p.accept != "" {
		h.Set("Accept", p.accept)
	}
	w.WriteHeader(p.Status)
	_, _ = w.Write(append(b, '\n'))
}
