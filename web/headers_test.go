package web_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"

	auditv1 "github.com/kerf-dev/kerf/api/audit/v1"
	"github.com/kerf-dev/kerf/web"
)

// TestEachPageKeepsItsSecurityHeaders pins the headers of every page, all
// written by one function: the type, nosniff, no-store, same-origin
// referrers and a Content-Security-Policy that runs no script and bars
// forms elsewhere and framing. The pages the leader serves (Activity, the
// workload page) had neither no-store nor frame-ancestors and form-action
// (issue 30, item 12), which docs/hub.md said they had.
func TestEachPageKeepsItsSecurityHeaders(t *testing.T) {
	const csp = "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
	workload := http.NewServeMux()
	workload.Handle("GET /ui/workloads/{namespace}/{name}", &web.WorkloadPage{Source: &workloads{view: rolledBack()}})
	signIn := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		web.WriteSignIn(w, http.StatusUnauthorized, web.SignInForm{Action: "/ui/signin"}, nil)
	})
	for _, c := range []struct {
		name, target string
		h            http.Handler
		status       int
		want         map[string]string
	}{
		{"activity", "/", &web.Activity{Source: &fixed{page: auditv1.Page{Items: entries()}}}, http.StatusOK,
			map[string]string{"Content-Security-Policy": csp, "Cache-Control": "no-store", "Referrer-Policy": "same-origin"}},
		{"workload", "/ui/workloads/shop/web-rsr", workload, http.StatusOK,
			map[string]string{"Content-Security-Policy": csp, "Cache-Control": "no-store", "Referrer-Policy": "same-origin"}},
		{"fleet", "/", &web.Fleet{Source: fleetSrc{}}, http.StatusOK,
			map[string]string{"Content-Security-Policy": csp, "Cache-Control": "no-store", "Referrer-Policy": "same-origin"}},
		{"signin", "/", signIn, http.StatusUnauthorized,
			map[string]string{"Content-Security-Policy": csp, "Cache-Control": "no-store", "Referrer-Policy": "same-origin"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			c.h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, c.target, nil))
			assert.Equal(t, c.status, rec.Code, rec.Body.String())
			h := rec.Header()
			assert.Equal(t, "text/html; charset=utf-8", h.Get("Content-Type"))
			assert.Equal(t, "nosniff", h.Get("X-Content-Type-Options"))
			for k, v := range c.want {
				assert.Equal(t, v, h.Get(k), k)
			}
			for _, k := range []string{"Cache-Control", "Referrer-Policy"} {
				if _, ok := c.want[k]; !ok {
					assert.Empty(t, h.Get(k), k)
				}
			}
		})
	}
}
