package recommender_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/policy"
	"github.com/kerf-dev/kerf/cluster/recommend"
	"github.com/kerf-dev/kerf/cluster/signals"
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/kubetest"
	"github.com/kerf-dev/kerf/test/leadertest"
)

// TestRecommenderWritesNothingForADegradedWorkload: the recommender's
// own recommendation of a Degraded workload keeps its values. What it
// would ask for is recorded as Degraded refusals, which the leader
// counts as a refused action.
func TestRecommenderWritesNothingForADegradedWorkload(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	ctx := context.Background()
	p := kubetest.RecommendingPolicy(ns)
	since := metav1.NewTime(time.Now().Add(-time.Minute).Truncate(time.Second))
	_, _, l := leadertest.RecommendedWebUnder(t, c, ns, p, func(*signals.Stores, *corev1.Pod) {
		// The workload was marked Degraded under this very policy.
		require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(p), p))
		rsr := kubetest.Recommendation(ns, "web", "web", v1alpha1.StrategyInPlace, "500m", "256Mi")
		rsr.Labels = map[string]string{v1alpha1.RecommendedByLabel: v1alpha1.RecommendedByKerf}
		require.NoError(t, c.Create(ctx, rsr))
		rsr.Status = v1alpha1.RightsizingRecommendationStatus{Phase: v1alpha1.PhaseDegraded, Reason: v1alpha1.ReasonDegraded,
			Degraded: &v1alpha1.DegradedState{Since: &since, RolledBack: 3, Of: 5, PolicyFingerprint: policy.Fingerprint(p.Spec)}}
		require.NoError(t, c.Status().Update(ctx, rsr))
	})
	var basis v1alpha1.RecommendationBasis
	rsr := kubetest.WaitRSR(t, c, ns, "web", func(r *v1alpha1.RightsizingRecommendation) bool {
		raw := r.Annotations[v1alpha1.RecommendationBasisAnnotation]
		return raw != "" && json.Unmarshal([]byte(raw), &basis) == nil
	}, "the recommender recorded no basis")
	assert.Equal(t, "500m", rsr.Spec.Containers[0].Requests.CPU.String(), "the values stay")
	assert.Equal(t, "256Mi", rsr.Spec.Containers[0].Requests.Memory.String(), "the values stay")
	assert.Equal(t, int64(1), rsr.Generation, "the spec was never written")
	require.Len(t, basis.Containers, 1)
	require.NotEmpty(t, basis.Containers[0].Refusals, "what it would ask for is recorded")
	for _, f := range basis.Containers[0].Refusals {
		assert.Equal(t, string(recommend.ReasonDegraded), f.Reason, f.Message)
		assert.Contains(t, f.Message, "Degraded since "+since.UTC().Format(time.RFC3339))
	}
	rsr = kubetest.WaitRSR(t, c, ns, "web", func(r *v1alpha1.RightsizingRecommendation) bool {
		return len(kubetest.HistoryOf(r, v1alpha1.ActionRefused)) > 0
	}, "the leader never recorded the refusals")
	assert.Equal(t, string(recommend.ReasonDegraded), kubetest.HistoryOf(rsr, v1alpha1.ActionRefused)[0].Reason)
	assert.Equal(t, v1alpha1.PhaseDegraded, rsr.Status.Phase)
	// Counted once the status write that recorded it has succeeded: a
	// moment after the history reads it (a -race run read it between).
	assert.Eventually(t, func() bool {
		return leadertest.MetricValue(t, l, "kerf_actions_total", "type", "refused", "reason", string(recommend.ReasonDegraded)) > 0
	}, 30*time.Second, 50*time.Millisecond, "kerf_actions_total{type=refused,reason=Degraded}")
}
