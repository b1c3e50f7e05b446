package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
)

// The OpenAPI 3.0 rendering of the description exists for client
// generators that read only 3.0: oapi-codegen before v2.8 refuses every
// OpenAPI 3.1 way to say null ("type": [..., "null"], a {"type": "null"}
// branch), while answers always carry keys such as pause_reason and
// finished_at, null while unset. openapi.json (3.1) stays the one source;
// this rendering is derived from it when first asked for.

// openAPISpec30 is the 3.0.3 rendering, made once.
var openAPISpec30 = sync.OnceValues(func() ([]byte, error) { return downgradeOpenAPI(openAPISpec) })

// OpenAPISpec30 returns the OpenAPI 3.0.3 rendering of the description
// (GET /v1/openapi-3.0.json): the same operations and schemas, nullables
// as "nullable": true. The caller may keep the slice.
func OpenAPISpec30() []byte {
	b, err := openAPISpec30()
	if err != nil {
		// openapi.json is embedded and its rendering tested: this is a
		// build that cannot have passed its tests.
		panic(err)
	}
	return slices.Clone(b)
}

// serveOpenAPI30 answers GET /v1/openapi-3.0.json, like serveOpenAPI.
func serveOpenAPI30(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "public, max-age=300")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(OpenAPISpec30())
	}
}

// downgradeOpenAPI renders an OpenAPI 3.1 description as 3.0.3. It knows
// the 3.1 constructs openapi.json uses and refuses any other, so a new one
// fails the tests instead of slipping into a 3.0 document:
//
//   - "type": [T, "null"] becomes "type": T, "nullable": true;
//   - "anyOf": [S, {"type": "null"}] becomes "allOf": [S], "nullable": true
//     (3.0 ignores keywords beside a $ref, and oapi-codegen v2.5 reads a
//     one-entry allOf as the referenced type);
//   - "examples": [e, ...] in a schema becomes "example": e;
//   - "propertyNames" is dropped (3.0 cannot say it; the server still checks);
//   - jsonSchemaDialect, info.summary and license.identifier are dropped.
func downgradeOpenAPI(spec []byte) ([]byte, error) {
	var doc map[string]any
	if err := json.Unmarshal(spec, &doc); err != nil {
		return nil, fmt.Errorf("openapi 3.0 rendering: %w", err)
	}
	doc["openapi"] = "3.0.3"
	delete(doc, "jsonSchemaDialect")
	if _, ok := doc["webhooks"]; ok {
		return nil, fmt.Errorf("openapi 3.0 rendering: top-level webhooks have no 3.0 form")
	}
	if info, ok := doc["info"].(map[string]any); ok {
		if s, ok := info["summary"].(string); ok {
			delete(info, "summary")
			if d, _ := info["description"].(string); d == "" {
				info["description"] = s
			}
		}
		if lic, ok := info["license"].(map[string]any); ok {
			delete(lic, "identifier")
		}
	}
	if err := downgradeNode("", doc); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return nil, fmt.Errorf("openapi 3.0 rendering: %w", err)
	}
	return buf.Bytes(), nil
}

// only31 are JSON Schema keywords OpenAPI 3.0 does not have and
// downgradeNode does not translate.
var only31 = []string{"const", "prefixItems", "contentMediaType", "contentEncoding", "unevaluatedProperties",
	"unevaluatedItems", "dependentRequired", "dependentSchemas", "if", "then", "else", "$defs", "$anchor",
	"$dynamicRef", "$schema", "patternProperties", "contains", "minContains", "maxContains"}

// downgradeNode rewrites one JSON value of the description in place.
func downgradeNode(path string, v any) error {
	switch n := v.(type) {
	case []any:
		for i, e := range n {
			if err := downgradeNode(fmt.Sprintf("%s/%d", path, i), e); err != nil {
				return err
			}
		}
	case map[string]any:
		if types, ok := n["type"].([]any); ok {
			var rest []any
			for _, t := range types {
				if t == "null" {
					n["nullable"] = true
				} else {
					rest = append(rest, t)
				}
			}
			if len(rest) != 1 {
				return fmt.Errorf("openapi 3.0 rendering: %s: type %v has no 3.0 form", path, types)
			}
			n["type"] = rest[0]
		}
		if t, _ := n["type"].(string); t == "null" {
			return fmt.Errorf("openapi 3.0 rendering: %s: a null type outside anyOf [schema, null]", path)
		}
		if alts, ok := n["anyOf"].([]any); ok {
			var rest []any
			for _, a := range alts {
				if m, ok := a.(map[string]any); ok && m["type"] == "null" && len(m) == 1 {
					n["nullable"] = true
				} else {
					rest = append(rest, a)
				}
			}
			if n["nullable"] == true {
				if len(rest) != 1 {
					return fmt.Errorf("openapi 3.0 rendering: %s: anyOf with null and %d other schemas", path, len(rest))
				}
				delete(n, "anyOf")
				n["allOf"] = rest
			}
		}
		if ex, ok := n["examples"].([]any); ok && isSchema(path) {
			delete(n, "examples")
			if len(ex) > 0 {
				n["example"] = ex[0]
			}
		}
		if isSchema(path) {
			delete(n, "propertyNames")
			for _, k := range only31 {
				if _, ok := n[k]; ok {
					return fmt.Errorf("openapi 3.0 rendering: %s: %q has no 3.0 form", path, k)
				}
			}
			if _, ok := n["exclusiveMinimum"].(float64); ok {
				return fmt.Errorf("openapi 3.0 rendering: %s: a numeric exclusiveMinimum", path)
			}
			if _, ok := n["exclusiveMaximum"].(float64); ok {
				return fmt.Errorf("openapi 3.0 rendering: %s: a numeric exclusiveMaximum", path)
			}
		}
		for k, e := range n {
			if err := downgradeNode(path+"/"+jsonPointerEscape(k), e); err != nil {
				return err
			}
		}
	}
	return nil
}

// isSchema reports whether the node at path is a schema: under
// components/schemas, or under a "schema" key, in either case not a
// properties map itself.
func isSchema(path string) bool {
	return (strings.Contains(path, "/schemas/") || strings.Contains(path, "/schema")) && !strings.HasSuffix(path, "/properties")
}

// jsonPointerEscape escapes a key for a JSON pointer (RFC 6901).
func jsonPointerEscape(s string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(s)
}
