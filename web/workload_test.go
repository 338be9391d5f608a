package web_test

import (
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	auditv1 "github.com/kerf-dev/kerf/api/audit/v1"
	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/web"
)

// workloads is a WorkloadSource with one view, and records the id asked.
type workloads struct {
	view web.WorkloadView
	err  error
	id   web.WorkloadID
}

func (w *workloads) Workload(_ context.Context, id web.WorkloadID) (web.WorkloadView, error) {
	w.id = id
	if w.err != nil {
		return web.WorkloadView{}, w.err
	}
	if id.Namespace != w.view.Namespace || id.Name != w.view.Recommendation {
		return web.WorkloadView{}, fmt.Errorf("recommendation %s/%s: %w", id.Namespace, id.Name, web.ErrNotFound)
	}
	return w.view, nil
}

// rolledBack is a view of web-rsr: applied at t0 (memory 256Mi → 128Mi),
// OOM-killed at t0+10m and rolled back, with usage from t0-30m.
func rolledBack() web.WorkloadView {
	mem := func(s string) v1alpha1.Resources {
		return v1alpha1.Resources{Requests: &v1alpha1.ResourceValues{Memory: q(s)}, Limits: &v1alpha1.ResourceValues{Memory: q(s)}}
	}
	applied := auditv1.Entry{Time: metav1.NewTime(t0), Type: v1alpha1.ActionApplied, Reason: "Rollout", Message: "applied memory 128Mi",
		Resources: []v1alpha1.ResourceName{"memory"}, Namespace: "shop", Recommendation: "web-rsr",
		Workload:   auditv1.Workload{Kind: v1alpha1.KindDeployment, Name: "web"},
		Containers: []v1alpha1.ContainerValueChange{{Name: "app", Old: mem("256Mi"), New: mem("128Mi")}}}
	back := applied
	back.Time, back.Type, back.Reason, back.Message = metav1.NewTime(t0.Add(10*time.Minute)), v1alpha1.ActionRolledBack, "OOMKills", `<b>OOM</b> rolled back`
	back.Figures = []string{"oomKills 2 ≥ 1"}
	back.Containers = []v1alpha1.ContainerValueChange{{Name: "app", Old: mem("128Mi"), New: mem("256Mi")}}
	var pts []web.UsagePoint
	for i := range 45 {
		at := t0.Add(time.Duration(i-30) * time.Minute)
		p := web.UsagePoint{At: at, CPUMilli: 100 + int64(i), MemoryBytes: int64(100+i) << 20, ThrottledPercent: 0}
		if i == 39 {
			p.OOMKills = 2
		}
		if i == 20 {
			p.ThrottledPercent = 40
		}
		if i == 5 {
			p.CPUMilli, p.MemoryBytes, p.ThrottledPercent = -1, -1, -1 // a gap
		}
		pts = append(pts, p)
	}
	return web.WorkloadView{
		Namespace: "shop", Recommendation: "web-rsr", Workload: auditv1.Workload{Kind: v1alpha1.KindDeployment, Name: "web"},
		Strategy: v1alpha1.StrategyRollout, Phase: v1alpha1.PhaseRolledBack, Reason: "OOMKills", Message: "memory rolled back after 2 OOM kills",
		HealthWatch: &auditv1.HealthWatch{Reason: "OOMKills", Message: "oomKills 2 ≥ 1"},
		Policy: &web.Policy{Kind: v1alpha1.PolicyKindNamespaced, Namespace: "shop", Name: "default", Weight: 10,
			Guardrails: v1alpha1.Guardrails{Rollback: v1alpha1.RollbackGuardrails{OOMKills: ptr.To[int32](1), ThrottlingRatio: "0.25"}}},
		Containers: []web.ContainerValues{{Name: "app", Recommended: ptr.To(mem("128Mi")), Manifest: ptr.To(mem("256Mi"))}},
		Basis: &v1alpha1.RecommendationBasis{MadeAt: t0.Add(-time.Minute), Policy: "RightsizingPolicy/default", CPUPercentile: 0.9, MemoryPercentile: 0.9, SafetyMargin: 0.15,
			Containers: []v1alpha1.ContainerBasis{{Name: "app", Samples: 8640, History: "24h0m0s", Confidence: 1, TargetCPUMilli: 120, TargetMemoryBytes: 120 << 20,
				Refusals: []v1alpha1.RefusalBasis{{Resource: "memory", Field: "limit", Reason: "OOMLatch", Message: "memory limit held at 256Mi after an OOM kill"}}}}},
		History: []auditv1.Entry{applied, back},
		Usage:   []web.ContainerUsage{{Container: "app", Step: time.Minute, Points: pts}},
		Now:     t0.Add(15 * time.Minute),
	}
}

