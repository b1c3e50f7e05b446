package campaign

import (
	"context"
	"errors"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/submit"
)

// MaxDelayLimit bounds a campaign's MaxDelaySec (7 days).
const MaxDelayLimit = 7 * 24 * 3600

// validID: what a campaign id may be — it appears in idempotency keys,
// URLs and (hashed) rule names.
var validID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// ValidID reports whether id may name a campaign.
func ValidID(id string) bool { return validID.MatchString(id) }

// Validate checks a campaign before it is stored: id, name, schedule
// (ParseSchedule), time zone (LoadZone), mode and source (an https URL for requery, none for
// snapshot), max delay, and the job request — for a snapshot exactly as
// a job submission is checked (accounts, template variables), for a
// requery everything but the recipients, which must be absent. It returns
// nil, a *submit.ValidationError listing every problem (request fields
// prefixed "request."), or a store failure.
func Validate(ctx context.Context, v JobSubmitter, c store.Campaign) error {
	var errs []submit.FieldError
	add := func(field, msg string) { errs = append(errs, submit.FieldError{Field: field, Message: msg}) }
	if !ValidID(c.ID) {
		add("id", "must be 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit")
	}
	if !utf8.ValidString(c.Name) || len(c.Name) > 1024 {
		add("name", "must be valid UTF-8 of at most 1024 bytes")
	}
	if _, err := ParseSchedule(c.Schedule); err != nil {
		add("schedule", strings.TrimPrefix(err.Error(), ErrSchedule.Error()+": "))
	}
	if _, err := LoadZone(c.Timezone, nil); err != nil {
		add("timezone", "must be an IANA time zone name such as Asia/Shanghai or America/New_York, or empty for the stack's default: "+err.Error())
	}
	if c.MaxDelaySec < 0 || c.MaxDelaySec > MaxDelayLimit {
		add("max_delay_sec", "must be from 0 (never skip) to "+strconv.Itoa(MaxDelayLimit))
	}
	req, err := DecodeRequest(c.Request)
	if err != nil {
		add("request", err.Error())
	}
	switch c.Mode {
	case ModeSnapshot:
		if c.Source != "" {
			add("source", "is only for requery campaigns; a snapshot campaign's recipients are in its request")
		}
	case ModeRequery:
		if msg := checkSource(c.Source); msg != "" {
			add("source", msg)
		}
		if len(req.Recipients) > 0 {
			add("request.recipients", "must be empty for a requery campaign: the recipients come from source at each firing")
		}
	default:
		add("mode", `must be "snapshot" or "requery"`)
	}
	if err == nil && (c.Mode == ModeSnapshot || c.Mode == ModeRequery) {
		p := submit.Params{Tenant: c.Tenant, Request: req}
		if p.Request.Name == "" {
			p.Request.Name = c.Name
		}
		verr := v.Validate(ctx, p)
		var ve *submit.ValidationError
		switch {
		case errors.As(verr, &ve):
			for _, f := range ve.Errors {
				if c.Mode == ModeRequery && f.Field == "recipients" {
					continue // fetched at each firing
				}
				add("request."+f.Field, f.Message)
			}
		case verr != nil:
			return verr
		}
	}
	if len(errs) > 0 {
		return &submit.ValidationError{Errors: errs}
	}
	return nil
}

// checkSource says what is wrong with a requery source URL, or "".
func checkSource(src string) string {
	if src == "" {
		return "is required for a requery campaign (an https URL)"
	}
	u, err := url.Parse(src)
	switch {
	case err != nil || len(src) > 2048:
		return "is not a valid URL of at most 2048 bytes"
	case u.Scheme != "https" || u.Host == "":
		return "must be an https URL"
	case u.User != nil:
		return "must not carry credentials in the URL"
	case u.Fragment != "":
		return "must not have a fragment"
	case u.Query().Has("cursor"):
		return `must not have a "cursor" query parameter: qunfa adds it to page through the recipients`
	}
	return ""
}
