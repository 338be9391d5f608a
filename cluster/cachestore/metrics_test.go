package cachestore

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/kerf-dev/kerf/internal/kube"
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/kubetest"
)

// TestObjectCountsCountEachInformersObjects: kerf_leader_cached_objects
// counts the objects each informer of a cache holds, by the kind it
// watches, a metadata-only informer as "Kind (metadata)".
func TestObjectCountsCountEachInformersObjects(t *testing.T) {
	cp := controlplane.Get(t)
	c := cp.Client
	ns := kubetest.Namespace(t, c)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	dep := kubetest.Deployment(ns, "web", "500m", "256Mi")
	require.NoError(t, c.Create(ctx, dep))
	kubetest.RunningPod(t, c, dep)

	reg := prometheus.NewPedanticRegistry()
	cc, err := NewCache(cp.Config, cache.Options{Scheme: kube.Scheme, DefaultTransform: Transform,
		NewInformer: NewObjectCounts(reg).NewInformer, DefaultNamespaces: map[string]cache.Config{ns: {}}})
	require.NoError(t, err)
	_, err = cc.GetInformer(ctx, &corev1.Pod{}, cache.BlockUntilSynced(false))
	require.NoError(t, err)
	replicaSets := &metav1.PartialObjectMetadata{}
	replicaSets.SetGroupVersionKind(appsv1.SchemeGroupVersion.WithKind("ReplicaSet"))
	_, err = cc.GetInformer(ctx, replicaSets, cache.BlockUntilSynced(false))
	require.NoError(t, err)
	go func() { _ = cc.Start(ctx) }()
	require.True(t, cc.WaitForCacheSync(ctx))

	mfs, err := reg.Gather()
	require.NoError(t, err)
	kinds := map[string]float64{}
	for _, mf := range mfs {
		require.Equal(t, "kerf_leader_cached_objects", mf.GetName())
		for _, m := range mf.GetMetric() {
			kinds[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
		}
	}
	assert.Equal(t, map[string]float64{"Pod": 1, "ReplicaSet (metadata)": 1}, kinds)
}
