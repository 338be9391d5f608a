package cachestore

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"reflect"
	goruntime "runtime"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/cluster/workload"
	"github.com/kerf-dev/kerf/internal/kube"
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/kubetest"
)

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
	with := func(max int) func(any) (any, error) {
		table := &interner{lists: map[string]corev1.ResourceList{}, max: max}
		return func(obj any) (any, error) {
			saved := resourceLists
			resourceLists = table
			defer func() { resourceLists = saved }()
			return Transform(obj)
		}
	}
	whole, interned, objs2 := heldHeap(t, raw, with(0), with(maxInternedLists))
	t.Logf("%d pods, live heap: %.0f bytes a pod with each its own resource lists, %.0f interned (%.0f %%)",
		n, float64(whole)/n, float64(interned)/n, 100*float64(interned)/float64(whole))
	assert.Less(t, float64(interned), 0.8*float64(whole), "interning saves at least a fifth of a cached pod")
	// Still equal values, and a reader's deep copy is its own.
	p0, p1 := objs2[0].(*cachedPod), objs2[1].(*cachedPod)
	assert.Equal(t, "256Mi", p1.status.containers[0].Resources.Limits.Memory().String())
	cp := p0.DeepCopyObject().(*corev1.Pod)
	cp.Spec.Containers[0].Resources.Limits[corev1.ResourceMemory] = resource.MustParse("1Gi")
	cp.Status.ContainerStatuses[0].Resources.Limits[corev1.ResourceMemory] = resource.MustParse("1Gi")
	assert.Equal(t, "256Mi", p1.containers[0].resources.Limits.Memory().String(), "a copy's write stays in the copy")
	assert.Equal(t, "256Mi", p0.status.containers[0].Resources.Limits.Memory().String(), "and so does a write to its status")
	// The namespace and the container's name are one string across pods.
	assert.Equal(t, unsafe.StringData(p0.namespace), unsafe.StringData(p1.namespace), "one namespace")
	assert.Equal(t, unsafe.StringData(p0.containers[0].name), unsafe.StringData(p1.containers[0].name), "one container name")
	assert.Equal(t, unsafe.StringData(p0.status.containers[0].Name), unsafe.StringData(p1.containers[0].name), "in the status too")
}

