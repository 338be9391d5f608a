package cachestore

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/test/kubetest"
)

// TestCachedMetaKeepsWhatKerfReads: a cached pod, ReplicaSet and
// Deployment keep their metadata through metav1.Object and in their
// copies and views, but for what the apiserver keeps or restores on an
// update (the deletion grace period, the managed fields). Their kind is their type's,
// whatever TypeMeta the decoded object carried, and setting it changes
// nothing. The kept metadata is smaller inline than an ObjectMeta with a
// TypeMeta: a cachedPod falls in a smaller size class.
func TestCachedMetaKeepsWhatKerfReads(t *testing.T) {
	deleted := metav1.Unix(1_700_000_100, 0)
	meta := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Namespace: "shop", Name: name, GenerateName: "web-", UID: "u-1", ResourceVersion: "7", Generation: 2,
			CreationTimestamp: metav1.Unix(1_700_000_000, 0), DeletionTimestamp: &deleted, DeletionGracePeriodSeconds: ptr.To[int64](30),
			Finalizers: []string{"example.com/hold"}, Labels: map[string]string{"app": "web"},
			Annotations: map[string]string{"a": "b"}, ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-h1", UID: "rs-1", Controller: ptr.To(true)}}}
	}
	pod := wholePod()
	pod.ObjectMeta = meta("web-h1-0")
	pod.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}
	dep := kubetest.Deployment("shop", "web", "500m", "256Mi")
	dep.ObjectMeta = meta("web")
	rs := &appsv1.ReplicaSet{ObjectMeta: meta("web-h1"), Spec: appsv1.ReplicaSetSpec{Selector: dep.Spec.Selector, Template: dep.Spec.Template}}

	kinds := []schema.GroupVersionKind{corev1.SchemeGroupVersion.WithKind("Pod"),
		appsv1.SchemeGroupVersion.WithKind("Deployment"), appsv1.SchemeGroupVersion.WithKind("ReplicaSet")}
	for i, whole := range []client.Object{pod, dep, rs} {
		want := meta(whole.GetName())
		obj, err := Transform(whole)
		require.NoError(t, err)
		stored, ok := obj.(interface {
			metav1.Object
			runtime.Object
			View() runtime.Object
		})
		require.True(t, ok, "%T is a metav1.Object with a view", obj)
		assert.Equal(t, want.Name, stored.GetName())
		assert.Equal(t, want.Namespace, stored.GetNamespace())
		assert.Equal(t, want.UID, stored.GetUID())
		assert.Equal(t, want.ResourceVersion, stored.GetResourceVersion())
		assert.Equal(t, want.Generation, stored.GetGeneration())
		assert.Equal(t, want.CreationTimestamp, stored.GetCreationTimestamp())
		assert.Equal(t, want.DeletionTimestamp, stored.GetDeletionTimestamp())
		assert.Equal(t, want.Labels, stored.GetLabels())
		assert.Equal(t, want.Annotations, stored.GetAnnotations())
		assert.Equal(t, want.OwnerReferences, stored.GetOwnerReferences())

		kept := want
		kept.DeletionGracePeriodSeconds, kept.ManagedFields = nil, nil
		for _, read := range []runtime.Object{stored.DeepCopyObject(), stored.View()} {
			m, ok := read.(metav1.Object)
			require.True(t, ok)
			assert.Equal(t, &kept, m.(metav1.ObjectMetaAccessor).GetObjectMeta(), "%T keeps the metadata Kerf reads, and only it", read)
			assert.Equal(t, kinds[i], read.GetObjectKind().GroupVersionKind(), "a read %T has its kind", read)
		}
		assert.Equal(t, kinds[i], stored.GetObjectKind().GroupVersionKind())
		stored.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{Kind: "Other"})
		assert.Equal(t, kinds[i], stored.GetObjectKind().GroupVersionKind(), "a cached type's kind is fixed")
	}

	withObjectMeta := unsafe.Sizeof(metav1.TypeMeta{}) + unsafe.Sizeof(metav1.ObjectMeta{})
	t.Logf("inline: TypeMeta and ObjectMeta %d bytes, cachedMeta %d; a cachedPod %d bytes with them, %d now",
		withObjectMeta, unsafe.Sizeof(cachedMeta{}), unsafe.Sizeof(cachedPod{})-unsafe.Sizeof(cachedMeta{})+withObjectMeta, unsafe.Sizeof(cachedPod{}))
	assert.Less(t, unsafe.Sizeof(cachedPod{}), uintptr(512), "a cachedPod fits a size class under 512 bytes (it was 600 with the ObjectMeta)")
}
