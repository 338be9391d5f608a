package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/workload"
	"github.com/kerf-dev/kerf/test/controlplane"
)

// cachedKinds reads kerf_leader_cached_objects of l: objects held by kind.
func cachedKinds(t *testing.T, l *testLeader) map[string]float64 {
	t.Helper()
	mfs, err := l.registry.Gather()
	require.NoError(t, err)
	kinds := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "kerf_leader_cached_objects" {
			continue
		}
		for _, m := range mf.GetMetric() {
			kinds[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
		}
	}
	return kinds
}

// TestTheCacheHoldsEachReplicaSetOnce: finding a pod's workload
// (workload.Of, as the webhook and the pod watch do) reads the ReplicaSet
// the cache already holds whole; asking the cache for its metadata alone
// started a second informer holding every ReplicaSet's metadata again
// (15 MB at 25,000 workloads). kerf_leader_cached_objects counts what each
// kind's informers hold.
func TestTheCacheHoldsEachReplicaSetOnce(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := namespace(t, c)
	ctx := context.Background()
	dep := deployment(ns, "web", "500m", "256Mi")
	require.NoError(t, c.Create(ctx, dep))
	pod := runningPod(t, c, dep)

	l := startLeader(t, ns, "a", Config{})
	cache := l.Manager().GetCache()
	// Each kind's informer syncs on its own: the pod can be cached before
	// the Deployment is, so the test waits for both before counting.
	var cached corev1.Pod
	var cachedDep appsv1.Deployment
	require.Eventually(t, func() bool {
		return cache.Get(ctx, client.ObjectKeyFromObject(pod), &cached) == nil &&
			cache.Get(ctx, client.ObjectKeyFromObject(dep), &cachedDep) == nil
	}, 30*time.Second, 50*time.Millisecond)
	ref, ok, err := workload.Of(ctx, l.Manager().GetClient(), &cached)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, workload.Ref{Kind: v1alpha1.KindDeployment, Namespace: ns, Name: "web"}, ref)

	kinds := cachedKinds(t, l)
	assert.GreaterOrEqual(t, kinds["ReplicaSet"], 1.0, "the ReplicaSets are cached: %v", kinds)
	assert.GreaterOrEqual(t, kinds["Pod"], 1.0, "and the pods: %v", kinds)
	assert.GreaterOrEqual(t, kinds["Deployment"], 1.0, "and the Deployments: %v", kinds)
	assert.NotContains(t, kinds, "ReplicaSet (metadata)", "no second informer of ReplicaSets: %v", kinds)
}