// TestStrippingShrinksTheCachedTemplates: Deployments and their
// ReplicaSets as the scale benchmark makes them, defaulted by the real
// apiserver, decoded from protobuf as the informer decodes them, hold far
// less heap as cachedDeployment and cachedReplicaSet (their templates
// stripped to a digest and what Kerf reads) than with the transform
// before either (managed fields dropped, resource lists interned,
// templates whole); the figures are logged (docs/performance.md).
func TestStrippingShrinksTheCachedTemplates(t *testing.T) {
	cp := controlplane.Get(t)
	c := cp.Client
	ns := kubetest.Namespace(t, c)
	ctx := context.Background()
	dep := kubetest.Deployment(ns, "w-00000", "100m", "256Mi")
	dep.Spec.Template.Spec.Containers[0].Image = "registry.k8s.io/pause:3.10"
	require.NoError(t, c.Create(ctx, dep))
	labels := map[string]string{"app": dep.Name, appsv1.DefaultDeploymentUniqueLabelKey: "5d8f7c9b6"}
	tmpl := dep.Spec.Template.DeepCopy()
	tmpl.Labels = labels
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: dep.Name + "-5d8f7c9b6", Labels: labels,
			Annotations: map[string]string{"deployment.kubernetes.io/desired-replicas": "1", "deployment.kubernetes.io/max-replicas": "2",
				"deployment.kubernetes.io/revision": "1"},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(dep, appsv1.SchemeGroupVersion.WithKind("Deployment"))}},
		Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: *tmpl},
	}
	require.NoError(t, c.Create(ctx, rs))
	var liveDep appsv1.Deployment
	var liveRS appsv1.ReplicaSet
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(dep), &liveDep))
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(rs), &liveRS))
	require.NotEmpty(t, liveDep.Spec.Template.Spec.Containers[0].TerminationMessagePath, "the apiserver defaulted the template")

	const n = 2000
	ser := protobuf.NewSerializer(kube.Scheme, kube.Scheme)
	var raw [][]byte
	for i := range n {
		name := fmt.Sprintf("w-%05d", i)
		d, r := liveDep.DeepCopy(), liveRS.DeepCopy()
		d.TypeMeta = metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"}
		r.TypeMeta = metav1.TypeMeta{APIVersion: "apps/v1", Kind: "ReplicaSet"}
		d.Name, d.Labels, d.Spec.Template.Labels = name, map[string]string{"app": name}, map[string]string{"app": name}
		d.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}}
		d.UID = types.UID(fmt.Sprintf("d-%05d", i))
		rl := map[string]string{"app": name, appsv1.DefaultDeploymentUniqueLabelKey: "5d8f7c9b6"}
		r.Name, r.Labels, r.Spec.Template.Labels = name+"-5d8f7c9b6", rl, rl
		r.Spec.Selector = &metav1.LabelSelector{MatchLabels: rl}
		r.OwnerReferences[0].Name, r.OwnerReferences[0].UID = name, d.UID
		for _, o := range []runtime.Object{d, r} {
			var buf bytes.Buffer
			require.NoError(t, ser.Encode(o, &buf))
			raw = append(raw, buf.Bytes())
		}
	}
	// previous is the transform before the templates were stripped.
	previous := func(obj any) (any, error) {
		obj.(metav1.Object).SetManagedFields(nil)
		switch o := obj.(type) {
		case *appsv1.Deployment:
			internSpec(&o.Spec.Template.Spec)
		case *appsv1.ReplicaSet:
			internSpec(&o.Spec.Template.Spec)
		}
		return obj, nil
	}
	whole, stripped, objs2 := heldHeap(t, raw, previous, Transform)
	t.Logf("%d Deployments and %d ReplicaSets, live heap: %.0f bytes a Deployment and its ReplicaSet with the templates whole, %.0f stripped (%.0f %%)",
		n, n, float64(whole)/n, float64(stripped)/n, 100*float64(stripped)/float64(whole))
	assert.Less(t, float64(stripped), 0.75*float64(whole), "stripping the templates saves at least a quarter of a cached Deployment and ReplicaSet")
	d0, r0 := objs2[0].(*cachedDeployment).Deployment(), objs2[1].(*cachedReplicaSet).ReplicaSet()
	assert.Equal(t, workload.TemplateDigest(&liveDep.Spec.Template), workload.TemplateDigest(&r0.Spec.Template),
		"the stripped ReplicaSet's digest is the whole Deployment's")
	assert.Equal(t, "256Mi", d0.Spec.Template.Spec.Containers[0].Resources.Limits.Memory().String())
}

// TestEqualStringMapsAreShared: the cache's label and annotation sets
// equal in content are one map; sets that differ in a key or a value are
// not, even where joining their keys and values would read the same; and
// a full table starts over, so that it never stops interning.
func TestEqualStringMapsAreShared(t *testing.T) {
	in := &mapInterner{sharedTable[map[string]string]{max: 3}}
	same := func(a, b map[string]string) bool {
		return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
	}
	a := in.intern(map[string]string{"app": "web", "pod-template-hash": "h1"})
	b := in.intern(map[string]string{"pod-template-hash": "h1", "app": "web"})
	assert.True(t, same(a, b), "equal sets share one map")
	assert.Equal(t, map[string]string{"app": "web", "pod-template-hash": "h1"}, b)
	c := in.intern(map[string]string{"app": "web", "pod-template-hash": "h2"})
	assert.False(t, same(a, c), "another value is another map")
	d := in.intern(map[string]string{"a": "1", "b": "2"})
	e := in.intern(map[string]string{"a": "1\x00b\x002"})
	assert.False(t, same(d, e), "values are not confused with the keys after them")
	assert.Nil(t, in.intern(nil), "nil stays nil")
	big := map[string]string{"kubectl.kubernetes.io/last-applied-configuration": strings.Repeat("x", maxInternedMapBytes)}
	assert.False(t, same(in.intern(big), in.intern(maps.Clone(big))), "a set larger than maxInternedMapBytes is kept as it is")
	assert.Len(t, in.values, 1, "the full table started over at the fourth set")
	f := in.intern(map[string]string{"app": "web", "pod-template-hash": "h1"})
	assert.False(t, same(a, f), "a set interned before the table started over is interned anew")
	assert.True(t, same(f, in.intern(map[string]string{"app": "web", "pod-template-hash": "h1"})), "and shared again from then on")
}

