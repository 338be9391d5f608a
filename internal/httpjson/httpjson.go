// Package httpjson writes the JSON answers of Kerf's HTTP APIs (the
// leader's audit API and the hub), the same way in both.
package httpjson

import (
	"bytes"
	"encoding/json"
	"net/http"

	auditv1 "github.com/kerf-dev/kerf/api/audit/v1"
)

// Write writes v as JSON with status. HTML characters are left as they are
// (the body is never HTML, and figures hold ≥ and <); an answer that cannot
// be encoded becomes a 500 with an auditv1.Error saying why. Answers are
// never cached: they are live views of what Kerf did.
func Write(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		status = http.StatusInternalServerError
		buf.Reset()
		_ = enc.Encode(auditv1.Error{Error: "encode answer: " + err.Error()})
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}
