package cluster

import (
	"context"
	"net/http"
	"testing"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/kerf-dev/kerf/test/authtest"
	"github.com/kerf-dev/kerf/test/controlplane"
)

// readerToken is a token bound to both reader ClusterRoles in every
// namespace: what the leader's /metrics, audit API and pages want since
// they authenticate (docs/security.md).
func readerToken(t *testing.T) string {
	t.Helper()
	cp := controlplane.Get(t)
	authtest.InstallReaderRoles(t, cp)
	c := authtest.NewCaller(t, cp, controlplane.UniqueName("readers"), "reader")
	c.BindCluster(t, cp, authtest.MetricsReader)
	c.BindCluster(t, cp, authtest.AuditReader)
	return c.Token
}

// getAs sends GET url with token as its bearer token.
func getAs(url, token string) (*http.Response, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	return http.DefaultClient.Do(req)
}

// browseAs makes the browser of bctx send token on every request, as an
// authenticating proxy in front of the leader would (docs/web.md).
func browseAs(t *testing.T, bctx context.Context, token string) {
	t.Helper()
	_, err := chromedp.Call(bctx, network.Enable, network.EnableParams{})
	require.NoError(t, err)
	_, err = chromedp.Call(bctx, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{Headers: network.Headers{"Authorization": "Bearer " + token}})
	require.NoError(t, err)
}