// heldHeap decodes raw from protobuf, as the informer decodes, and
// transforms each object with first, then all again with second; it
// returns the live heap each set of results held and the second's
// results. raw stays live through both measures: else the second would
// count its bytes as freed.
func heldHeap(t *testing.T, raw [][]byte, first, second func(any) (any, error)) (firstBytes, secondBytes uint64, objs []any) {
	t.Helper()
	return heldHeapOf(t, protobuf.NewSerializer(kube.Scheme, kube.Scheme), raw, first, second)
}

// heldHeapOf is heldHeap with the objects decoded by ser (JSON for a
// custom resource, as the apiserver serves it).
func heldHeapOf(t *testing.T, ser runtime.Decoder, raw [][]byte, first, second func(any) (any, error)) (firstBytes, secondBytes uint64, objs []any) {
	t.Helper()
	held := func(transform func(any) (any, error)) (uint64, []any) {
		var before, after goruntime.MemStats
		goruntime.GC()
		goruntime.ReadMemStats(&before)
		objs := make([]any, len(raw))
		for i, b := range raw {
			obj, _, err := ser.Decode(b, nil, nil)
			require.NoError(t, err)
			objs[i], err = transform(obj)
			require.NoError(t, err)
		}
		goruntime.GC()
		goruntime.ReadMemStats(&after)
		return after.HeapAlloc - before.HeapAlloc, objs
	}
	firstBytes, objs = held(first)
	goruntime.KeepAlive(objs)
	objs = nil
	secondBytes, objs = held(second)
	goruntime.KeepAlive(raw)
	return firstBytes, secondBytes, objs
}

// TestCachedDeploymentsKeepTheProgressingCondition: of the conditions the
// deployment controller writes on every Deployment, a cached one keeps the
// Progressing condition's type, status and reason, what the
// RolloutInProgress gate reads, and nothing else of them. Decoded from
// protobuf as the informer decodes them, 2,000 Deployments with the
// controller's status hold less heap than with the whole status kept;
// the figures are logged (docs/leader.md).
func TestCachedDeploymentsKeepTheProgressingCondition(t *testing.T) {
	const n = 2000
	ser := protobuf.NewSerializer(kube.Scheme, kube.Scheme)
	at := metav1.Unix(1_765_000_000, 0)
	raw := make([][]byte, n)
	for i := range raw {
		name := fmt.Sprintf("w-%05d", i)
		d := kubetest.Deployment("shop", name, "500m", "256Mi")
		d.TypeMeta = metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"}
		d.UID, d.Generation = types.UID(fmt.Sprintf("d-%05d", i)), 2
		d.Status = appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 1, UpdatedReplicas: 1, ReadyReplicas: 1, AvailableReplicas: 1,
			Conditions: []appsv1.DeploymentCondition{
				{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, LastUpdateTime: at, LastTransitionTime: at,
					Reason: "MinimumReplicasAvailable", Message: "Deployment has minimum availability."},
				{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, LastUpdateTime: at, LastTransitionTime: at,
					Reason: "NewReplicaSetAvailable", Message: fmt.Sprintf("ReplicaSet %q has successfully progressed.", name+"-5d8f7c9b6")},
			}}
		var buf bytes.Buffer
		require.NoError(t, ser.Encode(d, &buf))
		raw[i] = buf.Bytes()
	}
	// whole is the transform before: the status kept as decoded.
	whole := func(obj any) (any, error) {
		status := obj.(*appsv1.Deployment).Status
		c, err := Transform(obj)
		if err == nil {
			c.(*cachedDeployment).status = status
		}
		return c, err
	}
	before, now, objs := heldHeap(t, raw, whole, Transform)
	t.Logf("%d Deployments with the deployment controller's status, live heap: %.0f bytes a Deployment with its whole status, %.0f with the Progressing condition's status and reason",
		n, float64(before)/n, float64(now)/n)
	assert.Less(t, float64(now)+200*n, float64(before), "the conditions' messages, reasons and times save at least 200 bytes a Deployment")

	read := objs[0].(*cachedDeployment).Deployment()
	assert.Equal(t, []appsv1.DeploymentCondition{{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: "NewReplicaSetAvailable"}},
		read.Status.Conditions, "only what the RolloutInProgress gate reads of the conditions")
	assert.Equal(t, int32(1), read.Status.AvailableReplicas, "the counts are kept")
	assert.Equal(t, unsafe.StringData(objs[0].(*cachedDeployment).status.Conditions[0].Reason),
		unsafe.StringData(objs[1].(*cachedDeployment).status.Conditions[0].Reason), "one reason string across Deployments")
}
