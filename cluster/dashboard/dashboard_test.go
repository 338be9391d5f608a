package dashboard_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/dashboard"
	"github.com/kerf-dev/kerf/test/authtest"
	"github.com/kerf-dev/kerf/test/browsertest"
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/kubetest"
)

// rolledBackWeb creates Deployment web and its recommendation web-rsr in a
// new namespace, with an apply and its rollback a minute apart in the
// recommendation's history, as the leader records them.
func rolledBackWeb(t *testing.T, cp *controlplane.ControlPlane) string {
	t.Helper()
	ctx := context.Background()
	ns := kubetest.Namespace(t, cp.Client)
	require.NoError(t, cp.Client.Create(ctx, kubetest.Deployment(ns, "web", "500m", "256Mi")))
	rsr := kubetest.Recommendation(ns, "web-rsr", "web", v1alpha1.StrategyRollout, "500m", "128Mi")
	require.NoError(t, cp.Client.Create(ctx, rsr))
	mem := func(s string) v1alpha1.Resources {
		return v1alpha1.Resources{Requests: &v1alpha1.ResourceValues{Memory: kubetest.Q(s)}, Limits: &v1alpha1.ResourceValues{Memory: kubetest.Q(s)}}
	}
	at := time.Now().UTC().Add(-3 * time.Minute).Truncate(time.Second)
	rsr.Status.Phase, rsr.Status.Reason, rsr.Status.Message = v1alpha1.PhaseRolledBack, "OOMKills", "memory rolled back after 2 OOM kills"
	rsr.Status.History = []v1alpha1.Action{
		{Seq: 1, Time: metav1.NewTime(at), Type: v1alpha1.ActionApplied, Reason: "Rollout", Message: "applied memory 128Mi",
			Resources: []v1alpha1.ResourceName{v1alpha1.ResourceMemory}, Containers: []v1alpha1.ContainerValueChange{{Name: "app", Old: mem("256Mi"), New: mem("128Mi")}}},
		{Seq: 2, Time: metav1.NewTime(at.Add(time.Minute)), Type: v1alpha1.ActionRolledBack, Reason: "OOMKills", Message: "memory rolled back after 2 OOM kills",
			Resources: []v1alpha1.ResourceName{v1alpha1.ResourceMemory}, Figures: []string{"oomKills 2 ≥ 1"},
			Containers: []v1alpha1.ContainerValueChange{{Name: "app", Old: mem("128Mi"), New: mem("256Mi")}}},
	}
	require.NoError(t, cp.Client.Status().Update(ctx, rsr))
	return ns
}

// serve starts a dashboard reading as the bearer token's user, with ns as
// the kubeconfig's namespace, and returns it and its Activity address.
func serve(t *testing.T, cp *controlplane.ControlPlane, token, ns string) (*dashboard.Server, string) {
	t.Helper()
	cfg := rest.AnonymousClientConfig(cp.Config)
	cfg.BearerToken = token
	srv, err := dashboard.New(dashboard.Config{Rest: cfg, Namespace: ns})
	require.NoError(t, err)
	ln, err := dashboard.Listen("127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() { cancel(); require.NoError(t, <-done) })
	return srv, srv.URL(ln)
}

// browser starts headless Chromium for one user, each step of it bounded
// by the test's deadline or two minutes.
func browser(t *testing.T) (context.Context, func() []string) {
	t.Helper()
	ctx, console := browsertest.Start(t, browsertest.Options{})
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(cancel)
	return ctx, console
}

func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	require.NoError(t, err, sel)
	return s
}

