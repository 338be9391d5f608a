package savings

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kerf-dev/kerf/api/v1alpha1"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func q(s string) *resource.Quantity { v := resource.MustParse(s); return &v }

func values(cpu, mem string) *v1alpha1.ResourceValues {
	v := &v1alpha1.ResourceValues{}
	if cpu != "" {
		v.CPU = q(cpu)
	}
	if mem != "" {
		v.Memory = q(mem)
	}
	return v
}

func rec(ns, name string, spec *v1alpha1.ResourceValues, history ...v1alpha1.Action) *v1alpha1.RightsizingRecommendation {
	return &v1alpha1.RightsizingRecommendation{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       v1alpha1.RightsizingRecommendationSpec{Containers: []v1alpha1.ContainerResources{{Name: "app", Requests: spec}}},
		Status:     v1alpha1.RightsizingRecommendationStatus{History: history},
	}
}

func action(typ v1alpha1.ActionType, ago time.Duration, old, new *v1alpha1.ResourceValues, figures ...string) v1alpha1.Action {
	return v1alpha1.Action{Type: typ, Time: metav1.Time{Time: t0.Add(-ago)}, Figures: figures,
		Containers: []v1alpha1.ContainerValueChange{{Name: "app", Old: v1alpha1.Resources{Requests: old}, New: v1alpha1.Resources{Requests: new}}}}
}

func TestSummarizeCountsManifestInForceAndRecommendedRequests(t *testing.T) {
	day := 24 * time.Hour
	for _, tc := range []struct {
		name string
		recs []*v1alpha1.RightsizingRecommendation
		want []Namespace
	}{{
		name: "applied: manifest is the first change's old, in force its new",
		recs: []*v1alpha1.RightsizingRecommendation{rec("shop", "web", values("64m", "350Mi"),
			action(v1alpha1.ActionApplied, time.Hour, values("500m", "1Gi"), values("64m", "350Mi")))},
		want: []Namespace{{Namespace: "shop", Workloads: 1,
			Manifest: Amounts{500, 1 << 30}, InForce: Amounts{64, 350 << 20}, Recommended: Amounts{64, 350 << 20}}},
	}, {
		name: "a memory rollback puts memory back; CPU stays; its OOM kills count in the window",
		recs: []*v1alpha1.RightsizingRecommendation{rec("shop", "web", values("250m", "128Mi"),
			action(v1alpha1.ActionApplied, 2*time.Hour, values("500m", "256Mi"), values("250m", "128Mi")),
			action(v1alpha1.ActionRolledBack, time.Hour, values("", "128Mi"), values("", "256Mi"), "oomKills 3 ≥ 1"))},
		want: []Namespace{{Namespace: "shop", Workloads: 1,
			Manifest: Amounts{500, 256 << 20}, InForce: Amounts{250, 256 << 20}, Recommended: Amounts{250, 128 << 20},
			Rollbacks: 1, OOMKills: 3}},
	}, {
		name: "a second change: the manifest stays the first's old",
		recs: []*v1alpha1.RightsizingRecommendation{rec("shop", "web", values("100m", ""),
			action(v1alpha1.ActionApplied, 3*time.Hour, values("1", ""), values("200m", "")),
			action(v1alpha1.ActionApplied, 2*time.Hour, values("200m", ""), values("100m", "")))},
		want: []Namespace{{Namespace: "shop", Workloads: 1,
			Manifest: Amounts{CPUMillis: 1000}, InForce: Amounts{CPUMillis: 100}, Recommended: Amounts{CPUMillis: 100}, Unrecorded: 1}},
	}, {
		name: "a request the manifest did not set counts as 0",
		recs: []*v1alpha1.RightsizingRecommendation{rec("shop", "web", values("", "64Mi"),
			action(v1alpha1.ActionApplied, time.Hour, values("", ""), values("", "64Mi")))},
		want: []Namespace{{Namespace: "shop", Workloads: 1,
			Manifest: Amounts{}, InForce: Amounts{MemoryBytes: 64 << 20}, Recommended: Amounts{MemoryBytes: 64 << 20}, Unrecorded: 1}},
	}, {
		name: "not applied yet: nothing recorded, the requests are unrecorded",
		recs: []*v1alpha1.RightsizingRecommendation{rec("shop", "new", values("100m", "64Mi"),
			v1alpha1.Action{Type: v1alpha1.ActionBlocked, Time: metav1.Time{Time: t0.Add(-time.Minute)}})},
		want: []Namespace{{Namespace: "shop", Workloads: 1, Unrecorded: 2}},
	}, {
		name: "a rollback before the window counts in the requests but not in the rollbacks",
		recs: []*v1alpha1.RightsizingRecommendation{rec("shop", "web", values("250m", ""),
			action(v1alpha1.ActionApplied, 3*day, values("500m", ""), values("250m", "")),
			action(v1alpha1.ActionRolledBack, 2*day, values("250m", ""), values("500m", ""), "throttlingRatio 0.4 ≥ 0.25"))},
		want: []Namespace{{Namespace: "shop", Workloads: 1,
			Manifest: Amounts{CPUMillis: 500}, InForce: Amounts{CPUMillis: 500}, Recommended: Amounts{CPUMillis: 250}, Unrecorded: 1}},
	}, {
		name: "namespaces apart, sorted; each workload counts once",
		recs: []*v1alpha1.RightsizingRecommendation{
			rec("b", "web", values("100m", ""), action(v1alpha1.ActionApplied, time.Hour, values("200m", ""), values("100m", ""))),
			rec("a", "x", values("100m", ""), action(v1alpha1.ActionApplied, time.Hour, values("300m", ""), values("100m", ""))),
			rec("a", "y", values("100m", ""), action(v1alpha1.ActionApplied, time.Hour, values("300m", ""), values("100m", ""))),
			nil,
		},
		want: []Namespace{
			{Namespace: "a", Workloads: 2, Manifest: Amounts{CPUMillis: 600}, InForce: Amounts{CPUMillis: 200}, Recommended: Amounts{CPUMillis: 200}, Unrecorded: 2},
			{Namespace: "b", Workloads: 1, Manifest: Amounts{CPUMillis: 200}, InForce: Amounts{CPUMillis: 100}, Recommended: Amounts{CPUMillis: 100}, Unrecorded: 1},
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, Summarize(tc.recs, t0.Add(-day), t0))
		})
	}
}

