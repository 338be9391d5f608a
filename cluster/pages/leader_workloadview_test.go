package pages_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster"
	"github.com/kerf-dev/kerf/cluster/healthwatch"
	"github.com/kerf-dev/kerf/cluster/pages"
	"github.com/kerf-dev/kerf/cluster/signals"
	"github.com/kerf-dev/kerf/test/authtest"
	"github.com/kerf-dev/kerf/test/browsertest"
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/kubetest"
	"github.com/kerf-dev/kerf/test/leadertest"
	webui "github.com/kerf-dev/kerf/web"
)

// rolledBackWeb runs a real rollback on the control plane: the Deployment
// web (500m, 256Mi) is asked down to 128Mi with strategy Rollout, its new
// pod's usage is fed as the agents' stream would (30 minutes of readings,
// the working set climbing to the limit, a little throttling) and the
// kernel reports an OOM kill, so the leader rolls memory back. The
// recommendation carries a recommender's basis with a refusal. It returns
// the leader and the namespace once the rollback is restored and the
// series have read everything.
func rolledBackWeb(t *testing.T) (*leadertest.Replica, string, net.Addr) {
	t.Helper()
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	ctx := context.Background()
	sig := signals.New()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	// The leader's clock moves on after the rollback, so the chart shows
	// the usage after it too (well within the 10m backoff).
	var offset atomic.Int64
	clock := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	dep, l := leadertest.WatchedWeb(t, c, ns, kubetest.PolicyWith(ns, time.Hour, nil), cluster.Config{Signals: sig, Listener: lis, Now: clock}, "500m", "128Mi")
	pod := kubetest.AdoptedPod(t, c, dep, "web-new-1")
	require.Eventually(t, func() bool {
		return l.UsageSeries().Pass(ctx) == nil && l.UsageSeries().Reads(pod.UID, "app")
	}, 10*time.Second, 50*time.Millisecond, "the pod reaches the leader's cache and the series")

	// 30 minutes of readings every 30 s, four at a time as the store keeps
	// them, each batch read by a pass: 200m of CPU, the working set
	// climbing from 60Mi to 126Mi.
	now := time.Now()
	start := now.Add(-30 * time.Minute)
	var batch []signals.UsageSample
	for i := range 61 {
		at := start.Add(time.Duration(i) * 30 * time.Second)
		batch = append(batch, signals.UsageSample{PodUID: pod.UID, Container: "app", At: at,
			CPU: time.Duration(i) * 6 * time.Second, WorkingSet: uint64(60+i*66/60) << 20})
		if len(batch) == signals.UsageSamples || i == 60 {
			sig.Usage.Add(batch...)
			require.NoError(t, l.UsageSeries().Pass(ctx))
			batch = batch[:0]
		}
	}
	// A little throttling in the current minute (below the 0.25 that
	// would roll CPU back; no throttling source is set anyway).
	switch sec := time.Now().Second(); {
	case sec < 6:
		time.Sleep(time.Until(time.Now().Truncate(time.Minute).Add(6 * time.Second)))
	case sec > 50:
		time.Sleep(time.Until(time.Now().Truncate(time.Minute).Add(time.Minute + 6*time.Second)))
	}
	minute := time.Now().Truncate(time.Minute)
	sig.Kernel.AddSamples(
		healthwatch.CounterSample{PodUID: pod.UID, Container: "app", Started: start, At: minute.Add(-time.Second), Periods: 1000, Throttled: 0},
		healthwatch.CounterSample{PodUID: pod.UID, Container: "app", Started: start, At: time.Now(), Periods: 1100, Throttled: 10},
	)
	require.NoError(t, l.UsageSeries().Pass(ctx))
	sig.Kernel.AddOOMKill(pod.UID, "app", time.Now())
	kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseRolledBack, v1alpha1.HealthWatchOOMKills)
	rsr := kubetest.WaitRestored(t, c, ns, "web")
	require.NoError(t, l.UsageSeries().Pass(ctx))

	// Eight minutes on, the restarted container runs under the restored
	// 256Mi at about the working set that was killed at 128Mi.
	after := time.Now()
	offset.Store(int64(8 * time.Minute))
	for i := range 16 {
		at := after.Add(time.Duration(i+1) * 30 * time.Second)
		batch = append(batch, signals.UsageSample{PodUID: pod.UID, Container: "app", At: at,
			CPU: time.Duration(i+1) * 6 * time.Second, WorkingSet: uint64(118+i/2) << 20})
		if len(batch) == signals.UsageSamples || i == 15 {
			sig.Usage.Add(batch...)
			require.NoError(t, l.UsageSeries().Pass(ctx))
			batch = batch[:0]
		}
	}

	basis := v1alpha1.RecommendationBasis{MadeAt: now.Add(-time.Hour).UTC().Truncate(time.Second), Policy: "RightsizingPolicy/default", CPUPercentile: 0.9, MemoryPercentile: 0.9, SafetyMargin: 0.15,
		Containers: []v1alpha1.ContainerBasis{{Name: "app", Samples: 8640, History: "24h0m0s", Confidence: 1, TargetCPUMilli: 210, TargetMemoryBytes: 110 << 20,
			Refusals: []v1alpha1.RefusalBasis{{Resource: "cpu", Field: "request", Reason: "MinChange", Asked: 450, Held: 500, Observed: 0.1, Threshold: 0.1,
				Message: "cpu request 450m held at 500m: a change of 10% is below minChangePercent 10%"}}}}}
	raw, err := basis.Encode()
	require.NoError(t, err)
	// As the recommender writes them: the leader's cache keeps the
	// refusals annotation and drops the basis, which the page reads live.
	kubetest.Update(t, c, rsr, func() {
		rsr.Annotations = map[string]string{v1alpha1.RecommendationBasisAnnotation: raw, v1alpha1.RecommendationRefusalsAnnotation: basis.RefusalKeys()}
	})
	require.Eventually(t, func() bool {
		var got v1alpha1.RightsizingRecommendation
		return l.Manager().GetCache().Get(ctx, client.ObjectKeyFromObject(rsr), &got) == nil && got.Annotations[v1alpha1.RecommendationRefusalsAnnotation] != ""
	}, 10*time.Second, 50*time.Millisecond)
	return l, ns, lis.Addr()
}

