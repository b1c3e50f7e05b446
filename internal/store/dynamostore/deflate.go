package dynamostore

import (
	"bytes"
	"compress/flate"
	"encoding/json"
	"io"
)

// deflateJSON renders v as deflated JSON, the form of the records whose
// bytes are most of what a write costs (payloads, refs, breaker history):
// their JSON compresses well.
func deflateJSON(v any) ([]byte, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	w, err := flate.NewWriter(&buf, flate.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := w.Write(raw); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// inflateJSON reads what deflateJSON wrote into v.
func inflateJSON(z []byte, v any) error {
	raw, err := io.ReadAll(flate.NewReader(bytes.NewReader(z)))
	if err != nil {
		return err
	}
	return json.Unmarshal(raw, v)
}
