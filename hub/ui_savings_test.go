package hub_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	auditv1 "github.com/kerf-dev/kerf/api/audit/v1"
	hubv1 "github.com/kerf-dev/kerf/api/hub/v1"
	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/test/browsertest"
)

// savingsAction is an action of workload ns/name with one container's
// request changes, each "cpu" or "memory" to an old → new pair.
func savingsAction(cluster, ns, name string, seq int64, typ v1alpha1.ActionType, at time.Time, figures []string, changes map[v1alpha1.ResourceName][2]string) hubv1.Action {
	old, neu := &v1alpha1.ResourceValues{}, &v1alpha1.ResourceValues{}
	var res []v1alpha1.ResourceName
	for r, v := range changes {
		res = append(res, r)
		o, n := ptr.To(resource.MustParse(v[0])), ptr.To(resource.MustParse(v[1]))
		if r == v1alpha1.ResourceCPU {
			old.CPU, neu.CPU = o, n
		} else {
			old.Memory, neu.Memory = o, n
		}
	}
	return hubv1.Action{
		Key: fmt.Sprintf("%s/%s/%s/%d", cluster, ns, name, seq), Seq: seq, Phase: v1alpha1.PhaseWatching,
		Entry: auditv1.Entry{
			Time: metav1.NewTime(at.Truncate(time.Second)), Type: typ, Reason: "Rollout", Message: string(typ),
			Resources: res, Figures: figures,
			Containers: []v1alpha1.ContainerValueChange{{Name: "app", Old: v1alpha1.Resources{Requests: old}, New: v1alpha1.Resources{Requests: neu}}},
			Namespace:  ns, Recommendation: name, Workload: auditv1.Workload{Kind: v1alpha1.KindDeployment, Name: name},
		},
	}
}

// putSavings sends a savings report through the API as the cluster's
// token and requires a 200.
func putSavings(t *testing.T, base string, client *http.Client, token string, r hubv1.SavingsReport) {
	t.Helper()
	writeAs(t, client, "PUT", base+"/v1/clusters/"+r.Cluster+"/savings", token, r)
}

// writeAs sends v as JSON to url with method and the bearer token, and
// requires a 200.
func writeAs(t *testing.T, client *http.Client, method, url, token string, v any) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(string(mustJSON(t, v))))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	require.NoError(t, err)
	answer, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(answer))
}

// nsSavings is one namespace of a savings report: workloads, then CPU
// and memory manifest, in force and recommended.
func nsSavings(ns string, workloads, unrecorded int, cpu, mem [3]string) hubv1.NamespaceSavings {
	a := func(i int) hubv1.Amounts {
		c, m := resource.MustParse(cpu[i]), resource.MustParse(mem[i])
		return hubv1.Amounts{CPUMillis: c.MilliValue(), MemoryBytes: m.Value()}
	}
	return hubv1.NamespaceSavings{Namespace: ns, Workloads: workloads, Unrecorded: unrecorded, Manifest: a(0), InForce: a(1), Recommended: a(2)}
}

