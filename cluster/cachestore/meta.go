package cachestore

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// cachedMeta is what a cachedPod, cachedReplicaSet and cachedDeployment
// keep of their metadata. It drops the self link, the deletion grace
// period and the managed fields, which the apiserver keeps or restores on
// an update, and the object keeps no TypeMeta (its kind is its type's:
// fixedKind). It keeps the generate name (interned) and the finalizers,
// which Kerf does not read: a resize carries the metadata of the pod it
// was made from, and the apiserver restores neither
// (TestTheCacheHoldsPodsWithoutWhatKerfNeverReads, in cluster/). A
// metav1.ObjectMeta and a TypeMeta are 264 bytes inline, a cachedMeta 168
// (TestCachedMetaKeepsWhatKerfReads).
//
// It implements metav1.Object, which the informers, the indexes and the
// event handlers read. Its setters of what it drops do nothing: nothing
// writes a stored object, and the transform drops those fields before.
type cachedMeta struct {
	name, namespace, resourceVersion string
	generateName                     string
	uid                              types.UID
	generation                       int64
	creationTimestamp                metav1.Time
	deletionTimestamp                *metav1.Time
	labels, annotations              map[string]string
	ownerReferences                  []metav1.OwnerReference
	// finalizers points to the finalizers, nil when there are none (most
	// objects): 8 bytes inline rather than 24 keep a cachedPod within
	// 512.
	finalizers *[]string
}

var _ metav1.Object = (*cachedMeta)(nil)

// keepMeta returns what a cachedMeta keeps of m, sharing its maps and
// slices: m is not used after.
func keepMeta(m *metav1.ObjectMeta) cachedMeta {
	return cachedMeta{name: m.Name, namespace: m.Namespace, resourceVersion: m.ResourceVersion, uid: m.UID,
		generateName: internString(m.GenerateName), finalizers: finalizersOf(m.Finalizers),
		generation: m.Generation, creationTimestamp: m.CreationTimestamp, deletionTimestamp: m.DeletionTimestamp,
		labels: m.Labels, annotations: m.Annotations, ownerReferences: m.OwnerReferences}
}

// view returns the metadata m keeps as a metav1.ObjectMeta sharing its
// maps, slices and pointers, only to be read.
func (m *cachedMeta) view() metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: m.name, Namespace: m.namespace, ResourceVersion: m.resourceVersion, UID: m.uid,
		GenerateName: m.generateName, Finalizers: m.GetFinalizers(),
		Generation: m.generation, CreationTimestamp: m.creationTimestamp, DeletionTimestamp: m.deletionTimestamp,
		Labels: m.labels, Annotations: m.annotations, OwnerReferences: m.ownerReferences}
}

// copyInto writes the metadata m keeps into dst, sharing nothing.
func (m *cachedMeta) copyInto(dst *metav1.ObjectMeta) {
	v := m.view()
	v.DeepCopyInto(dst)
}

// GetNamespace implements metav1.Object.
func (m *cachedMeta) GetNamespace() string { return m.namespace }

// SetNamespace implements metav1.Object.
func (m *cachedMeta) SetNamespace(namespace string) { m.namespace = namespace }

// GetName implements metav1.Object.
func (m *cachedMeta) GetName() string { return m.name }

// SetName implements metav1.Object.
func (m *cachedMeta) SetName(name string) { m.name = name }

// GetGenerateName implements metav1.Object.
func (m *cachedMeta) GetGenerateName() string { return m.generateName }

// SetGenerateName implements metav1.Object.
func (m *cachedMeta) SetGenerateName(name string) { m.generateName = name }

// GetUID implements metav1.Object.
func (m *cachedMeta) GetUID() types.UID { return m.uid }

// SetUID implements metav1.Object.
func (m *cachedMeta) SetUID(uid types.UID) { m.uid = uid }

// GetResourceVersion implements metav1.Object.
func (m *cachedMeta) GetResourceVersion() string { return m.resourceVersion }

// SetResourceVersion implements metav1.Object.
func (m *cachedMeta) SetResourceVersion(version string) { m.resourceVersion = version }

// GetGeneration implements metav1.Object.
func (m *cachedMeta) GetGeneration() int64 { return m.generation }

// SetGeneration implements metav1.Object.
func (m *cachedMeta) SetGeneration(generation int64) { m.generation = generation }

