package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/kerf-dev/kerf/cluster/dashboard"
	"github.com/kerf-dev/kerf/internal/scenario"
	"github.com/kerf-dev/kerf/test/browsertest"
)

// dashboardShowsTheRollback serves kubectl kerf dashboard's pages from the
// sandbox's apiserver and loads them in headless Chromium as two users: a
// service account bound to kerf-audit-reader in the scenario's namespace
// (manifests/rbac-readers.yaml) sees the real rollback of r on its
// workload's page; one bound to nothing is refused with 403.
func dashboardShowsTheRollback(t *testing.T, in *scenario.Installed, e *scenario.Env, r *scenario.Result) {
	t.Helper()
	reader := userToken(t, e, "dashboard-reader", "kerf-audit-reader")
	stranger := userToken(t, e, "dashboard-stranger", "")
	page := "workloads/" + e.Namespace + "/" + r.RSR.Name

	ctx, console := browsertest.Start(t, browsertest.Options{})
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	base := serveDashboard(t, in, reader)
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base+page), chromedp.WaitVisible("#phase")))
	phase, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#phase")))
	require.NoError(t, err)
	marks, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("svg.chart g.mark.rollback").length`))
	require.NoError(t, err)
	assert.Equal(t, "RolledBack", phase, "the reader sees the rollback the leader recorded")
	assert.Positive(t, marks, "the chart marks the rollback")
	assert.Empty(t, console(), "the reader's page writes nothing to the console")

	base = serveDashboard(t, in, stranger)
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base+page), chromedp.WaitVisible(chromedp.CSS("p.error"))))
	msg, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(".error")))
	require.NoError(t, err)
	assert.Contains(t, msg, "Forbidden: your credentials may not read this")
	for _, p := range console() {
		assert.Contains(t, p, "403", "only the forbidden page's failed load: %s", p)
	}
}

// userToken returns a token of a new service account name in the
// scenario's namespace, bound there to the ClusterRole role (none when
// empty), for the apiserver's audience.
func userToken(t *testing.T, e *scenario.Env, name, role string) string {
	t.Helper()
	ctx := t.Context()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: e.Namespace, Name: name}}
	require.NoError(t, e.Client.Create(ctx, sa))
	if role != "" {
		require.NoError(t, e.Client.Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: e.Namespace, Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: e.Namespace, Name: name}},
		}))
	}
	tr := &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}
	require.NoError(t, e.Client.SubResource("token").Create(ctx, sa, tr))
	return tr.Status.Token
}

// serveDashboard starts the dashboard reading the sandbox as token's user,
// as kubectl kerf dashboard does with a kubeconfig, and returns the
// address its pages are under.
func serveDashboard(t *testing.T, in *scenario.Installed, token string) string {
	t.Helper()
	cfg := rest.AnonymousClientConfig(in.Cluster.Config)
	cfg.BearerToken = token
	srv, err := dashboard.New(dashboard.Config{Rest: cfg})
	require.NoError(t, err)
	ln, err := dashboard.Listen("127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() { cancel(); assert.NoError(t, <-done) })
	return strings.TrimSuffix(srv.URL(ln), "activity")
}
