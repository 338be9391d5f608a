package hub_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestProbesNeedNoTokenAndReadinessFollowsTheDatabase: /healthz answers
// while the process serves, /readyz only while the database does; neither
// needs a token (the kubelet has none).
func TestProbesNeedNoTokenAndReadinessFollowsTheDatabase(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		for _, p := range []string{"/healthz", "/readyz"} {
			status, body := e.do(t, "GET", p, "", nil)
			assert.Equal(t, http.StatusOK, status, "%s: %s", p, body)
		}
		status, _ := e.do(t, "POST", "/readyz", "", nil)
		assert.Equal(t, http.StatusMethodNotAllowed, status)

		_ = e.store.Close() // the database is gone
		status, body := e.do(t, "GET", "/readyz", "", nil)
		assert.Equal(t, http.StatusServiceUnavailable, status, string(body))
		assert.JSONEq(t, `{"error": "database unavailable"}`, string(body))
		status, _ = e.do(t, "GET", "/healthz", "", nil)
		assert.Equal(t, http.StatusOK, status, "alive: a database outage must not restart the replicas")
	})
}
