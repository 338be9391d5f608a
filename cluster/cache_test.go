package cluster_test

// The leader's cache (cluster/cachestore) as a whole replica reads it:
// what it holds, what a write from a cached pod keeps, and its sizes
// metric. The store's own tests are in cluster/cachestore.

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster"
	"github.com/kerf-dev/kerf/cluster/workload"
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/kubetest"
	"github.com/kerf-dev/kerf/test/leadertest"
)

// cachedKinds reads kerf_leader_cached_objects of l: objects held by kind.
func cachedKinds(t *testing.T, l *leadertest.Replica) map[string]float64 {
	t.Helper()
	mfs, err := l.Registry().Gather()
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
	ns := kubetest.Namespace(t, c)
	ctx := context.Background()
	dep := kubetest.Deployment(ns, "web", "500m", "256Mi")
	require.NoError(t, c.Create(ctx, dep))
	pod := kubetest.RunningPod(t, c, dep)

	l := leadertest.StartReplica(t, ns, "a", cluster.Config{})
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

// TestTheCacheHoldsPodsWithoutWhatKerfNeverReads: the leader's cache keeps
// no managed fields (of pods, ReplicaSets, Deployments) and of a pod none
// of its volumes, environment, probes or scheduling constraints, but all
// that Kerf reads; and a resize written from the stripped cached pod, as
// the in-place apply writes it, changes only the resources: the stored
// pod keeps what the cache dropped.
func TestTheCacheHoldsPodsWithoutWhatKerfNeverReads(t *testing.T) {
	cp := controlplane.Get(t)
	c := cp.Client
	ns := kubetest.Namespace(t, c)
	ctx := context.Background()
	dep := kubetest.Deployment(ns, "web", "500m", "256Mi")
	dep.Spec.Template.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	app := &dep.Spec.Template.Spec.Containers[0]
	app.Env = []corev1.EnvVar{{Name: "MODE", Value: "serve"}}
	app.Command = []string{"/kerf-workload"}
	app.VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
	app.ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}}
	dep.Spec.Template.Spec.Tolerations = []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpExists}}
	require.NoError(t, c.Create(ctx, dep))
	pod := kubetest.RunningPod(t, c, dep)
	var live corev1.Pod
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(pod), &live))
	require.NotEmpty(t, live.ManagedFields, "the apiserver keeps managed fields (else this test checks nothing)")

	l := leadertest.StartReplica(t, ns, "a", cluster.Config{})
	cache := l.Manager().GetCache()
	var cached corev1.Pod
	require.Eventually(t, func() bool {
		return cache.Get(ctx, client.ObjectKeyFromObject(pod), &cached) == nil
	}, 30*time.Second, 50*time.Millisecond, "the pod never reached the leader's cache")

	assert.Empty(t, cached.ManagedFields, "the cached pod's managed fields")
	cc := cached.Spec.Containers[0]
	assert.Nil(t, cc.Env, "env")
	assert.Nil(t, cc.Command, "command")
	assert.Nil(t, cc.VolumeMounts, "volume mounts")
	assert.Nil(t, cc.ReadinessProbe, "readiness probe")
	assert.Nil(t, cached.Spec.Volumes, "volumes")
	assert.Nil(t, cached.Spec.Tolerations, "tolerations")
	// What Kerf reads is all there.
	assert.Equal(t, live.Labels, cached.Labels)
	assert.Equal(t, live.OwnerReferences, cached.OwnerReferences)
	assert.Equal(t, live.Spec.NodeName, cached.Spec.NodeName)
	assert.Equal(t, "app", cc.Name)
	assert.Equal(t, "500m", cc.Resources.Requests.Cpu().String())
	assert.Equal(t, live.Spec.Containers[0].ResizePolicy, cc.ResizePolicy)
	assert.Equal(t, live.Status, cached.Status)

	for _, obj := range []client.Object{&appsv1.ReplicaSet{}, &appsv1.Deployment{}} {
		key := client.ObjectKey{Namespace: ns, Name: "web-h1"}
		if _, ok := obj.(*appsv1.Deployment); ok {
			key.Name = "web"
		}
		require.Eventually(t, func() bool { return cache.Get(ctx, key, obj) == nil }, 30*time.Second, 50*time.Millisecond)
		assert.Empty(t, obj.GetManagedFields(), "the cached %T's managed fields", obj)
	}
	// Of the templates, their digest and what Kerf reads of them; the
	// stored objects keep theirs whole, and no digest annotation.
	var cachedDep, liveDep appsv1.Deployment
	require.NoError(t, cache.Get(ctx, client.ObjectKeyFromObject(dep), &cachedDep))
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(dep), &liveDep))
	var cachedRS, liveRS appsv1.ReplicaSet
	require.NoError(t, cache.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web-h1"}, &cachedRS))
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web-h1"}, &liveRS))
	ct := cachedDep.Spec.Template
	assert.Nil(t, ct.Spec.Containers[0].Env, "the cached template's env")
	assert.Empty(t, ct.Spec.Containers[0].Image, "its image")
	assert.Nil(t, ct.Spec.Volumes, "its volumes")
	assert.Nil(t, ct.Spec.Tolerations, "its tolerations")
	assert.Nil(t, ct.Labels, "its labels")
	assert.Equal(t, "app", ct.Spec.Containers[0].Name)
	assert.Equal(t, liveDep.Spec.Template.Spec.Containers[0].Resources, ct.Spec.Containers[0].Resources, "its resources")
	assert.Equal(t, liveDep.Spec.Template.Spec.Containers[0].ResizePolicy, ct.Spec.Containers[0].ResizePolicy, "its resize policy")
	assert.Equal(t, workload.TemplateDigest(&liveDep.Spec.Template), ct.Annotations[workload.TemplateDigestAnnotation], "the whole template's digest")
	assert.Equal(t, ct.Annotations[workload.TemplateDigestAnnotation], cachedRS.Spec.Template.Annotations[workload.TemplateDigestAnnotation],
		"the ReplicaSet's template is the Deployment's but for pod-template-hash")
	assert.Empty(t, cachedRS.Spec.Template.Spec.Containers, "nothing but the digest of a ReplicaSet's template")
	assert.Equal(t, liveDep.Spec.Replicas, cachedDep.Spec.Replicas)
	assert.Equal(t, liveDep.Spec.Selector, cachedDep.Spec.Selector)
	assert.Equal(t, liveDep.Spec.Strategy, cachedDep.Spec.Strategy)
	assert.Equal(t, liveRS.Labels, cachedRS.Labels)
	assert.Equal(t, liveRS.Spec.Selector, cachedRS.Spec.Selector)
	assert.NotContains(t, liveDep.Spec.Template.Annotations, workload.TemplateDigestAnnotation, "the stored Deployment has no digest")
	assert.Equal(t, dep.Spec.Template.Spec.Containers[0].Env, liveDep.Spec.Template.Spec.Containers[0].Env, "and keeps its env")
	// The current ReplicaSet and its running pods, read from the cache.
	w, err := workload.From(&cachedDep)
	require.NoError(t, err)
	running, err := workload.RunningPods(ctx, l.Manager().GetClient(), w)
	require.NoError(t, err)
	require.Len(t, running, 1, "the pod of the current ReplicaSet, found by the digests")
	assert.Equal(t, pod.Name, running[0].Name)

	// The in-place apply's write: a resize of the cached pod.
	cs, err := kubernetes.NewForConfig(cp.Config)
	require.NoError(t, err)
	desired := cached.DeepCopy()
	desired.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("250m")
	desired.Spec.Containers[0].Resources.Limits[corev1.ResourceCPU] = resource.MustParse("250m")
	_, err = cs.CoreV1().Pods(ns).UpdateResize(ctx, pod.Name, desired, metav1.UpdateOptions{})
	require.NoError(t, err, "resize from the cached pod")
	var after corev1.Pod
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(pod), &after))
	assert.Equal(t, "250m", after.Spec.Containers[0].Resources.Requests.Cpu().String(), "resized")
	ac := after.Spec.Containers[0]
	assert.Equal(t, live.Spec.Containers[0].Env, ac.Env, "the stored pod keeps its env")
	assert.Equal(t, live.Spec.Containers[0].VolumeMounts, ac.VolumeMounts, "and its mounts")
	assert.Equal(t, live.Spec.Containers[0].ReadinessProbe, ac.ReadinessProbe, "and its probe")
	assert.Equal(t, live.Spec.Volumes, after.Spec.Volumes, "and its volumes")
	assert.Equal(t, live.Spec.Tolerations, after.Spec.Tolerations, "and its tolerations")
	assert.NotEmpty(t, after.ManagedFields, "and its managed fields")
}