func TestStatusChangeStandsInForTrimmedHistory(t *testing.T) {
	r := rec("shop", "web", values("250m", ""))
	r.Status.Change = &v1alpha1.Change{Containers: []v1alpha1.ContainerChange{{Name: "app",
		Previous: v1alpha1.Resources{Requests: values("1", "")}, Applied: v1alpha1.Resources{Requests: values("250m", "")}}}}
	got := Summarize([]*v1alpha1.RightsizingRecommendation{r}, t0.Add(-time.Hour), t0)
	assert.Equal(t, []Namespace{{Namespace: "shop", Workloads: 1,
		Manifest: Amounts{CPUMillis: 1000}, InForce: Amounts{CPUMillis: 250}, Recommended: Amounts{CPUMillis: 250}, Unrecorded: 1}}, got)
}

func TestSavedPendingAndTotal(t *testing.T) {
	rows := []Namespace{
		{Namespace: "a", Workloads: 1, Manifest: Amounts{500, 1 << 30}, InForce: Amounts{250, 1 << 30}, Recommended: Amounts{100, 512 << 20}, Rollbacks: 1, OOMKills: 2},
		{Namespace: "b", Workloads: 2, Manifest: Amounts{100, 0}, InForce: Amounts{200, 0}, Recommended: Amounts{200, 0}, Unrecorded: 3},
	}
	assert.Equal(t, Amounts{250, 0}, rows[0].Saved())
	assert.Equal(t, Amounts{150, 512 << 20}, rows[0].Pending())
	assert.Equal(t, Amounts{-100, 0}, rows[1].Saved(), "a raise saves a negative amount")
	assert.Equal(t, Namespace{Workloads: 3, Manifest: Amounts{600, 1 << 30}, InForce: Amounts{450, 1 << 30},
		Recommended: Amounts{300, 512 << 20}, Unrecorded: 3, Rollbacks: 1, OOMKills: 2}, Total(rows))
}

func TestOOMKillsReadTheHealthWatchFigure(t *testing.T) {
	assert.Equal(t, 2, oomKills([]string{"restarts 1 ≥ 1", "oomKills 2 ≥ 1"}))
	assert.Equal(t, 0, oomKills([]string{"oomKills x ≥ 1", "throttlingRatio 0.3 ≥ 0.25"}))
	assert.Equal(t, 0, oomKills(nil))
}

func TestRecordedReadsEachFieldKerfMoved(t *testing.T) {
	r := rec("shop", "web", values("250m", ""))
	r.Status.History = []v1alpha1.Action{{Type: v1alpha1.ActionApplied, Time: metav1.Time{Time: t0},
		Containers: []v1alpha1.ContainerValueChange{{Name: "app",
			Old: v1alpha1.Resources{Requests: values("500m", ""), Limits: values("", "1Gi")},
			New: v1alpha1.Resources{Requests: values("250m", ""), Limits: values("", "512Mi")}}}}}
	for _, tc := range []struct {
		f                 Field
		manifest, inForce int64
		ok                bool
	}{
		{Fields[0], 500, 250, true},
		{Fields[1], 0, 0, false},
		{Fields[2], 0, 0, false},
		{Fields[3], 1 << 30, 512 << 20, true},
	} {
		m, f, ok := Recorded(r, "app", tc.f)
		assert.Equal(t, []any{tc.manifest, tc.inForce, tc.ok}, []any{m, f, ok}, "%+v", tc.f)
	}
	_, _, ok := Recorded(r, "sidecar", Fields[0])
	assert.False(t, ok, "a container Kerf never changed")
}
