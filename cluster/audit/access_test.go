package audit_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	auditv1 "github.com/kerf-dev/kerf/api/audit/v1"
	"github.com/kerf-dev/kerf/cluster/audit"
	"github.com/kerf-dev/kerf/internal/authn"
	"github.com/kerf-dev/kerf/test/authtest"
	"github.com/kerf-dev/kerf/test/controlplane"
)

// authorizedAPI serves the handler over the cache as the leader does:
// behind authn's Authenticated, authorized per namespace by the real
// apiserver, the Activity page's gate beside it.
func authorizedAPI(t *testing.T) string {
	t.Helper()
	cp := controlplane.Get(t)
	settle(t, cp)
	a, err := authn.New(authn.Config{REST: cp.Config})
	require.NoError(t, err)
	h := audit.New(env.cache)
	h.Now = func() time.Time { return now }
	h.Authorizer = a
	api := http.NewServeMux()
	h.Register(api)
	mux := http.NewServeMux()
	mux.Handle("/v1/", a.Authenticated(api, audit.WriteRefusal))
	page := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "page") })
	mux.Handle("GET /ui/workloads/{namespace}/{name}", a.Authenticated(h.AuthorizeNamespace(page,
		func(r *http.Request) string { return r.PathValue("namespace") }), nil))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

func namespacesOf(t *testing.T, body string) map[string]int {
	t.Helper()
	var page auditv1.Page
	require.NoError(t, json.Unmarshal([]byte(body), &page), body)
	out := map[string]int{}
	for _, e := range page.Items {
		out[e.Namespace]++
	}
	return out
}

// TestAuditShowsACallerOnlyTheNamespacesItMayRead: a caller allowed to
// list recommendations in namespace a sees a's actions only, across
// namespaces and page by page, and gets 403 for b (its history and pages
// too, whether the workload exists or not); a cluster-wide reader sees
// both; no token gets 401, a token without RBAC sees nothing. Before the
// Authorizer every caller saw every namespace.
func TestAuditShowsACallerOnlyTheNamespacesItMayRead(t *testing.T) {
	cp := controlplane.Get(t)
	authtest.InstallReaderRoles(t, cp)
	base := authorizedAPI(t)
	home := controlplane.UniqueName("auditors")
	teamA := authtest.NewCaller(t, cp, home, "team-a")
	teamA.BindNamespace(t, cp, authtest.AuditReader, env.nsA)
	everyone := authtest.NewCaller(t, cp, home, "everyone")
	everyone.BindCluster(t, cp, authtest.AuditReader)
	nobody := authtest.NewCaller(t, cp, home, "nobody")

	code, body := authtest.Get(t, base+"/v1/audit", "")
	assert.Equal(t, http.StatusUnauthorized, code, body)
	assert.Contains(t, body, `"error"`, "the API's JSON error")

	code, body = authtest.Get(t, base+"/v1/audit", everyone.Token)
	require.Equal(t, http.StatusOK, code, body)
	all := namespacesOf(t, body)
	require.Positive(t, all[env.nsA])
	require.Positive(t, all[env.nsB])

	code, body = authtest.Get(t, base+"/v1/audit", teamA.Token)
	require.Equal(t, http.StatusOK, code, body)
	assert.Equal(t, map[string]int{env.nsA: all[env.nsA]}, namespacesOf(t, body), "team-a sees a's actions, all of them, and none of b's")

	// Paging across namespaces stays right: page by page, a's actions
	// only, each once, as many as in one page.
	seen, cont := 0, ""
	for range 20 {
		code, body = authtest.Get(t, base+"/v1/audit?limit=2"+cont, teamA.Token)
		require.Equal(t, http.StatusOK, code, body)
		var page auditv1.Page
		require.NoError(t, json.Unmarshal([]byte(body), &page))
		for _, e := range page.Items {
			require.Equal(t, env.nsA, e.Namespace)
			seen++
		}
		if page.Continue == "" {
			break
		}
		cont = "&continue=" + page.Continue
	}
	assert.Equal(t, all[env.nsA], seen)

	code, body = authtest.Get(t, base+"/v1/audit?namespace="+env.nsA, teamA.Token)
	assert.Equal(t, http.StatusOK, code, body)
	code, body = authtest.Get(t, base+"/v1/audit?namespace="+env.nsB, teamA.Token)
	assert.Equal(t, http.StatusForbidden, code, body)
	assert.Contains(t, body, teamA.User)
	for _, path := range []string{
		"/v1/workloads/" + env.nsB + "/Deployment/api/history",
		"/v1/workloads/" + env.nsB + "/Deployment/no-such-workload/history",
		"/ui/workloads/" + env.nsB + "/api",
	} {
		code, body = authtest.Get(t, base+path, teamA.Token)
		assert.Equal(t, http.StatusForbidden, code, "%s: %s", path, body)
	}
	code, _ = authtest.Get(t, base+"/v1/workloads/"+env.nsA+"/Deployment/web/history", teamA.Token)
	assert.Equal(t, http.StatusOK, code)
	code, _ = authtest.Get(t, base+"/ui/workloads/"+env.nsA+"/web", teamA.Token)
	assert.Equal(t, http.StatusOK, code)

	code, body = authtest.Get(t, base+"/v1/audit", nobody.Token)
	assert.Equal(t, http.StatusOK, code, body)
	assert.Empty(t, namespacesOf(t, body), "a caller without RBAC sees no action")
	assert.False(t, strings.Contains(body, env.nsB))
}
