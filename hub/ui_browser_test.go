package hub_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kerf-dev/kerf/test/browsertest"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	auditv1 "github.com/kerf-dev/kerf/api/audit/v1"
	hubv1 "github.com/kerf-dev/kerf/api/hub/v1"
	"github.com/kerf-dev/kerf/api/v1alpha1"
)

// inDocs are the screenshots docs/web.md shows.
var inDocs = map[string]bool{"web-fleet.png": true, "web-fleet-phone.png": true, "web-hub-activity.png": true, "web-hub-workload.png": true, "web-hub-signin.png": true}

// servedHub runs kerf-hub serve on SQLite (servedHubOn) until the test
// ends, with clusters east and west and a read token.
func servedHub(t *testing.T) (base string, client *http.Client, tokens map[string]string) {
	t.Helper()
	return servedHubOn(t, "sqlite")
}

// shopActions are a week of one cluster's actions: a rollout applied every
// few hours, rolled back now and then, and now and then a bad rollout that
// every workload rolls back within minutes.
func shopActions(cluster string, now time.Time, every, rollbackEach int) []hubv1.Action {
	q := func(s string) *resource.Quantity { return ptr.To(resource.MustParse(s)) }
	var out []hubv1.Action
	seq := map[string]int64{}
	workloads := []string{"web", "checkout", "search"}
	for i, h := 0, 7*24-1; h >= 0; i, h = i+1, h-every {
		name := workloads[i%len(workloads)]
		at := now.Add(-time.Duration(h)*time.Hour - 50*time.Minute)
		seq[name]++
		if i%rollbackEach == rollbackEach-1 {
			out = append(out, rollback(cluster, name, seq[name], at))
		} else {
			out = append(out, hubv1.Action{
				Key: fmt.Sprintf("%s/%s/%d", cluster, name, seq[name]), Seq: seq[name], Phase: v1alpha1.PhaseWatching,
				Entry: auditv1.Entry{
					Time: metav1.NewTime(at.Truncate(time.Second)), Type: v1alpha1.ActionApplied, Reason: "InPlace",
					Message: "applied the recommended memory request in place", Resources: []v1alpha1.ResourceName{v1alpha1.ResourceMemory},
					Containers: []v1alpha1.ContainerValueChange{{Name: "app",
						Old: v1alpha1.Resources{Requests: &v1alpha1.ResourceValues{Memory: q("512Mi")}},
						New: v1alpha1.Resources{Requests: &v1alpha1.ResourceValues{Memory: q("384Mi")}}}},
					Namespace: "shop", Recommendation: name,
					Workload: auditv1.Workload{Kind: v1alpha1.KindDeployment, Name: name},
				},
			})
		}
		if i%9 == 4 {
			for j, w := range workloads {
				seq[w]++
				out = append(out, rollback(cluster, w, seq[w], at.Add(time.Duration(5+10*j)*time.Minute)))
			}
		}
	}
	return out
}

// rollback is a rollback of workload name at t after OOM kills.
func rollback(cluster, name string, seq int64, t time.Time) hubv1.Action {
	q := func(s string) *resource.Quantity { return ptr.To(resource.MustParse(s)) }
	return hubv1.Action{
		Key: fmt.Sprintf("%s/%s/%d", cluster, name, seq), Seq: seq, Phase: v1alpha1.PhaseRolledBack,
		Entry: auditv1.Entry{
			Time: metav1.NewTime(t.Truncate(time.Second)), Type: v1alpha1.ActionRolledBack, Reason: "OOMKills",
			Message: "2 OOM kills in 10m; restored the previous values", Resources: []v1alpha1.ResourceName{v1alpha1.ResourceMemory},
			Containers: []v1alpha1.ContainerValueChange{{Name: "app",
				Old: v1alpha1.Resources{Requests: &v1alpha1.ResourceValues{Memory: q("384Mi")}},
				New: v1alpha1.Resources{Requests: &v1alpha1.ResourceValues{Memory: q("512Mi")}}}},
			Figures: []string{"oomKills 2 ≥ 1"}, Namespace: "shop", Recommendation: name,
			Workload: auditv1.Workload{Kind: v1alpha1.KindDeployment, Name: name},
		},
	}
}

