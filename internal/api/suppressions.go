package api

import (
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/submit"
)

// Suppression is one recipient a tenant never sends to.
type Suppression struct {
	Account   string    `json:"account"`
	To        string    `json:"to"`
	Reason    string    `json:"reason"`
	CreatedAt time.Time `json:"created_at"`
}

// SuppressionRequest is the optional body of PUT /v1/suppressions/{account}/{to}.
type SuppressionRequest struct {
	Reason string `json:"reason"`
}

// SuppressionImport is the body of POST /v1/suppressions (bulk import).
type SuppressionImport struct {
	Entries []SuppressionEntry `json:"entries"`
}

// SuppressionEntry is one recipient of a bulk import.
type SuppressionEntry struct {
	Account string `json:"account"`
	To      string `json:"to"`
	Reason  string `json:"reason"`
}

// SuppressionImportResult says how many entries were added.
type SuppressionImportResult struct {
	Added int `json:"added"`
}

// SuppressionList is a page of a tenant's suppression list.
type SuppressionList struct {
	Suppressions []Suppression `json:"suppressions"`
	NextCursor   string        `json:"next_cursor"`
}

// maxSuppressionImport bounds one bulk import.
const maxSuppressionImport = 10000

const maxSuppressionField = 1024

func suppressionView(e store.Suppression) Suppression {
	return Suppression{Account: e.Account, To: e.To, Reason: e.Reason, CreatedAt: e.CreatedAt.UTC()}
}

func checkSuppression(field, account, to, reason string) []submit.FieldError {
	var errs []submit.FieldError
	for _, f := range []struct{ name, v string }{{"account", account}, {"to", to}, {"reason", reason}} {
		switch {
		case f.name != "reason" && f.v == "":
			errs = append(errs, submit.FieldError{Field: field + f.name, Message: "is required"})
		case !utf8.ValidString(f.v):
			errs = append(errs, submit.FieldError{Field: field + f.name, Message: "is not valid UTF-8"})
		case len(f.v) > maxSuppressionField:
			errs = append(errs, submit.FieldError{Field: field + f.name, Message: "is longer than " + strconv.Itoa(maxSuppressionField) + " bytes"})
		}
	}
	return errs
}

func (s *server) putSuppression(w http.ResponseWriter, r *http.Request, tenant string) *Problem {
	account, to := r.PathValue("account"), r.PathValue("to")
	var req SuppressionRequest
	if r.ContentLength != 0 { // the body (a reason) is optional
		body, p := readJSON(w, r, s.MaxBodyBytes)
		if p != nil {
			return p
		}
		if p := decodeStrict(body, &req); p != nil {
			return p
		}
	}
	if errs := checkSuppression("", account, to, req.Reason); len(errs) > 0 {
		return newProblem(http.StatusUnprocessableEntity, kindValidation, "nothing was suppressed", errs...)
	}
	e := store.Suppression{Account: account, To: to, Reason: req.Reason, CreatedAt: s.Clock.Now()}
	if err := s.Store.PutSuppressions(r.Context(), tenant, []store.Suppression{e}); err != nil {
		return s.storeProblem(r, "suppression", err)
	}
	writeJSON(w, http.StatusOK, suppressionView(e))
	return nil
}

func (s *server) deleteSuppression(w http.ResponseWriter, r *http.Request, tenant string) *Problem {
	if err := s.Store.DeleteSuppression(r.Context(), tenant, r.PathValue("account"), r.PathValue("to")); err != nil {
		return s.storeProblem(r, "suppression", err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *server) importSuppressions(w http.ResponseWriter, r *http.Request, tenant string) *Problem {
	body, p := readJSON(w, r, s.MaxBodyBytes)
	if p != nil {
		return p
	}
	var req SuppressionImport
	if p := decodeStrict(body, &req); p != nil {
		return p
	}
	var errs []submit.FieldError
	switch {
	case len(req.Entries) == 0:
		errs = append(errs, submit.FieldError{Field: "entries", Message: "must not be empty"})
	case len(req.Entries) > maxSuppressionImport:
		errs = append(errs, submit.FieldError{Field: "entries", Message: "has more than " + strconv.Itoa(maxSuppressionImport) + " entries"})
	}
	for i, e := range req.Entries {
		if len(errs) >= 100 {
			break
		}
		errs = append(errs, checkSuppression("entries["+strconv.Itoa(i)+"].", e.Account, e.To, e.Reason)...)
	}
	if len(errs) > 0 {
		return newProblem(http.StatusUnprocessableEntity, kindValidation, "nothing was imported", errs...)
	}
	now := s.Clock.Now()
	entries := make([]store.Suppression, len(req.Entries))
	for i, e := range req.Entries {
		entries[i] = store.Suppression{Account: e.Account, To: e.To, Reason: e.Reason, CreatedAt: now}
	}
	for start := 0; start < len(entries); start += store.MaxPutItems {
		if err := s.Store.PutSuppressions(r.Context(), tenant, entries[start:min(start+store.MaxPutItems, len(entries))]); err != nil {
			return s.storeProblem(r, "suppressions", err)
		}
	}
	writeJSON(w, http.StatusOK, SuppressionImportResult{Added: len(entries)})
	return nil
}

func (s *server) listSuppressions(w http.ResponseWriter, r *http.Request, tenant string) *Problem {
	q := r.URL.Query()
	limit, p := pageLimit(q, 100, 1000)
	if p != nil {
		return p
	}
	page, err := s.Store.ListSuppressions(r.Context(), store.ListSuppressionsParams{Tenant: tenant, Cursor: q.Get("cursor"), Limit: limit})
	if err != nil {
		return s.listProblem(r, "suppressions", err)
	}
	out := SuppressionList{Suppressions: make([]Suppression, 0, len(page.Entries)), NextCursor: page.NextCursor}
	for _, e := range page.Entries {
		out.Suppressions = append(out.Suppressions, suppressionView(e))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