func TestWorkloadPageShowsTheRollbackPlainly(t *testing.T) {
	src := &workloads{view: rolledBack()}
	mux := http.NewServeMux()
	mux.Handle("GET /ui/workloads/{namespace}/{name}", &web.WorkloadPage{Source: src, Refresh: time.Minute, ActivityHref: "../../activity"})
	status, body := get(t, mux, "/ui/workloads/shop/web-rsr")
	require.Equal(t, http.StatusOK, status, body)
	assert.Equal(t, web.WorkloadID{Namespace: "shop", Name: "web-rsr"}, src.id)
	assert.Contains(t, body, `<strong class="word" id="phase">RolledBack</strong> — <strong>Kerf rolled this change back (OOMKills).</strong>`)
	assert.Contains(t, body, `<meta http-equiv="refresh" content="60">`)
	assert.Contains(t, body, `<a href="../../activity">`)
	assert.NotContains(t, body, "<b>OOM</b>", "a hostile message is escaped")
	// The timeline, newest first, with old → new values and figures.
	assert.Less(t, strings.Index(body, `<span class="type">rolled_back</span>`), strings.Index(body, `<span class="type">applied</span>`))
	assert.Contains(t, body, "app requests memory: 128Mi → 256Mi")
	assert.Contains(t, body, "<li>oomKills 2 ≥ 1</li>")
	// Policy, guardrails, the recommendation and why.
	assert.Contains(t, body, "Governed by RightsizingPolicy shop/default (weight 10).")
	assert.Contains(t, body, "<dt>OOM kills that roll memory back</dt><dd>1</dd>")
	assert.Contains(t, body, `<tr><th scope="row">app</th><td data-label="Recommended requests">memory 128Mi</td><td data-label="Recommended limits">memory 128Mi</td><td data-label="Manifest requests">memory 256Mi</td><td data-label="Manifest limits">memory 256Mi</td></tr>`)
	assert.Contains(t, body, "<li>memory limit: OOMLatch — memory limit held at 256Mi after an OOM kill</li>", "the recommender's refusal")
	assert.Contains(t, body, "CPU percentile 90%, memory percentile 90%, safety margin 15%")
	assert.Contains(t, body, "<dt>Estimate</dt><dd>cpu 120m, memory 120Mi</dd><dt>History</dt><dd>24h0m0s, 8640 samples, confidence 100%</dd>")
}

