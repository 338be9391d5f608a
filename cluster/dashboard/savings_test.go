package dashboard_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kerf-dev/kerf/test/authtest"
	"github.com/kerf-dev/kerf/test/controlplane"
)

// TestDashboardServesSavingsWithTheUsersCredentials reads the Savings page
// through the dashboard as two users of the real apiserver: one bound to
// kerf-audit-reader in the namespace gets the namespace's figures (the
// rolled-back memory change: 256Mi in force, 128Mi recommended, one
// rollback after 2 OOM kills; CPU never moved, so not counted); one bound
// to nothing gets 403 "Forbidden".
func TestDashboardServesSavingsWithTheUsersCredentials(t *testing.T) {
	cp := controlplane.Get(t)
	authtest.InstallReaderRoles(t, cp)
	ns := rolledBackWeb(t, cp)
	reader := authtest.NewCaller(t, cp, ns, "reader")
	reader.BindNamespace(t, cp, authtest.AuditReader, ns)
	stranger := authtest.NewCaller(t, cp, ns, "stranger")
	get := func(token string) (int, string) {
		t.Helper()
		_, activity := serve(t, cp, token, ns)
		resp, err := http.Get(strings.TrimSuffix(activity, "activity") + "savings")
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		if resp.StatusCode == http.StatusOK {
			assert.Contains(t, resp.Request.URL.RawQuery, "namespace="+ns, "turned to the kubeconfig's namespace")
		}
		return resp.StatusCode, string(body)
	}

	code, body := get(reader.Token)
	require.Equal(t, http.StatusOK, code, body)
	for _, cell := range []string{
		`data-label="Memory manifest" title="268435456 bytes">256Mi<`,
		`data-label="Memory in force" title="268435456 bytes">256Mi<`,
		`data-label="Memory recommended" title="134217728 bytes">128Mi<`,
		`data-label="Memory pending" title="134217728 bytes">128Mi<`,
		`data-label="Rollbacks">1<`,
		`data-label="OOM kills">2<`,
		`data-label="Not counted">1<`,
	} {
		assert.Contains(t, body, cell)
	}

	code, body = get(stranger.Token)
	assert.Equal(t, http.StatusForbidden, code)
	assert.Contains(t, body, "Forbidden: your credentials may not read this")
}