// GetSelfLink implements metav1.Object: a cachedMeta keeps none.
func (m *cachedMeta) GetSelfLink() string { return "" }

// SetSelfLink implements metav1.Object: a cachedMeta keeps none.
func (m *cachedMeta) SetSelfLink(string) {}

// GetCreationTimestamp implements metav1.Object.
func (m *cachedMeta) GetCreationTimestamp() metav1.Time { return m.creationTimestamp }

// SetCreationTimestamp implements metav1.Object.
func (m *cachedMeta) SetCreationTimestamp(timestamp metav1.Time) { m.creationTimestamp = timestamp }

// GetDeletionTimestamp implements metav1.Object.
func (m *cachedMeta) GetDeletionTimestamp() *metav1.Time { return m.deletionTimestamp }

// SetDeletionTimestamp implements metav1.Object.
func (m *cachedMeta) SetDeletionTimestamp(timestamp *metav1.Time) { m.deletionTimestamp = timestamp }

// GetDeletionGracePeriodSeconds implements metav1.Object: a cachedMeta
// keeps none.
func (m *cachedMeta) GetDeletionGracePeriodSeconds() *int64 { return nil }

// SetDeletionGracePeriodSeconds implements metav1.Object: a cachedMeta
// keeps none.
func (m *cachedMeta) SetDeletionGracePeriodSeconds(*int64) {}

// GetLabels implements metav1.Object.
func (m *cachedMeta) GetLabels() map[string]string { return m.labels }

// SetLabels implements metav1.Object.
func (m *cachedMeta) SetLabels(labels map[string]string) { m.labels = labels }

// GetAnnotations implements metav1.Object.
func (m *cachedMeta) GetAnnotations() map[string]string { return m.annotations }

// SetAnnotations implements metav1.Object.
func (m *cachedMeta) SetAnnotations(annotations map[string]string) { m.annotations = annotations }

// GetFinalizers implements metav1.Object.
func (m *cachedMeta) GetFinalizers() []string {
	if m.finalizers == nil {
		return nil
	}
	return *m.finalizers
}

// SetFinalizers implements metav1.Object.
func (m *cachedMeta) SetFinalizers(finalizers []string) { m.finalizers = finalizersOf(finalizers) }

// finalizersOf is what a cachedMeta keeps of finalizers.
func finalizersOf(finalizers []string) *[]string {
	if finalizers == nil {
		return nil
	}
	return &finalizers
}

// GetOwnerReferences implements metav1.Object.
func (m *cachedMeta) GetOwnerReferences() []metav1.OwnerReference { return m.ownerReferences }

// SetOwnerReferences implements metav1.Object.
func (m *cachedMeta) SetOwnerReferences(refs []metav1.OwnerReference) { m.ownerReferences = refs }

// GetManagedFields implements metav1.Object: a cachedMeta keeps none.
func (m *cachedMeta) GetManagedFields() []metav1.ManagedFieldsEntry { return nil }

// SetManagedFields implements metav1.Object: a cachedMeta keeps none.
func (m *cachedMeta) SetManagedFields([]metav1.ManagedFieldsEntry) {}

// fixedKind is the kind of a cached type, its objects' GetObjectKind: they
// keep no TypeMeta of their own. Setting it does nothing.
type fixedKind struct {
	gvk      schema.GroupVersionKind
	typeMeta metav1.TypeMeta
}

// The kinds of the cached types.
var (
	podKind        = newFixedKind(corev1.SchemeGroupVersion.WithKind("Pod"))
	replicaSetKind = newFixedKind(appsv1.SchemeGroupVersion.WithKind("ReplicaSet"))
	deploymentKind = newFixedKind(appsv1.SchemeGroupVersion.WithKind("Deployment"))
)

func newFixedKind(gvk schema.GroupVersionKind) *fixedKind {
	apiVersion, kind := gvk.ToAPIVersionAndKind()
	return &fixedKind{gvk: gvk, typeMeta: metav1.TypeMeta{APIVersion: apiVersion, Kind: kind}}
}

// SetGroupVersionKind implements schema.ObjectKind: the kind is fixed.
func (*fixedKind) SetGroupVersionKind(schema.GroupVersionKind) {}

// GroupVersionKind implements schema.ObjectKind.
func (k *fixedKind) GroupVersionKind() schema.GroupVersionKind { return k.gvk }