// TestWorkloadPageSaysADegradedWorkloadIsLeftAlone: a Degraded
// recommendation's page opens with a banner saying why and how to resume
// it; another phase has none.
func TestWorkloadPageSaysADegradedWorkloadIsLeftAlone(t *testing.T) {
	view := rolledBack()
	view.Phase, view.Reason = v1alpha1.PhaseDegraded, v1alpha1.ReasonDegraded
	view.Message = "3 of the last 5 changes of Deployment web were rolled back: <Kerf> applies and recommends nothing for it"
	mux := http.NewServeMux()
	mux.Handle("GET /ui/workloads/{namespace}/{name}", &web.WorkloadPage{Source: &workloads{view: view}})
	status, body := get(t, mux, "/ui/workloads/shop/web-rsr")
	require.Equal(t, http.StatusOK, status, body)
	banner := strings.Index(body, `<section class="banner" id="degraded" role="alert" aria-labelledby="degraded-h">`)
	require.Positive(t, banner, "the banner is shown")
	assert.Less(t, banner, strings.Index(body, `<section class="phase`), "at the top, before the phase")
	assert.Contains(t, body, "<p>3 of the last 5 changes of Deployment web were rolled back: &lt;Kerf&gt; applies and recommends nothing for it</p>", "why, escaped")
	assert.Contains(t, body, "<code>kubectl kerf resume --workload web-rsr -n shop</code>", "how to resume")
	assert.Contains(t, body, `<strong class="word" id="phase">Degraded</strong>`)

	other := http.NewServeMux()
	other.Handle("GET /ui/workloads/{namespace}/{name}", &web.WorkloadPage{Source: &workloads{view: rolledBack()}})
	status, body = get(t, other, "/ui/workloads/shop/web-rsr")
	require.Equal(t, http.StatusOK, status, body)
	assert.NotContains(t, body, `id="degraded"`, "no banner for another phase")
}

func TestWorkloadPageUnknownIs404(t *testing.T) {
	mux := http.NewServeMux()
	mux.Handle("GET /ui/workloads/{namespace}/{name}", &web.WorkloadPage{Source: &workloads{view: rolledBack()}})
	status, body := get(t, mux, "/ui/workloads/shop/nope")
	assert.Equal(t, http.StatusNotFound, status)
	assert.Contains(t, body, "There is no recommendation nope in namespace shop.")
	assert.NotContains(t, body, "<svg")
}

func TestWorkloadPageFailedReadIs503(t *testing.T) {
	mux := http.NewServeMux()
	mux.Handle("GET /ui/workloads/{namespace}/{name}", &web.WorkloadPage{Source: &workloads{err: errors.New("cache not started")}})
	status, body := get(t, mux, "/ui/workloads/shop/web-rsr")
	assert.Equal(t, http.StatusServiceUnavailable, status)
	assert.Contains(t, body, "The workload cannot be read now: cache not started.")
}

var svgRE = regexp.MustCompile(`(?s)<svg .*?</svg>`)

// svgs returns the page's SVGs, each checked to be well-formed XML.
func svgs(t *testing.T, body string) []string {
	t.Helper()
	out := svgRE.FindAllString(body, -1)
	for _, s := range out {
		d := xml.NewDecoder(strings.NewReader(s))
		for {
			_, err := d.Token()
			if err == io.EOF {
				break
			}
			require.NoError(t, err, "SVG not well-formed:\n%s", s)
		}
	}
	return out
}

func TestWorkloadChartDrawsStepsUsageAndMarks(t *testing.T) {
	mux := http.NewServeMux()
	mux.Handle("GET /ui/workloads/{namespace}/{name}", &web.WorkloadPage{Source: &workloads{view: rolledBack()}})
	_, body := get(t, mux, "/ui/workloads/shop/web-rsr")
	charts := svgs(t, body)
	require.Len(t, charts, 2, "a CPU and a memory panel for container app")
	cpu, mem := charts[0], charts[1]
	for _, s := range charts {
		assert.Contains(t, s, `role="img"`)
		assert.Regexp(t, `aria-label="[^"]+ of container app from `, s)
		assert.Contains(t, s, `<text class="axis" x="468" y="217" text-anchor="end">time (UTC)</text>`)
	}
	// Memory: the request steps 256Mi → 128Mi → 256Mi over a 0..384Mi axis.
	assert.Contains(t, mem, "The request went 256Mi → 128Mi → 256Mi.")
	assert.Contains(t, mem, `>384Mi</text>`, "the axis tops at a round number above the 256Mi request")
	assert.Contains(t, mem, `>128Mi</text>`, "gridlines every 128Mi")
	assert.Contains(t, mem, `<path class="request" d="M`)
	assert.Contains(t, mem, `<path class="limit" d="M`)
	assert.Contains(t, mem, `<path class="usage" d="M`)
	assert.Contains(t, mem, `<g class="mark oom" data-count="1"><title>2 OOM kills in the minute from 12:09 UTC</title>`)
	assert.Contains(t, mem, `<g class="mark rollback" data-count="1"><title>rolled back (OOMKills): oomKills 2 ≥ 1 at 12:10:00 UTC</title>`)
	// CPU: untouched by the history and without manifest values: no steps, but usage and a throttled band.
	assert.NotContains(t, cpu, `class="request"`)
	assert.Contains(t, cpu, `<rect class="throttled"`)
	assert.Contains(t, cpu, "throttled 40% of CFS periods in the minute from 11:50 UTC")
	assert.NotContains(t, cpu, "mark rollback", "the rollback touched memory only")
	// The same figures as a table.
	assert.Contains(t, body, "<caption>memory of app</caption>")
	assert.Contains(t, body, `<td><time datetime="2030-03-01T12:10:00Z">2030-03-01 12:10:00</time></td><td>256Mi</td><td>256Mi</td><td></td><td>rolled back (OOMKills): oomKills 2 ≥ 1 at 12:10:00 UTC</td>`)
	assert.Contains(t, body, `<td>not known</td><td>not known</td><td>144m</td>`, "cpu values the history never touched")
}