// TestHubSavingsPageShowsReportedRecommendedAndPending stores two
// clusters' applied and rolled-back actions and their leaders' savings
// reports through the API, and reads the hub's Savings page in headless
// Chromium. Per cluster and namespace: a reported namespace's manifest,
// in force and recommended requests, saved and pending, with the
// report's time, marked stale when old; a namespace no report names from
// its stored actions, with no recommended value; and the window's
// rollbacks and OOM kills from the actions. The Fleet page sums saved,
// recommended and pending per cluster and links to it.
func TestHubSavingsPageShowsReportedRecommendedAndPending(t *testing.T) {
	base, client, tokens := servedHub(t)
	now := time.Now().UTC()
	cpu, mem := v1alpha1.ResourceCPU, v1alpha1.ResourceMemory
	oom := []string{"oomKills 2 ≥ 1"}
	written := map[string][]hubv1.Action{
		"east": {
			// web: CPU and memory down, then memory rolled back after 2
			// OOM kills; api: memory down 10 days ago, CPU never moved.
			savingsAction("east", "shop", "api", 1, v1alpha1.ActionApplied, now.Add(-240*time.Hour), nil, map[v1alpha1.ResourceName][2]string{mem: {"1Gi", "768Mi"}}),
			savingsAction("east", "shop", "web", 1, v1alpha1.ActionApplied, now.Add(-3*time.Hour), nil, map[v1alpha1.ResourceName][2]string{cpu: {"500m", "250m"}, mem: {"512Mi", "384Mi"}}),
			savingsAction("east", "shop", "web", 2, v1alpha1.ActionRolledBack, now.Add(-2*time.Hour), oom, map[v1alpha1.ResourceName][2]string{mem: {"384Mi", "512Mi"}}),
			// An older rollback, outside the last 24 hours.
			savingsAction("east", "shop", "api", 2, v1alpha1.ActionRolledBack, now.Add(-48*time.Hour), oom, map[v1alpha1.ResourceName][2]string{mem: {"640Mi", "768Mi"}}),
		},
		"west": {
			savingsAction("west", "batch", "job", 1, v1alpha1.ActionApplied, now.Add(-time.Hour), nil, map[v1alpha1.ResourceName][2]string{cpu: {"2", "1"}}),
		},
	}
	for cluster, acts := range written {
		b := hubv1.Batch{Cluster: cluster, Leader: hubv1.LeaderReport{Identity: "kerf-leader-" + cluster}, Actions: acts}
		postBatch(t, base, client, tokens[cluster], b)
	}
	// east reported a minute ago; west an hour ago (stale), naming a
	// namespace with no stored action, and not batch.
	putSavings(t, base, client, tokens["east"], hubv1.SavingsReport{Cluster: "east", Time: metav1.NewTime(now.Add(-time.Minute)), Namespaces: []hubv1.NamespaceSavings{
		nsSavings("shop", 2, 1, [3]string{"500m", "250m", "200m"}, [3]string{"1536Mi", "1280Mi", "1Gi"}),
		nsSavings("web-team", 1, 0, [3]string{"1", "750m", "500m"}, [3]string{"512Mi", "512Mi", "384Mi"}),
	}})
	westAt := now.Add(-time.Hour)
	putSavings(t, base, client, tokens["west"], hubv1.SavingsReport{Cluster: "west", Time: metav1.NewTime(westAt), Namespaces: []hubv1.NamespaceSavings{
		nsSavings("ml", 1, 0, [3]string{"100m", "100m", "50m"}, [3]string{"128Mi", "128Mi", "64Mi"}),
	}})

	t.Run("refused", func(t *testing.T) {
		req, err := http.NewRequest("GET", base+"/ui/savings?since=1w", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+tokens["reader"])
		resp, err := client.Do(req)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
		assert.Contains(t, string(body), "The filter since is not valid")
	})

	ctx, console := browsertest.Start(t, browsertest.Options{IgnoreCertErrors: true})
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base+"/ui/savings"), chromedp.WaitVisible("#token")))
	require.NoError(t, chromedp.Do(ctx, chromedp.SendKeys("#token", tokens["reader"]), chromedp.Submit("#token")))
	waitFor(t, ctx, "table.savings")
	rows := func() [][]string {
		t.Helper()
		got, err := chromedp.Run(ctx, chromedp.Evaluate[[][]string](
			`[...document.querySelectorAll("table.savings tbody tr, table.savings tfoot tr")].map(tr => [...tr.querySelectorAll("th, td")].map(c => c.textContent.trim()))`))
		require.NoError(t, err)
		return got
	}
	eastAt, westAtText := now.Add(-time.Minute).Format("2006-01-02 15:04"), westAt.Format("2006-01-02 15:04")
	// Cluster, namespace, workloads; CPU manifest, in force, recommended,
	// saved, pending; the same of memory; rollbacks, OOM kills, not
	// counted; reported.
	assert.Equal(t, [][]string{
		{"east", "shop", "2", "500m", "250m", "200m", "250m", "50m", "1.5Gi", "1.25Gi", "1Gi", "256Mi", "256Mi", "1", "2", "1", eastAt},
		{"east", "web-team", "1", "1", "750m", "500m", "250m", "250m", "512Mi", "512Mi", "384Mi", "0", "128Mi", "0", "0", "0", eastAt},
		{"east", "every namespace", "3", "1.5", "1", "700m", "500m", "300m", "2Gi", "1.75Gi", "1.38Gi", "256Mi", "384Mi", "1", "2", "1", eastAt},
		{"west", "batch", "1", "2", "1", "—", "1", "—", "0", "0", "—", "0", "—", "0", "0", "1", "no report"},
		{"west", "ml", "1", "100m", "100m", "50m", "0m", "50m", "128Mi", "128Mi", "64Mi", "0", "64Mi", "0", "0", "0", westAtText + " stale"},
		{"west", "every namespace", "2", "2.1", "1.1", "50m", "1", "50m", "128Mi", "128Mi", "64Mi", "0", "64Mi", "0", "0", "1", westAtText + " stale1 row without a report"},
		{"All clusters", "every namespace", "5", "3.6", "2.1", "750m", "1.5", "350m", "2.13Gi", "1.88Gi", "1.44Gi", "256Mi", "448Mi", "1", "2", "2", "1 row without a report"},
	}, rows())
	heads, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("table.savings thead tr:nth-child(2) th")].map(th => th.textContent)`))
	require.NoError(t, err)
	assert.Equal(t, []string{"Manifest", "In force", "Recommended", "Saved", "Pending", "Manifest", "In force", "Recommended", "Saved", "Pending"}, heads)
	how, err := chromedp.Run(ctx, chromedp.Text("section.how"))
	require.NoError(t, err)
	assert.Contains(t, how, "Each cluster's leader reports its Savings figures per namespace to the hub every 5 minutes")
	assert.Contains(t, how, "marked stale when it is more than 15 minutes old")
	browsertest.Screenshot(t, ctx, "web-hub-savings.png", true)

	// 7 days count the older rollback too; a cluster filter keeps west.
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(`a[href="?since=168h"]`)))
	waitFor(t, ctx, `a[href="?since=168h"][aria-current]`)
	assert.Equal(t, []string{"All clusters", "every namespace", "5", "3.6", "2.1", "750m", "1.5", "350m", "2.13Gi", "1.88Gi", "1.44Gi", "256Mi", "448Mi", "2", "4", "2", "1 row without a report"}, rows()[6])
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base+"/ui/savings?cluster=west")))
	waitFor(t, ctx, "table.savings")
	assert.Len(t, rows(), 4, "west's two namespaces, its subtotal and the total")

	// The Fleet page links to it, and says what each cluster saved.
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base+"/ui/fleet")))
	waitFor(t, ctx, `a[href="savings"]`)
	fleet, err := chromedp.Run(ctx, chromedp.Evaluate[[][]string](`[...document.querySelectorAll('table.clusters tbody tr')].map(tr => ["Saved", "Recommended", "Pending"].map(c => tr.querySelector('td[data-label^="' + c + '"]').innerText.trim()))`))
	require.NoError(t, err)
	assert.Equal(t, [][]string{
		{"500m, 256Mi", "700m, 1.38Gi", "300m, 384Mi\nreported " + now.Add(-time.Minute).Format("2006-01-02 15:04")},
		{"1, 0", "50m, 64Mi", "50m, 64Mi\nreported " + westAt.Format("2006-01-02 15:04") + " (stale)"},
	}, fleet, "east, then west")
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(`a[href="savings?cluster=west"]`)))
	waitFor(t, ctx, `a[aria-label="remove the filter cluster = west"]`)

	var errs []string
	for _, m := range console() {
		if !strings.HasPrefix(m, "error: Failed to load resource: the server responded with a status of 401 () ("+base+"/ui/") {
			errs = append(errs, m)
		}
	}
	assert.Empty(t, errs, "console:\n%s", strings.Join(errs, "\n"))
}