// TestDashboardShowsWhatTheUserMayRead loads the dashboard in headless
// Chromium as two users of the real apiserver: one bound to
// kerf-audit-reader in the namespace (manifests/rbac-readers.yaml) sees
// the workload's actions and page; one bound to nothing sees "Forbidden"
// on both pages, not a 500.
func TestDashboardShowsWhatTheUserMayRead(t *testing.T) {
	cp := controlplane.Get(t)
	authtest.InstallReaderRoles(t, cp)
	ns := rolledBackWeb(t, cp)
	reader := authtest.NewCaller(t, cp, ns, "reader")
	reader.BindNamespace(t, cp, authtest.AuditReader, ns)
	stranger := authtest.NewCaller(t, cp, ns, "stranger")

	t.Run("reader", func(t *testing.T) {
		ctx, console := browser(t)
		_, activity := serve(t, cp, reader.Token, ns)
		// The reader may not list every namespace: Activity turns to the
		// kubeconfig's namespace, a filter the page shows.
		require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(activity), chromedp.WaitVisible("tbody tr")))
		loc, err := chromedp.Run(ctx, chromedp.Location())
		require.NoError(t, err)
		assert.Equal(t, activity+"?namespace="+ns, loc)
		assert.Contains(t, text(t, ctx, `nav[aria-label="Filters"]`), "namespace = "+ns)
		rows, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("tbody tr").length`))
		require.NoError(t, err)
		assert.Equal(t, 2, rows, "the apply and the rollback")
		require.NoError(t, chromedp.Do(ctx, chromedp.Click(`a[href="workloads/`+ns+`/web-rsr"]`), chromedp.WaitVisible("#phase")))
		assert.Equal(t, "RolledBack", text(t, ctx, "#phase"))
		assert.Contains(t, text(t, ctx, "h1"), "Deployment web")
		assert.Contains(t, text(t, ctx, "#no-usage"), "kubectl kerf dashboard reads the cluster with your credentials")
		// kerf-audit-reader reads recommendations only: the manifest and
		// the policy are named as not shown, not a failed page.
		unreadable := text(t, ctx, "section.unreadable")
		assert.Contains(t, unreadable, "The Deployment web, so its manifest's values")
		assert.Contains(t, unreadable, "The policies")
		svgs, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("svg.chart g.mark.rollback").length`))
		require.NoError(t, err)
		assert.Equal(t, 1, svgs, "the memory panel marks the rollback")
		browsertest.Screenshot(t, ctx, "web-dashboard.png", true)
		assert.Empty(t, console(), "the reader's pages write nothing to the console")
	})

	t.Run("stranger", func(t *testing.T) {
		ctx, console := browser(t)
		_, activity := serve(t, cp, stranger.Token, ns)
		for _, page := range []string{activity, strings.TrimSuffix(activity, "activity") + "workloads/" + ns + "/web-rsr"} {
			require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(page), chromedp.WaitVisible(chromedp.CSS("p.error"))))
			if strings.Contains(page, "/workloads/") {
				assert.Equal(t, "Forbidden", text(t, ctx, "h1"), "not Workload not found")
			}
			msg := text(t, ctx, ".error")
			assert.Contains(t, msg, "Forbidden: your credentials may not read this", page)
			assert.Contains(t, msg, `"`+stranger.User+`" cannot`, page)
			status, _ := get(t, page, "")
			assert.Equal(t, http.StatusForbidden, status, page)
		}
		for _, p := range console() {
			assert.Contains(t, p, "403", "only the forbidden pages' failed loads: %s", p)
		}
	})
}

// get sends GET url with Host host (the URL's when empty) and returns the
// status and body.
func get(t *testing.T, url, host string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	if host != "" {
		req.Host = host
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

// TestDashboardAnswersOnlyItsTokenAndLoopbackHost refuses a request
// without the run's path token (404) and one whose Host is not the
// loopback address it reached (403, DNS rebinding), and an address off
// loopback.
func TestDashboardAnswersOnlyItsTokenAndLoopbackHost(t *testing.T) {
	cp := controlplane.Get(t)
	ns := rolledBackWeb(t, cp)
	srv, activity := serve(t, cp, "", ns)
	base := strings.TrimSuffix(activity, srv.Path())

	status, _ := get(t, base+"/ui/activity", "")
	assert.Equal(t, http.StatusNotFound, status, "no token")
	status, _ = get(t, base+"/AAAAAAAAAAAAAAAAAAAAAA/ui/activity", "")
	assert.Equal(t, http.StatusNotFound, status, "another token")
	_, port, err := net.SplitHostPort(strings.TrimPrefix(base, "http://"))
	require.NoError(t, err)
	status, body := get(t, activity, "rebound.example:"+port)
	assert.Equal(t, http.StatusForbidden, status, "a DNS-rebound page's Host")
	assert.Contains(t, body, "the dashboard answers only its own loopback address")
	status, _ = get(t, activity, "localhost:1")
	assert.Equal(t, http.StatusForbidden, status, "another port")
	// The anonymous user may read nothing: 403, with the right Host.
	status, _ = get(t, activity, "localhost:"+port)
	assert.Equal(t, http.StatusForbidden, status)
	for _, root := range []string{strings.TrimSuffix(activity, "/ui/activity"), strings.TrimSuffix(activity, "ui/activity")} {
		status, body = get(t, root, "")
		assert.Equal(t, http.StatusForbidden, status, "%s redirects to Activity, then to the namespace's", root)
		assert.Contains(t, body, "Forbidden: your credentials may not read this")
	}

	for _, addr := range []string{"0.0.0.0:0", "192.0.2.1:8080", "example.com:80", "8080"} {
		_, err := dashboard.Listen(addr)
		require.Error(t, err, addr)
		assert.Contains(t, err.Error(), fmt.Sprintf("--address %q", addr))
	}
}