func TestWorkloadChartScalesAndGaps(t *testing.T) {
	v := rolledBack()
	v.History, v.Containers = nil, nil
	v.Usage[0].Points = v.Usage[0].Points[:10]
	mux := http.NewServeMux()
	mux.Handle("GET /ui/workloads/{namespace}/{name}", &web.WorkloadPage{Source: &workloads{view: v}})
	_, body := get(t, mux, "/ui/workloads/shop/web-rsr")
	charts := svgs(t, body)
	require.Len(t, charts, 2)
	// The missing point at index 5 breaks the line: two M commands.
	d := regexp.MustCompile(`<path class="usage" d="([^"]+)"`).FindStringSubmatch(charts[1])
	require.NotNil(t, d)
	assert.Equal(t, 2, strings.Count(d[1], "M"), d[1])
	assert.Contains(t, charts[1], ">128Mi</text>", "a 109Mi peak × 1.1 over 4 → a 32Mi step, top 128Mi")
	assert.Contains(t, charts[1], ">32Mi</text>")
	assert.Contains(t, charts[0], ">100m</text>", "a 109m peak × 1.1 over 4 → a 50m step, top 150m")
	assert.Contains(t, charts[0], ">150m</text>")
	assert.Contains(t, body, "Kerf has not acted on this workload yet.")
}

func TestWorkloadPageWithoutUsageOrPolicy(t *testing.T) {
	v := rolledBack()
	v.Usage, v.Policy, v.Basis, v.PolicyUnknown, v.Cluster = nil, nil, nil, true, "prod"
	mux := http.NewServeMux()
	mux.Handle("GET /ui/clusters/{cluster}/workloads/{namespace}/{name}", &web.WorkloadPage{Source: &workloads{view: v}})
	status, body := get(t, mux, "/ui/clusters/prod/workloads/shop/web-rsr")
	require.Equal(t, http.StatusOK, status, body)
	assert.Contains(t, body, "Cluster prod, namespace shop")
	assert.Contains(t, body, "No usage is recorded here for this workload (the hub keeps none)")
	assert.Contains(t, body, "The policies are not known here.")
	assert.Contains(t, body, "Not made by Kerf's recommender")
	charts := svgs(t, body)
	require.Len(t, charts, 2)
	assert.Contains(t, charts[1], "No usage is recorded.")
	assert.Contains(t, charts[1], `class="mark rollback"`, "the rollback is marked from the history alone")
}

