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

// TestHubSavingsPageCountsWhatTheStoredActionsCarry stores two clusters'
// applied and rolled-back actions through the API and reads the hub's
// Savings page in headless Chromium: per cluster and namespace, the
// requests before the oldest stored change and after the newest, what
// that saved, and the window's rollbacks and OOM kills; no recommended
// values, which the hub does not store. The Fleet page says what each
// cluster saved and links to it.
func TestHubSavingsPageCountsWhatTheStoredActionsCarry(t *testing.T) {
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
		req, err := http.NewRequest("POST", base+"/v1/clusters/"+cluster+"/actions", strings.NewReader(string(mustJSON(t, b))))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+tokens[cluster])
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		require.NoError(t, err)
		answer, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(answer))
	}

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
	// Cluster, namespace, workloads; CPU manifest, in force, saved; memory
	// manifest, in force, saved; rollbacks, OOM kills, not counted.
	assert.Equal(t, [][]string{
		{"east", "shop", "2", "500m", "250m", "250m", "1.5Gi", "1.25Gi", "256Mi", "1", "2", "1"},
		{"east", "every namespace", "2", "500m", "250m", "250m", "1.5Gi", "1.25Gi", "256Mi", "1", "2", "1"},
		{"west", "batch", "1", "2", "1", "1", "0", "0", "0", "0", "0", "1"},
		{"west", "every namespace", "1", "2", "1", "1", "0", "0", "0", "0", "0", "1"},
		{"All clusters", "every namespace", "3", "2.5", "1.25", "1.25", "1.5Gi", "1.25Gi", "256Mi", "1", "2", "2"},
	}, rows())
	heads, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("table.savings thead tr:nth-child(2) th")].map(th => th.textContent)`))
	require.NoError(t, err)
	assert.NotContains(t, heads, "Recommended", "the hub stores no recommendations")
	how, err := chromedp.Run(ctx, chromedp.Text("section.how"))
	require.NoError(t, err)
	assert.Contains(t, how, "the hub does not store recommendations")
	browsertest.Screenshot(t, ctx, "web-hub-savings.png", true)

	// 7 days count the older rollback too; a cluster filter keeps west.
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(`a[href="?since=168h"]`)))
	waitFor(t, ctx, `a[href="?since=168h"][aria-current]`)
	assert.Equal(t, []string{"All clusters", "every namespace", "3", "2.5", "1.25", "1.25", "1.5Gi", "1.25Gi", "256Mi", "2", "4", "2"}, rows()[4])
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base+"/ui/savings?cluster=west")))
	waitFor(t, ctx, "table.savings")
	assert.Len(t, rows(), 3, "west's namespace, its subtotal and the total")

	// The Fleet page links to it, and says what each cluster saved.
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base+"/ui/fleet")))
	waitFor(t, ctx, `a[href="savings"]`)
	fleet, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('td[data-label="Saved (CPU, memory)"]')].map(td => td.textContent.trim())`))
	require.NoError(t, err)
	assert.Equal(t, []string{"250m, 256Mi", "1, 0"}, fleet, "east, then west")
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
