package api_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/qunfa/qunfa/internal/api"
	"github.com/qunfa/qunfa/internal/api/apispec"
)

// TestOpenAPI30Rendering checks the 3.0.3 rendering: a valid OpenAPI 3.0
// document (kin-openapi), served without a token at
// /v1/openapi-3.0.json, with the same operations as the 3.1 description,
// no 3.1 construct left, and the always-present unset keys nullable.
// (TestOpenAPIConformance validates every real answer against it too.)
func TestOpenAPI30Rendering(t *testing.T) {
	doc, err := apispec.Load30()
	if err != nil {
		t.Fatal(err)
	}
	if doc.OpenAPI != "3.0.3" {
		t.Errorf("openapi = %q, want 3.0.3", doc.OpenAPI)
	}
	full, err := apispec.Load()
	if err != nil {
		t.Fatal(err)
	}
	if a, b := len(doc.Paths.Map()), len(full.Paths.Map()); a != b {
		t.Errorf("the 3.0 rendering has %d paths, the description %d", a, b)
	}
	if a, b := len(doc.Components.Schemas), len(full.Components.Schemas); a != b {
		t.Errorf("the 3.0 rendering has %d schemas, the description %d", a, b)
	}
	for _, c := range []struct{ schema, prop string }{
		{"Job", "pause_reason"}, {"Job", "started_at"}, {"Job", "finished_at"},
		{"Shard", "pause_reason"}, {"Item", "error"}, {"Item", "submitted_at"}, {"Item", "finished_at"},
	} {
		p := doc.Components.Schemas[c.schema].Value.Properties[c.prop]
		if p == nil || !p.Value.Nullable {
			t.Errorf("%s.%s is not nullable in the 3.0 rendering", c.schema, c.prop)
		}
	}
	if p := doc.Components.Schemas["Job"].Value.Properties["pause_reason"]; p != nil &&
		(len(p.Value.AllOf) != 1 || p.Value.AllOf[0].Ref != "#/components/schemas/PauseReason") {
		t.Errorf("Job.pause_reason: want allOf [PauseReason] (a generator's *PauseReason), got %+v", p.Value)
	}
	raw := string(api.OpenAPISpec30())
	for _, s := range []string{`"null"`, `"jsonSchemaDialect"`, `"propertyNames"`, `"examples"`, `"anyOf"`} {
		if strings.Contains(raw, s) {
			t.Errorf("the 3.0 rendering still has %s", s)
		}
	}

	s := newStack(t)
	r := s.do("GET", "/v1/openapi-3.0.json", "", nil)
	if r.status != http.StatusOK || r.header.Get("Content-Type") != "application/json" || !bytes.Equal(r.body, api.OpenAPISpec30()) {
		t.Errorf("GET /v1/openapi-3.0.json: %d %s, same bytes as OpenAPISpec30: %v",
			r.status, r.header.Get("Content-Type"), bytes.Equal(r.body, api.OpenAPISpec30()))
	}
}

// TestOpenAPI30RenderingRefusesWhatItCannotSay feeds the renderer 3.1
// constructs with no 3.0 form: it must refuse them, not pass them on.
func TestOpenAPI30RenderingRefusesWhatItCannotSay(t *testing.T) {
	base := func(schema string) []byte {
		return fmt.Appendf(nil, `{"openapi": "3.1.0", "info": {"title": "t", "version": "1"}, "paths": {},
			"components": {"schemas": {"S": %s}}}`, schema)
	}
	for _, c := range []struct {
		name, schema, wantErr, want string
	}{
		{"nullable type", `{"type": ["string", "null"]}`, "", `"nullable": true`},
		{"nullable ref", `{"type": "object", "properties": {"p": {"anyOf": [{"$ref": "#/components/schemas/S"}, {"type": "null"}]}}}`, "", `"allOf"`},
		{"examples", `{"type": "string", "examples": ["a", "b"]}`, "", `"example": "a"`},
		{"const", `{"const": "x"}`, `"const"`, ""},
		{"two types", `{"type": ["string", "integer"]}`, "no 3.0 form", ""},
		{"null type alone", `{"type": "null"}`, "null type", ""},
		{"anyOf null with two", `{"anyOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}]}`, "anyOf with null", ""},
		{"numeric exclusiveMinimum", `{"type": "number", "exclusiveMinimum": 0}`, "exclusiveMinimum", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, err := api.DowngradeOpenAPI(base(c.schema))
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("error %v, want one naming %s", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var doc map[string]any
			if err := json.Unmarshal(out, &doc); err != nil || doc["openapi"] != "3.0.3" {
				t.Fatalf("%v %s", err, out)
			}
			if !strings.Contains(string(out), c.want) {
				t.Errorf("rendering lacks %s:\n%s", c.want, out)
			}
		})
	}
}
