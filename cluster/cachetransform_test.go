package cluster

import (
	"bytes"
	"context"
	"fmt"
	goruntime "runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/internal/kube"
	"github.com/kerf-dev/kerf/test/controlplane"
)

// TestTheCacheHoldsPodsWithoutWhatKerfNeverReads: the leader's cache keeps
// no managed fields (of pods, ReplicaSets, Deployments) and of a pod none
// of its volumes, environment, probes or scheduling constraints, but all
// that Kerf reads; and a resize written from the stripped cached pod, as
// the in-place apply writes it, changes only the resources: the stored
// pod keeps what the cache dropped.
func TestTheCacheHoldsPodsWithoutWhatKerfNeverReads(t *testing.T) {
	cp := controlplane.Get(t)
	c := cp.Client
	ns := namespace(t, c)
	ctx := context.Background()
	dep := deployment(ns, "web", "500m", "256Mi")
	dep.Spec.Template.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	app := &dep.Spec.Template.Spec.Containers[0]
	app.Env = []corev1.EnvVar{{Name: "MODE", Value: "serve"}}
	app.Command = []string{"/kerf-workload"}
	app.VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
	app.ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}}
	dep.Spec.Template.Spec.Tolerations = []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpExists}}
	require.NoError(t, c.Create(ctx, dep))
	pod := runningPod(t, c, dep)
	var live corev1.Pod
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(pod), &live))
	require.NotEmpty(t, live.ManagedFields, "the apiserver keeps managed fields (else this test checks nothing)")

	l := startLeader(t, ns, "a", Config{})
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
	var cachedDep appsv1.Deployment
	require.NoError(t, cache.Get(ctx, client.ObjectKeyFromObject(dep), &cachedDep))
	assert.Equal(t, dep.Spec.Template.Spec.Containers[0].Env, cachedDep.Spec.Template.Spec.Containers[0].Env,
		"a workload's template is kept whole: ReplicaSets' templates are compared with it")

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

// TestInterningShrinksTheCachedPods: pods as the scale benchmark makes
// them (one container, 100m / 256Mi, Running), decoded from protobuf as
// the informer decodes them and transformed, hold far less heap with their
// resource lists interned; the figures are logged (docs/performance.md).
func TestInterningShrinksTheCachedPods(t *testing.T) {
	const n = 5000
	ser := protobuf.NewSerializer(kube.Scheme, kube.Scheme)
	raw := make([][]byte, n)
	for i := range n {
		res := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("256Mi")}
		pod := &corev1.Pod{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
			ObjectMeta: metav1.ObjectMeta{Namespace: "scale-000", Name: fmt.Sprintf("w-%05d-g1-0", i), Labels: map[string]string{"app": fmt.Sprintf("w-%05d", i)}},
			Spec: corev1.PodSpec{NodeName: "node-0001", Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10",
				Resources: corev1.ResourceRequirements{Requests: res, Limits: res.DeepCopy()}}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{Name: "app", Ready: true,
				Resources: &corev1.ResourceRequirements{Requests: res.DeepCopy(), Limits: res.DeepCopy()}}}},
		}
		var buf bytes.Buffer
		require.NoError(t, ser.Encode(pod, &buf))
		raw[i] = buf.Bytes()
	}
	held := func(max int) (uint64, []runtime.Object) {
		saved := resourceLists
		resourceLists = &interner{lists: map[string]corev1.ResourceList{}, max: max}
		defer func() { resourceLists = saved }()
		var before, after goruntime.MemStats
		goruntime.GC()
		goruntime.ReadMemStats(&before)
		objs := make([]runtime.Object, n)
		for i, b := range raw {
			obj, _, err := ser.Decode(b, nil, nil)
			require.NoError(t, err)
			_, err = cacheTransform(obj)
			require.NoError(t, err)
			objs[i] = obj
		}
		goruntime.GC()
		goruntime.ReadMemStats(&after)
		return after.HeapAlloc - before.HeapAlloc, objs
	}
	whole, objs := held(0)
	goruntime.KeepAlive(objs)
	objs = nil
	interned, objs2 := held(maxInternedLists)
	goruntime.KeepAlive(objs2)
	t.Logf("%d pods, live heap: %.0f bytes a pod with each its own resource lists, %.0f interned (%.0f %%)",
		n, float64(whole)/n, float64(interned)/n, 100*float64(interned)/float64(whole))
	assert.Less(t, float64(interned), 0.8*float64(whole), "interning saves at least a fifth of a cached pod")
	// Still equal values, and a reader's deep copy is its own.
	p0, p1 := objs2[0].(*corev1.Pod), objs2[1].(*corev1.Pod)
	assert.Equal(t, "256Mi", p1.Status.ContainerStatuses[0].Resources.Limits.Memory().String())
	cp := p0.DeepCopy()
	cp.Spec.Containers[0].Resources.Limits[corev1.ResourceMemory] = resource.MustParse("1Gi")
	assert.Equal(t, "256Mi", p1.Spec.Containers[0].Resources.Limits.Memory().String(), "a copy's write stays in the copy")
}
