package pages_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster"
	"github.com/kerf-dev/kerf/cluster/pages"
	"github.com/kerf-dev/kerf/test/authtest"
	"github.com/kerf-dev/kerf/test/browsertest"
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/kubetest"
	"github.com/kerf-dev/kerf/test/leadertest"
	webui "github.com/kerf-dev/kerf/web"
)

// TestSavingsPageSumsWhatTheLeaderRecorded runs two namespaces' changes
// on the real control plane: in the first, web (500m, 256Mi) gets 250m and
// 128Mi and an OOM kill rolls the memory back; in the second, web gets
// 300m and 192Mi and keeps them. The leader's Savings page then shows each
// namespace's manifest, in force, recommended, saved and pending requests
// and the rollback with its OOM kill, in headless Chromium.
func TestSavingsPageSumsWhatTheLeaderRecorded(t *testing.T) {
	c := controlplane.Get(t).Client
	ctx := context.Background()
	noCooldown := func(g *v1alpha1.RollbackGuardrails) { g.Cooldown = &metav1.Duration{} }
	rolled, kept := kubetest.Namespace(t, c), kubetest.Namespace(t, c)
	dep := kubetest.Web(t, c, rolled, kubetest.PolicyWith(rolled, time.Hour, noCooldown))
	kubetest.Web(t, c, kept, kubetest.PolicyWith(kept, time.Hour, noCooldown))
	require.NoError(t, c.Create(ctx, kubetest.Recommendation(rolled, "web", "web", v1alpha1.StrategyRollout, "250m", "128Mi")))
	require.NoError(t, c.Create(ctx, kubetest.Recommendation(kept, "web", "web", v1alpha1.StrategyRollout, "300m", "192Mi")))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	l := leadertest.StartReplica(t, rolled, "savings", cluster.Config{Listener: lis, WatchNamespaces: []string{rolled, kept}})
	kubetest.WaitPhase(t, c, kept, "web", v1alpha1.PhaseWatching, "")
	kubetest.WaitPhase(t, c, rolled, "web", v1alpha1.PhaseWatching, "")
	kubetest.OOMKilled(t, c, kubetest.AdoptedPod(t, c, dep, "web-new-1"), "OOMKilled")
	kubetest.WaitRestored(t, c, rolled, "web")

	// Each namespace as the page shows it: CPU then memory (manifest, in
	// force, recommended, saved, pending), rollbacks, OOM kills.
	want := map[string]webui.SavingsRow{
		rolled: {Namespace: rolled, Workloads: 1, Rollbacks: 1, OOMKills: 1,
			Manifest: webui.Amounts{CPUMillis: 500, MemoryBytes: 256 << 20}, InForce: webui.Amounts{CPUMillis: 250, MemoryBytes: 256 << 20},
			Recommended: webui.Amounts{CPUMillis: 250, MemoryBytes: 128 << 20}},
		kept: {Namespace: kept, Workloads: 1,
			Manifest: webui.Amounts{CPUMillis: 500, MemoryBytes: 256 << 20}, InForce: webui.Amounts{CPUMillis: 300, MemoryBytes: 192 << 20},
			Recommended: webui.Amounts{CPUMillis: 300, MemoryBytes: 192 << 20}},
	}
	cells := map[string][]string{
		rolled: {"500m", "250m", "250m", "250m", "0m", "256Mi", "256Mi", "128Mi", "0", "128Mi", "1", "1"},
		kept:   {"500m", "300m", "300m", "200m", "0m", "256Mi", "192Mi", "192Mi", "64Mi", "0", "0", "0"},
	}

	t.Run("source", func(t *testing.T) {
		src := &pages.Savings{Reader: l.Manager().GetCache()}
		require.Eventually(t, func() bool {
			d, err := src.Savings(ctx, webui.SavingsQuery{Namespace: rolled, From: time.Now().Add(-time.Hour), To: time.Now().Add(time.Minute)})
			return err == nil && len(d.Rows) == 1 && d.Rows[0].Rollbacks == 1
		}, 30*time.Second, 50*time.Millisecond, "the cache has the rollback")
		for ns, row := range want {
			d, err := src.Savings(ctx, webui.SavingsQuery{Namespace: ns, From: time.Now().Add(-time.Hour), To: time.Now().Add(time.Minute)})
			require.NoError(t, err)
			assert.Equal(t, []webui.SavingsRow{row}, d.Rows, ns)
		}
		d, err := src.Savings(ctx, webui.SavingsQuery{Namespace: rolled, From: time.Now().Add(time.Minute), To: time.Now().Add(time.Hour)})
		require.NoError(t, err)
		assert.Zero(t, d.Rows[0].Rollbacks, "a window after the rollback counts none")
	})

	token := authtest.ReaderToken(t)
	page := fmt.Sprintf("http://%s/ui/savings", lis.Addr())
	t.Run("refused", func(t *testing.T) {
		code, body := authtest.Get(t, page+"?since=2h", token)
		assert.Equal(t, http.StatusBadRequest, code)
		assert.Contains(t, body, "The filter since is not valid")
		code, _ = authtest.Get(t, page, "not-a-token")
		assert.Equal(t, http.StatusUnauthorized, code)
		// A caller that may read kept alone may not ask for rolled, nor
		// for every namespace.
		cp := controlplane.Get(t)
		one := authtest.NewCaller(t, cp, kept, "one")
		one.BindNamespace(t, cp, authtest.AuditReader, kept)
		code, _ = authtest.Get(t, page+"?namespace="+rolled, one.Token)
		assert.Equal(t, http.StatusForbidden, code)
		code, body = authtest.Get(t, page+"?namespace="+kept, one.Token)
		assert.Equal(t, http.StatusOK, code)
		assert.Contains(t, body, `data-label="CPU saved" title="200 millicores">200m<`)
	})

	t.Run("browser", func(t *testing.T) {
		bctx, console := browsertest.Start(t, browsertest.Options{})
		authtest.BrowseAs(t, bctx, token)
		require.NoError(t, chromedp.Do(bctx, chromedp.Navigate(page), chromedp.WaitVisible("table.savings")))
		for ns, want := range cells {
			got, err := chromedp.Run(bctx, chromedp.Evaluate[[]string](fmt.Sprintf(
				`[...[...document.querySelectorAll("table.savings tbody tr")].find(tr => tr.querySelector("th").textContent.trim() === %q).querySelectorAll("td.num")].slice(1, 13).map(td => td.textContent.trim())`, ns)))
			require.NoError(t, err)
			assert.Equal(t, want, got, ns)
		}
		how, err := chromedp.Run(bctx, chromedp.Text("section.how"))
		require.NoError(t, err)
		assert.Contains(t, how, "before Kerf's first recorded change")

		// The window control: 7 days, in the address.
		require.NoError(t, chromedp.Do(bctx, chromedp.Click(`a[href="?since=168h"]`), chromedp.WaitVisible(`a[href="?since=168h"][aria-current]`)))
		caption, err := chromedp.Run(bctx, chromedp.Text("table.savings caption"))
		require.NoError(t, err)
		assert.Contains(t, caption, "(last 7 days)")

		// A namespace's link filters the page to it.
		require.NoError(t, chromedp.Do(bctx, chromedp.Navigate(page+"?namespace="+rolled), chromedp.WaitVisible("table.savings")))
		rows, err := chromedp.Run(bctx, chromedp.Evaluate[int](`document.querySelectorAll("table.savings tbody tr").length`))
		require.NoError(t, err)
		assert.Equal(t, 1, rows)
		require.NoError(t, chromedp.Do(bctx, chromedp.Navigate(page), chromedp.WaitVisible("table.savings")))
		rows, err = chromedp.Run(bctx, chromedp.Evaluate[int](`document.querySelectorAll("table.savings tbody tr").length`))
		require.NoError(t, err)
		assert.Equal(t, 2, rows, "the leader watches the two namespaces")
		browsertest.Screenshot(t, bctx, "web-savings.png", true)

		require.NoError(t, chromedp.Do(bctx, chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile), chromedp.Navigate(page+"?namespace="+kept), chromedp.WaitVisible("table.savings")))
		wide, err := chromedp.Run(bctx, chromedp.Evaluate[bool](`document.documentElement.scrollWidth > window.innerWidth`))
		require.NoError(t, err)
		assert.False(t, wide, "the page scrolls sideways at 390px")

		errs := console()
		assert.Empty(t, errs, "console:\n%s", strings.Join(errs, "\n"))
	})
}