func TestWorkloadPageEmpty(t *testing.T) {
	v := web.WorkloadView{Namespace: "shop", Recommendation: "web-rsr", Workload: auditv1.Workload{Kind: v1alpha1.KindDeployment, Name: "web"}}
	mux := http.NewServeMux()
	mux.Handle("GET /ui/workloads/{namespace}/{name}", &web.WorkloadPage{Source: &workloads{view: v}, Now: func() time.Time { return t0 }})
	status, body := get(t, mux, "/ui/workloads/shop/web-rsr")
	require.Equal(t, http.StatusOK, status, body)
	assert.Contains(t, body, `<strong class="word" id="phase">Pending</strong>`)
	assert.Contains(t, body, "No container values are known.")
	assert.Contains(t, body, "No policy governs this workload")
	assert.Empty(t, svgs(t, body))
}

func q(s string) *resource.Quantity { return ptr.To(resource.MustParse(s)) }

// TestPagesDoNotWriteToTheSourcesValues renders both pages over values the
// Source still holds (the leader's are its informer cache's own objects):
// Quantity.String caches its text in the Quantity, which raced with the
// informers' deep copies until the pages formatted copies.
func TestPagesDoNotWriteToTheSourcesValues(t *testing.T) {
	page := auditv1.Page{Items: entries()}
	before := copyEntries(page.Items)
	_, _ = get(t, &web.Activity{Source: &fixed{page: page}}, "/")
	assert.Equal(t, before, page.Items, "the Activity page wrote to its Source's values")

	v := rolledBack()
	history := copyEntries(v.History)
	recommended := v.Containers[0].Recommended.DeepCopy()
	mux := http.NewServeMux()
	mux.Handle("GET /ui/workloads/{namespace}/{name}", &web.WorkloadPage{Source: &workloads{view: v}})
	_, _ = get(t, mux, "/ui/workloads/shop/web-rsr")
	assert.Equal(t, history, v.History, "the workload page wrote to its Source's history")
	assert.Equal(t, recommended, v.Containers[0].Recommended, "the workload page wrote to its Source's values")
}

func copyEntries(es []auditv1.Entry) []auditv1.Entry {
	out := make([]auditv1.Entry, len(es))
	for i, e := range es {
		out[i] = e
		out[i].Containers = nil
		for _, c := range e.Containers {
			out[i].Containers = append(out[i].Containers, *c.DeepCopy())
		}
	}
	return out
}

// TestPagesAnswerForbiddenAs403 renders a Source's refusal (the
// dashboard's user may not read the namespace) as 403 with its reason, on
// both pages, not as a 503.
func TestPagesAnswerForbiddenAs403(t *testing.T) {
	refusal := fmt.Errorf("%w: %s", web.ErrForbidden, `User "bob" cannot list resource "rightsizingrecommendations" in the namespace "shop"`)
	mux := http.NewServeMux()
	mux.Handle("GET /ui/workloads/{namespace}/{name}", &web.WorkloadPage{Source: &workloads{err: refusal}})
	mux.Handle("GET /ui/activity", &web.Activity{Source: &fixed{err: refusal}})
	for _, target := range []string{"/ui/workloads/shop/web-rsr", "/ui/activity"} {
		status, body := get(t, mux, target)
		assert.Equal(t, http.StatusForbidden, status, target)
		assert.Contains(t, body, `Forbidden: your credentials may not read this (forbidden: User &#34;bob&#34; cannot list resource`, target)
	}
}

// TestWorkloadPageListsWhatItMayNotRead shows the Source's unreadable parts
// and the page's note on the missing usage.
func TestWorkloadPageListsWhatItMayNotRead(t *testing.T) {
	v := rolledBack()
	v.Usage, v.Policy, v.PolicyUnknown = nil, nil, true
	v.Unreadable = []string{"The policies: <forbidden>."}
	mux := http.NewServeMux()
	mux.Handle("GET /ui/workloads/{namespace}/{name}", &web.WorkloadPage{Source: &workloads{view: v}, UsageNote: "The dashboard reads no usage."})
	status, body := get(t, mux, "/ui/workloads/shop/web-rsr")
	require.Equal(t, http.StatusOK, status, body)
	assert.Contains(t, body, "<li>The policies: &lt;forbidden&gt;.</li>")
	assert.Contains(t, body, "the chart shows the values over time and the rollbacks. The dashboard reads no usage.</p>")
}