// TestHubPagesInABrowser signs in to a real kerf-hub through its form in
// headless Chromium and reads the Fleet and Activity pages over actions
// and savings reports that two clusters wrote through the API.
func TestHubPagesInABrowser(t *testing.T) {
	ctx, console := browsertest.Start(t, browsertest.Options{IgnoreCertErrors: true})
	base, client, tokens := servedHub(t)
	now := time.Now().UTC()
	written := map[string][]hubv1.Action{"east": shopActions("east", now, 3, 4), "west": shopActions("west", now, 7, 5)}
	// The chart counts from midnight (UTC) six days ago.
	windowStart := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC).Add(-6 * 24 * time.Hour)
	inChart := map[string]int{}
	for cluster, acts := range written {
		for _, a := range acts {
			if a.Type == v1alpha1.ActionRolledBack && !a.Time.Time.Before(windowStart) {
				inChart[cluster]++
			}
		}
	}
	for cluster, acts := range written {
		b := hubv1.Batch{Cluster: cluster, Leader: hubv1.LeaderReport{Identity: "kerf-leader-" + cluster + "-6d5f", AgentsConnected: 12, Undelivered: 3, LagSeconds: 4.2}, Actions: acts}
		postBatch(t, base, client, tokens[cluster], b)
	}
	// Their leaders' savings reports: east's a minute old, west's 40
	// minutes (stale: its leader stopped reporting).
	putSavings(t, base, client, tokens["east"], hubv1.SavingsReport{Cluster: "east", Time: metav1.NewTime(now.Add(-time.Minute)), Namespaces: []hubv1.NamespaceSavings{
		nsSavings("shop", 3, 0, [3]string{"1500m", "1200m", "900m"}, [3]string{"1536Mi", "1152Mi", "1Gi"}),
		nsSavings("search", 4, 2, [3]string{"4", "3", "2500m"}, [3]string{"8Gi", "6Gi", "5Gi"}),
	}})
	putSavings(t, base, client, tokens["west"], hubv1.SavingsReport{Cluster: "west", Time: metav1.NewTime(now.Add(-40 * time.Minute)), Namespaces: []hubv1.NamespaceSavings{
		nsSavings("shop", 3, 0, [3]string{"1500m", "1500m", "1200m"}, [3]string{"1536Mi", "1152Mi", "1152Mi"}),
	}})

	// Without a session the page is the sign-in form; the token goes in once.
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base+"/ui/fleet"), chromedp.WaitVisible("#token")))
	require.NoError(t, chromedp.Do(ctx, chromedp.SendKeys("#token", tokens["reader"]), chromedp.Submit("#token")))
	waitFor(t, ctx, "table.clusters")
	loc, err := chromedp.Run(ctx, chromedp.Location())
	require.NoError(t, err)
	assert.Equal(t, base+"/ui/fleet", loc, "back to the page asked for, no token in the address")
	names, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("table.clusters tbody th")].map(th => th.textContent.trim())`))
	require.NoError(t, err)
	assert.Equal(t, []string{"east", "west"}, names)
	charts, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('svg[role="img"]')].map(s => s.getAttribute("aria-label"))`))
	require.NoError(t, err)
	require.Len(t, charts, 2)
	assert.Contains(t, charts[0], fmt.Sprintf("east: %d rollbacks in the last 7 days (UTC)", inChart["east"]))
	assert.Contains(t, charts[1], fmt.Sprintf("west: %d rollbacks in the last 7 days (UTC)", inChart["west"]))
	pending, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('td[data-label="Pending (CPU, memory)"]')].map(td => td.innerText.trim())`))
	require.NoError(t, err)
	assert.Equal(t, []string{
		"800m, 1.13Gi\nreported " + now.Add(-time.Minute).UTC().Format("2006-01-02 15:04"),
		"300m, 0\nreported " + now.Add(-40*time.Minute).UTC().Format("2006-01-02 15:04") + " (stale)",
	}, pending)
	browsertest.Screenshot(t, ctx, "web-fleet.png", inDocs["web-fleet.png"])

	// The Activity page of the hub has a cluster filter that narrows it.
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(`a[href="activity"]`), chromedp.WaitVisible("tbody tr")))
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(`nav[aria-label="Filters"] a[href="?cluster=west"]`), chromedp.WaitVisible(`a[aria-label="remove the filter cluster = west"]`)))
	loc, err = chromedp.Run(ctx, chromedp.Location())
	require.NoError(t, err)
	u, err := url.Parse(loc)
	require.NoError(t, err)
	assert.Equal(t, url.Values{"cluster": {"west"}}, u.Query(), "the filter is in the address, to bookmark")
	cells, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('tbody td[data-label="Cluster"]')].map(td => td.textContent.trim())`))
	require.NoError(t, err)
	require.NotEmpty(t, cells)
	for _, c := range cells {
		assert.Equal(t, "west", c)
	}
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base+"/ui/activity?limit=12")))
	waitFor(t, ctx, "tbody tr")
	browsertest.Screenshot(t, ctx, "web-hub-activity.png", inDocs["web-hub-activity.png"])

	// A rollback's workload link leads to its page on the hub.
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base+"/ui/activity?cluster=east&type=rolled_back&limit=1")))
	waitFor(t, ctx, `td[data-label="Workload"] a`)
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(`td[data-label="Workload"] a`)))
	waitFor(t, ctx, "main h2")
	loc, err = chromedp.Run(ctx, chromedp.Location())
	require.NoError(t, err)
	assert.Contains(t, loc, base+"/ui/workloads/east/shop/")
	text, err := chromedp.Run(ctx, chromedp.Text("main"))
	require.NoError(t, err)
	assert.Contains(t, text, "Kerf rolled this change back")
	browsertest.Screenshot(t, ctx, "web-hub-workload.png", inDocs["web-hub-workload.png"])

	// At a phone's width nothing scrolls sideways.
	require.NoError(t, chromedp.Do(ctx, chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile)))
	for _, p := range []struct{ path, shot string }{{"/ui/fleet", "web-fleet-phone.png"}, {"/ui/activity?limit=12", "web-hub-activity-phone.png"}} {
		require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base+p.path)))
		waitFor(t, ctx, "main")
		wide, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.documentElement.scrollWidth > window.innerWidth`))
		require.NoError(t, err)
		assert.False(t, wide, "%s scrolls sideways at 390px", p.path)
		browsertest.Screenshot(t, ctx, p.shot, inDocs[p.shot])
	}

	// Signing out ends the session: the page asks to sign in again.
	require.NoError(t, chromedp.Do(ctx, chromedp.EmulateViewport(1280, 900), chromedp.Navigate(base+"/ui/fleet"), chromedp.WaitVisible(`form[action="/ui/signout"] button`), chromedp.Click(`form[action="/ui/signout"] button`)))
	waitFor(t, ctx, `p[role="alert"]`)
	msg, err := chromedp.Run(ctx, chromedp.Text(`p[role="alert"]`))
	require.NoError(t, err)
	assert.Equal(t, "You are signed out.", msg)
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base+"/ui/fleet"), chromedp.WaitVisible("#token")))
	browsertest.Screenshot(t, ctx, "web-hub-signin.png", inDocs["web-hub-signin.png"])

	// The sign-in form answers 401, as the API does without a token, and
	// Chromium logs every 4xx document as a failed load: those, and only
	// those, are expected.
	var errs []string
	for _, m := range console() {
		if !strings.HasPrefix(m, "error: Failed to load resource: the server responded with a status of 401 () ("+base+"/ui/") {
			errs = append(errs, m)
		}
	}
	assert.Empty(t, errs, "console:\n%s", strings.Join(errs, "\n"))
}

// trustingClient trusts exactly the hub's certificate.
func trustingClient(t *testing.T, certFile string) *http.Client {
	t.Helper()
	pemBytes, err := os.ReadFile(certFile)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(pemBytes))
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
}

// waitFor waits for a node matching selector after a navigation: a chromedp
// query started while a form post's redirect (or a navigation after a
// screenshot's emulation) is under way can hang or fail with "navigated",
// so it asks again, each time briefly.
func waitFor(t *testing.T, ctx context.Context, selector string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		found, err := chromedp.Run(actx, chromedp.Evaluate[bool](fmt.Sprintf("document.readyState === 'complete' && document.querySelector(%q) !== null", selector)))
		cancel()
		if err == nil && found {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not appear after the post: %v", selector, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
