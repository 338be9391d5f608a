package recommender

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/workload"
	"github.com/kerf-dev/kerf/test/controlplane"
)

// TestAnOOMKillIsLatchedAtTheLimitItHappenedUnder checks killLimit against
// a real apiserver: a change applied and rolled back between two passes
// (the end-to-end test's course: 1Gi → 250Mi, killed, back to 1Gi within
// seconds) is seen by no pass, and the limit the pod has now is the
// restored one; the kill happened under the applied 250Mi, which the
// recommendation's history says. Before killLimit the latch took the
// restored 1Gi and asked for 1.2Gi.
func TestAnOOMKillIsLatchedAtTheLimitItHappenedUnder(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := namespace(t, c)
	ctx := t.Context()
	gi, applied := resource.MustParse("1Gi"), resource.MustParse("250Mi")
	rsr := &v1alpha1.RightsizingRecommendation{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: v1alpha1.RightsizingRecommendationSpec{
			TargetRef:  v1alpha1.TargetRef{APIVersion: "apps/v1", Kind: v1alpha1.KindDeployment, Name: "web"},
			Strategy:   v1alpha1.StrategyInPlace,
			Containers: []v1alpha1.ContainerResources{{Name: "app", Limits: &v1alpha1.ResourceValues{Memory: &applied}}},
		},
	}
	require.NoError(t, c.Create(ctx, rsr))
	pass := time.Now().Add(-10 * time.Second).Truncate(time.Second)
	change := []v1alpha1.ContainerValueChange{{Name: "app",
		Old: v1alpha1.Resources{Limits: &v1alpha1.ResourceValues{Memory: &gi}},
		New: v1alpha1.Resources{Limits: &v1alpha1.ResourceValues{Memory: &applied}}}}
	back := []v1alpha1.ContainerValueChange{{Name: "app",
		Old: v1alpha1.Resources{Limits: &v1alpha1.ResourceValues{Memory: &applied}},
		New: v1alpha1.Resources{Limits: &v1alpha1.ResourceValues{Memory: &gi}}}}
	rsr.Status.History = []v1alpha1.Action{
		{Seq: 1, Time: metav1.NewTime(pass.Add(2 * time.Second)), Type: v1alpha1.ActionApplied, Resources: []v1alpha1.ResourceName{v1alpha1.ResourceMemory}, Containers: change},
		{Seq: 2, Time: metav1.NewTime(pass.Add(6 * time.Second)), Type: v1alpha1.ActionRolledBack, Reason: v1alpha1.HealthWatchOOMKills, Resources: []v1alpha1.ResourceName{v1alpha1.ResourceMemory}, Containers: back},
	}
	require.NoError(t, c.Status().Update(ctx, rsr))

	r := &Loop{client: c}
	ref := workload.Ref{Kind: v1alpha1.KindDeployment, Namespace: ns, Name: "web"}
	assert.Equal(t, applied.Value(), r.killLimit(ctx, ref, "app", pass, gi.Value(), gi.Value()),
		"applied and rolled back since the previous pass: the kill was under 250Mi")
	assert.Equal(t, gi.Value(), r.killLimit(ctx, ref, "app", pass.Add(8*time.Second), gi.Value(), gi.Value()),
		"both before the previous pass, which saw the limit: 1Gi")
	assert.Equal(t, applied.Value(), r.killLimit(ctx, ref, "app", pass.Add(8*time.Second), gi.Value(), applied.Value()),
		"the previous pass saw 250Mi")
	assert.Equal(t, gi.Value(), r.killLimit(ctx, ref, "other", pass, gi.Value(), 0), "another container's history is not this one's")
	other := workload.Ref{Kind: v1alpha1.KindStatefulSet, Namespace: ns, Name: "web"}
	assert.Equal(t, gi.Value(), r.killLimit(ctx, other, "app", pass, gi.Value(), 0), "a recommendation of another workload kind is not read")
}
