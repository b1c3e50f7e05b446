package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/qunfa/qunfa/internal/submit"
)

// readJSON reads the body of a route that takes JSON: at most limit bytes,
// of a JSON media type (see checkJSONMediaType), one JSON object in valid
// UTF-8. Routes that take other media types (a staged upload's NDJSON or
// CSV) check their own.
func readJSON(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, *Problem) {
	body, p := readBody(w, r, limit)
	if p != nil {
		return nil, p
	}
	if p := checkJSONMediaType(r.Header.Get("Content-Type"), body); p != nil {
		return nil, p
	}
	if !utf8.Valid(body) {
		return nil, newProblem(http.StatusBadRequest, kindBadRequest, "the request body is not valid UTF-8")
	}
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if len(trimmed) == 0 {
		return nil, newProblem(http.StatusBadRequest, kindBadRequest, "the request body is empty; a JSON object is required")
	}
	if trimmed[0] != '{' {
		return nil, newProblem(http.StatusBadRequest, kindBadRequest, "the request body must be a JSON object")
	}
	return body, nil
}

// readBody reads the whole request body, at most limit bytes.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, *Problem) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return nil, newProblem(http.StatusRequestEntityTooLarge, kindTooLarge,
				fmt.Sprintf("the request body is larger than the limit of %d bytes", tooLarge.Limit))
		}
		return nil, newProblem(http.StatusBadRequest, kindBadRequest, "the request body could not be read: "+err.Error())
	}
	return body, nil
}

// jsonMediaType is what a JSON route accepts, for the Accept header of a
// 415 answer.
const jsonMediaType = "application/json"

// checkJSONMediaType refuses with 415 a body whose Content-Type says it is
// not JSON. application/json and any application/*+json are JSON. A
// missing Content-Type is taken as JSON, and so is curl's default for -d,
// application/x-www-form-urlencoded, when the body is a JSON object (a
// real form body is refused); anything else (text/plain, text/csv,
// multipart/form-data, …) is refused.
func checkJSONMediaType(contentType string, body []byte) *Problem {
	if strings.TrimSpace(contentType) == "" {
		return nil
	}
	mt, _, err := mime.ParseMediaType(contentType)
	switch {
	case err != nil:
		return unsupportedMediaType(fmt.Sprintf("the Content-Type %q cannot be parsed; send %s", contentType, jsonMediaType))
	case mt == jsonMediaType, strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json"):
		return nil
	case mt == "application/x-www-form-urlencoded":
		if t := bytes.TrimLeft(body, " \t\r\n"); len(t) > 0 && t[0] == '{' {
			return nil // curl -d without -H: a JSON body under curl's default type
		}
	}
	return unsupportedMediaType(fmt.Sprintf("the Content-Type %s is not supported here; send %s", mt, jsonMediaType))
}

func unsupportedMediaType(detail string) *Problem {
	p := newProblem(http.StatusUnsupportedMediaType, kindMediaType, detail)
	p.accept = jsonMediaType
	return p
}

// decodeStrict decodes one JSON object into v, refusing unknown fields,
// values of the wrong type and trailing data, with a problem that names the
// offending field.
func decodeStrict(body []byte, v any) *Problem {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonProblem(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return newProblem(http.StatusBadRequest, kindBadRequest, "the request body has data after the JSON object")
	}
	return nil
}

func jsonProblem(err error) *Problem {
	var (
		syntax    *json.SyntaxError
		typeErr   *json.UnmarshalTypeError
		detail    = "the request body is not valid JSON"
		fieldErrs []submit.FieldError
	)
	switch {
	case errors.As(err, &syntax):
		detail = fmt.Sprintf("the request body is not valid JSON: %v (at byte %d)", syntax, syntax.Offset)
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
		detail = "the request body is not valid JSON: it ends too early"
	case errors.As(err, &typeErr):
		field := typeErr.Field
		if field == "" {
			field = "(body)"
		}
		msg := fmt.Sprintf("must be %s, not a JSON %s", jsonTypeName(typeErr.Type.String()), typeErr.Value)
		detail = "a field has the wrong type"
		fieldErrs = append(fieldErrs, submit.FieldError{Field: field, Message: msg})
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name, uerr := strconv.Unquote(strings.TrimPrefix(err.Error(), "json: unknown field "))
		if uerr != nil {
			name = strings.TrimPrefix(err.Error(), "json: unknown field ")
		}
		detail = fmt.Sprintf("unknown field %q (check its spelling)", name)
		fieldErrs = append(fieldErrs, submit.FieldError{Field: name, Message: "is not a known field"})
	default:
		detail = "the request body is not valid JSON: " + strings.TrimPrefix(err.Error(), "json: ")
	}
	return newProblem(http.StatusBadRequest, kindBadRequest, detail, fieldErrs...)
}

// jsonTypeName says a Go type the way a JSON user reads it.
func jsonTypeName(goType string) string {
	switch {
	case goType == "string":
		return "a string"
	case strings.HasPrefix(goType, "int"), strings.HasPrefix(goType, "uint"):
		return "an integer"
	case strings.HasPrefix(goType, "float"):
		return "a number"
	case goType == "bool":
		return "true or false"
	case strings.HasPrefix(goType, "map["):
		if strings.HasSuffix(goType, "]string") {
			return "an object of strings"
		}
		return "an object"
	case strings.HasPrefix(goType, "[]"):
		return "an array"
	default:
		return "an object"
	}
}
