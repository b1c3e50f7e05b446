package alert

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
)

// DetailJSON renders an event's detail as the JSON object qunfa publishes:
// the fields of e.Detail (see docs/alerts.md) with "tenant" added first.
// Every publisher that leaves the process uses it, so the EventBridge
// detail, the log record and the dashboard agree on one schema. It fails
// when the detail does not marshal to a JSON object or already has a
// "tenant" field.
func DetailJSON(e Event) ([]byte, error) {
	tenant, err := json.Marshal(e.Tenant)
	if err != nil {
		return nil, fmt.Errorf("%s detail: tenant: %w", e.Type, err)
	}
	head := append([]byte(`{"tenant":`), tenant...)
	if e.Detail == nil {
		return append(head, '}'), nil
	}
	body, err := json.Marshal(e.Detail)
	if err != nil {
		return nil, fmt.Errorf("%s detail: %w", e.Type, err)
	}
	if bytes.Equal(body, []byte("null")) {
		return append(head, '}'), nil
	}
	if len(body) < 2 || body[0] != '{' {
		return nil, fmt.Errorf("%s detail: %T is not a JSON object", e.Type, e.Detail)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		return nil, fmt.Errorf("%s detail: %w", e.Type, err)
	}
	if _, ok := fields["tenant"]; ok {
		return nil, fmt.Errorf("%s detail: %T has its own %s field", e.Type, e.Detail, strconv.Quote("tenant"))
	}
	if len(fields) == 0 {
		return append(head, '}'), nil
	}
	return append(append(head, ','), body[1:]...), nil
}