// TestWorkloadPageOfARolledBackWorkload builds the leader's view of a
// recommendation rolled back on the real control plane, then loads its page
// from the leader's endpoints in headless Chromium.
func TestWorkloadPageOfARolledBackWorkload(t *testing.T) {
	l, ns, addr := rolledBackWeb(t)
	ctx := context.Background()

	t.Run("source", func(t *testing.T) {
		src := &pages.WorkloadViews{Reader: l.Manager().GetCache(), Live: l.Manager().GetAPIReader(), Series: l.UsageSeries()}
		v, err := src.Workload(ctx, webui.WorkloadID{Namespace: ns, Name: "web"})
		require.NoError(t, err)
		assert.Equal(t, v1alpha1.PhaseRolledBack, v.Phase)
		assert.Equal(t, v1alpha1.HealthWatchOOMKills, v.Reason)
		require.NotNil(t, v.HealthWatch)
		assert.Equal(t, v1alpha1.HealthWatchOOMKills, v.HealthWatch.Reason)
		require.NotNil(t, v.Policy, "the policy resolved as the reconciler does")
		assert.Equal(t, v1alpha1.PolicyKindNamespaced, v.Policy.Kind)
		require.NotNil(t, v.Policy.Guardrails.Rollback.OOMKills)
		assert.Equal(t, int32(1), *v.Policy.Guardrails.Rollback.OOMKills, "defaults applied")
		assert.Equal(t, time.Hour, v.Policy.Guardrails.Rollback.WatchDuration.Duration)
		require.Len(t, v.Containers, 1)
		assert.Equal(t, "128Mi", v.Containers[0].Recommended.Requests.Memory.String())
		assert.Equal(t, "256Mi", v.Containers[0].Manifest.Requests.Memory.String(), "the manifest restored")
		var types []v1alpha1.ActionType
		for _, e := range v.History {
			types = append(types, e.Type)
		}
		assert.Equal(t, []v1alpha1.ActionType{v1alpha1.ActionApplied, v1alpha1.ActionRolledBack}, types, "oldest first")
		var cached v1alpha1.RightsizingRecommendation
		require.NoError(t, l.Manager().GetCache().Get(ctx, client.ObjectKey{Namespace: ns, Name: "web"}, &cached))
		assert.NotContains(t, cached.Annotations, v1alpha1.RecommendationBasisAnnotation, "the cache holds the refusals annotation, not the basis")
		require.NotNil(t, v.Basis, "read live: %s", v.BasisError)
		require.Len(t, v.Basis.Containers, 1)
		assert.Equal(t, "MinChange", v.Basis.Containers[0].Refusals[0].Reason)
		require.Len(t, v.Usage, 1)
		u := v.Usage[0]
		assert.Equal(t, "app", u.Container)
		assert.GreaterOrEqual(t, len(u.Points), 30, "a point a minute over the half hour fed")
		kills, throttled, peak := 0, 0, int64(0)
		for _, p := range u.Points {
			kills += p.OOMKills
			throttled = max(throttled, p.ThrottledPercent)
			peak = max(peak, p.MemoryBytes)
			if p.CPUMilli >= 0 {
				assert.InDelta(t, 200, p.CPUMilli, 1, "6 s of CPU every 30 s at %s", p.At)
			}
		}
		assert.Equal(t, 1, kills, "the kernel's OOM kill, once")
		assert.Equal(t, 10, throttled, "10 of 100 periods throttled")
		assert.Equal(t, int64(126<<20), peak)
		assert.True(t, u.Points[len(u.Points)-1].At.After(time.Now().Add(7*time.Minute)), "the points after the rollback, on the leader's clock")

		_, err = src.Workload(ctx, webui.WorkloadID{Namespace: ns, Name: "nope"})
		assert.ErrorIs(t, err, webui.ErrNotFound)
	})

	token := authtest.ReaderToken(t)
	t.Run("404", func(t *testing.T) {
		resp, err := authtest.GetAs(fmt.Sprintf("http://%s/ui/workloads/%s/nope", addr, ns), token)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, http.StatusNotFound, resp.StatusCode)
		assert.Contains(t, string(body), "There is no recommendation nope in namespace "+ns)
	})

	t.Run("browser", func(t *testing.T) {
		bctx, console := browsertest.Start(t, browsertest.Options{})
		authtest.BrowseAs(t, bctx, token)
		page := fmt.Sprintf("http://%s/ui/workloads/%s/web", addr, ns)
		require.NoError(t, chromedp.Do(bctx, chromedp.Navigate(page), chromedp.WaitVisible("#phase")))
		phase, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.querySelector("#phase").textContent + " " + document.querySelector(".phase p").textContent`))
		require.NoError(t, err)
		assert.Equal(t, "RolledBack RolledBack — Kerf rolled this change back (OOMKills).", phase)
		timeline, err := chromedp.Run(bctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("ol.timeline > li .type")].map(e => e.textContent)`))
		require.NoError(t, err)
		assert.Equal(t, []string{"rolled_back", "applied"}, timeline, "the rollback on the timeline, newest first")
		marks, err := chromedp.Run(bctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("svg.chart g.mark.oom title")].map(e => e.textContent)`))
		require.NoError(t, err)
		assert.Len(t, marks, 1, "the OOM kill marked on the memory panel")
		svgs, err := chromedp.Run(bctx, chromedp.Evaluate[int](`document.querySelectorAll("svg.chart[role=img][aria-label]").length`))
		require.NoError(t, err)
		assert.Equal(t, 2, svgs, "a CPU and a memory panel")
		browsertest.Screenshot(t, bctx, "web-workload.png", true)

		// Back to Activity and into the page again through its link.
		require.NoError(t, chromedp.Do(bctx, chromedp.Click(`a[href="../../activity"]`), chromedp.WaitVisible("tbody tr")))
		require.NoError(t, chromedp.Do(bctx, chromedp.Click(`a[href="workloads/`+ns+`/web"]`), chromedp.WaitVisible("#phase")))
		loc, err := chromedp.Run(bctx, chromedp.Location())
		require.NoError(t, err)
		assert.Equal(t, page, loc)

		require.NoError(t, chromedp.Do(bctx, chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile), chromedp.Navigate(page), chromedp.WaitVisible("#phase")))
		wide, err := chromedp.Run(bctx, chromedp.Evaluate[bool](`document.documentElement.scrollWidth > window.innerWidth`))
		require.NoError(t, err)
		assert.False(t, wide, "the page scrolls sideways at 390px")
		browsertest.Screenshot(t, bctx, "web-workload-phone.png", true)

		errs := console()
		assert.Empty(t, errs, "console:\n%s", strings.Join(errs, "\n"))
	})
}
