package cachestore

import (
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unique"
	"unsafe"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/workload"
)

// Transform is the leader's cache.Options.DefaultTransform: what the
// cache keeps of every object it watches (docs/performance.md, "Where the
// leader's memory goes").
//   - It drops the managed fields, which nothing in Kerf reads. Kerf's
//     writes are patches and a resize, none a server-side apply, and an
//     update without managed fields keeps the stored ones.
//   - A Pod, a ReplicaSet and a Deployment become a cachedPod,
//     cachedReplicaSet and cachedDeployment: types of this package, which
//     every read copies back into the reader's type.
//   - A workload's or ReplicaSet's pod template keeps what stripTemplate
//     keeps, and its digest.
//   - The resource lists of pods and of workload templates are interned
//     (resourceLists). So are the labels, annotations and selectors of
//     pods, ReplicaSets and Deployments (stringMaps). A recommendation's
//     strings and resource values are shared too (internRecommendation).
//   - A Node keeps its metadata, spec and allocatable and capacity
//     (stripNode): the NodeHeadroom gate reads its allocatable.
//
// It runs on each object before the informer stores it, so every reader
// of the manager's cache and client sees the stripped object. Reads
// through the API reader are whole. It is idempotent, and a cached type
// is kept as it is. client-go asks that of a transform that may be handed
// stored objects again, in a Replace; the informers' resyncs are not
// transformed again. Handed an object again, it writes nothing into it:
// readers may be copying it, or another object sharing what it holds.
func Transform(obj any) (any, error) {
	if m, ok := obj.(metav1.Object); ok && m.GetManagedFields() != nil {
		m.SetManagedFields(nil)
	}
	switch o := obj.(type) {
	case *corev1.Pod:
		internPod(o)
		internMeta(&o.ObjectMeta)
		return newCachedPod(o), nil
	case *appsv1.Deployment:
		internMeta(&o.ObjectMeta)
		internSelector(o.Spec.Selector)
		return newCachedDeployment(o), nil
	case *appsv1.ReplicaSet:
		internMeta(&o.ObjectMeta)
		internSelector(o.Spec.Selector)
		return newCachedReplicaSet(o), nil
	case *v1alpha1.RightsizingRecommendation:
		internRecommendation(o)
	case *appsv1.StatefulSet:
		stripTemplate(&o.Spec.Template)
	case *appsv1.DaemonSet:
		stripTemplate(&o.Spec.Template)
	case *corev1.Node:
		stripNode(o)
	}
	return obj, nil
}

// NewCache is the leader's cache, a cache.NewCacheFunc
// (ctrl.Options.NewCache): a *Cache, whose lists by a field index read the
// value's bucket. It knows the kinds Transform stores in forms of its
// own, so that a read of them that only reads
// (client.UnsafeDisableDeepCopy) gets a view (cachedPod.View) rather than
// failing. A Get of the metadata of those kinds, and of StatefulSets and
// DaemonSets, reads their typed informers (getMeta).
func NewCache(config *rest.Config, opts cache.Options) (cache.Cache, error) {
	inner, err := cache.New(config, opts)
	if err != nil {
		return nil, err
	}
	c := wrap(inner, opts.Scheme)
	if err := c.answersMeta(&appsv1.StatefulSet{}, &appsv1.DaemonSet{}); err != nil {
		return nil, err
	}
	return c, c.storesViews(&corev1.Pod{}, &appsv1.ReplicaSet{}, &appsv1.Deployment{})
}

// maxInternedLists bounds the distinct resource lists interned. Past it a
// new list is kept as decoded. Each entry is about 100 bytes of key and a
// map: a few MB at most.
const maxInternedLists = 20000

// resourceLists holds one shared map per distinct resource list of the
// cached objects. A ResourceList is a Go map of its own: four per pod,
// the requests and limits of the spec and of the status, and two per
// template. Nearly all are equal between the pods of a workload. They
// were the largest part of the cached objects at scale
// (docs/performance.md). A shared map is never written: the cache's
// readers get deep copies (controller-runtime's cache reader copies every
// object it returns), and the event handlers only read.
var resourceLists = &interner{lists: map[string]corev1.ResourceList{}, max: maxInternedLists}

// interner is a bounded table of shared resource lists.
type interner struct {
	mu    sync.Mutex
	lists map[string]corev1.ResourceList
	max   int
}

// intern returns the shared list equal to l: the same names, quantities
// and formats. It returns l itself when it is the first such or the table
// is full.
func (in *interner) intern(l corev1.ResourceList) corev1.ResourceList {
	if len(l) == 0 {
		return l
	}
	names := make([]string, 0, len(l))
	for name := range l {
		names = append(names, string(name))
	}
	slices.Sort(names)
	var key strings.Builder
	for _, name := range names {
		q := l[corev1.ResourceName(name)]
		key.WriteString(name)
		key.WriteByte('=')
		key.WriteString(q.String())
		key.WriteByte('/')
		key.WriteString(string(q.Format))
		key.WriteByte(',')
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if shared, ok := in.lists[key.String()]; ok {
		return shared
	}
	if len(in.lists) < in.max {
		in.lists[key.String()] = l
	}
	return l
}

func internRequirements(r *corev1.ResourceRequirements) {
	if r == nil {
		return
	}
	r.Requests = resourceLists.intern(r.Requests)
	r.Limits = resourceLists.intern(r.Limits)
}

// internSpec interns the resources of a pod spec's containers.
func internSpec(spec *corev1.PodSpec) {
	for _, cs := range [][]corev1.Container{spec.Containers, spec.InitContainers} {
		for i := range cs {
			internRequirements(&cs[i].Resources)
		}
	}
	internRequirements(spec.Resources)
}

// internPod interns a pod's resources, its spec's and its status's.
func internPod(p *corev1.Pod) {
	internSpec(&p.Spec)
	internRequirements(p.Status.Resources)
	for _, ss := range [][]corev1.ContainerStatus{p.Status.ContainerStatuses, p.Status.InitContainerStatuses} {
		for i := range ss {
			internRequirements(ss[i].Resources)
			ss[i].AllocatedResources = resourceLists.intern(ss[i].AllocatedResources)
		}
	}
}

// stripTemplate replaces a pod template by its digest and what Kerf reads
// of a workload's template.
//   - The digest (workload.TemplateDigestAnnotation) is computed from the
//     whole template. cluster/workload compares it to find a Deployment's
//     current ReplicaSet.
//   - What Kerf reads is the containers' and init containers' names,
//     resources, resize policies and restart policies, and the pod-level
//     resources. They are the values shown and recommended from, the QoS
//     class and the limit checks. The template patch carries only the
//     changed resources and the resourceVersion read (cluster/apply
//     template.go).
//
// It strips the StatefulSets' and DaemonSets' templates in place. A
// cachedDeployment keeps the same, and a cachedReplicaSet the digest
// alone. The template's metadata, images, environment, volumes and
// scheduling are not kept, but for the priority class and an affinity
// that names other namespaces (quotaScope). Nothing in the leader reads them from the
// cache; the kubectl plugin reads live.
func stripTemplate(t *corev1.PodTemplateSpec) {
	kept := digestTemplate(workload.TemplateSum(t))
	keep := func(cs []corev1.Container) []corev1.Container {
		if cs == nil {
			return nil
		}
		out := make([]corev1.Container, len(cs))
		for i := range cs {
			c := &cs[i]
			out[i] = corev1.Container{Name: c.Name, Resources: c.Resources, ResizePolicy: c.ResizePolicy, RestartPolicy: c.RestartPolicy}
		}
		return out
	}
	kept.Spec.Containers = keep(t.Spec.Containers)
	kept.Spec.InitContainers = keep(t.Spec.InitContainers)
	kept.Spec.Resources = t.Spec.Resources
	keepQuotaScope(&t.Spec).into(&kept.Spec, true)
	internSpec(&kept.Spec)
	*t = kept
}

// maxInternedMaps bounds the distinct label and annotation sets interned.
// A full table starts over, and the objects keep the maps they share. So
// the sets of objects long deleted do not hold it full. Each costs at
// most about 100 bytes of key and entry: 10 MB.
const maxInternedMaps = 100000

// stringMaps holds one shared map per distinct label or annotation set of
// the cached pods, ReplicaSets, Deployments and recommendations and of the
// selectors' matchLabels. Most are equal to another's:
//   - a pod's labels are its ReplicaSet's, pod-template-hash included,
//     and its ReplicaSet's selector's;
//   - a Deployment's selector is most often its labels;
//   - the deployment controller's annotations (revision, desired and max
//     replicas) are the same on most ReplicaSets and Deployments.
//
// A shared map is never written: every read of those kinds copies the
// object (pod.go, apps.go), and the event handlers only read.
var stringMaps = &mapInterner{sharedTable[map[string]string]{max: maxInternedMaps}}

// sharedTable is a bounded table of shared values by key, the one
// stringMaps and resourceValues keep. A full table starts over, and the
// objects keep the values they share. So the values of objects long
// deleted do not hold it full.
type sharedTable[V any] struct {
	mu     sync.Mutex
	values map[string]V
	max    int
}

// share returns the value kept for key, else keeps v for it (emptying a
// full table first) and returns v.
func (t *sharedTable[V]) share(key string, v V) V {
	t.mu.Lock()
	defer t.mu.Unlock()
	if shared, ok := t.values[key]; ok {
		return shared
	}
	if t.values == nil || len(t.values) >= t.max {
		t.values = make(map[string]V)
	}
	t.values[key] = v
	return v
}

// mapInterner is a bounded table of shared string maps.
type mapInterner struct{ sharedTable[map[string]string] }

// maxInternedMapBytes bounds the keys and values of a map interned. The
// table keeps them again as its key. A large set is rarely another's:
// kubectl's last-applied-configuration annotation holds the whole object.
const maxInternedMapBytes = 512

// intern returns the shared map equal to m. It returns m itself when it
// is the first such, emptying a full table first, or larger than
// maxInternedMapBytes.
func (in *mapInterner) intern(m map[string]string) map[string]string {
	if len(m) == 0 {
		return m
	}
	size := 0
	keys := make([]string, 0, len(m))
	for k, v := range m {
		keys = append(keys, k)
		size += len(k) + len(v)
	}
	if size > maxInternedMapBytes {
		return m
	}
	slices.Sort(keys)
	var key strings.Builder
	for _, k := range keys {
		// Neither label nor annotation keys hold a NUL; values are
		// length-prefixed, as annotation values may hold anything.
		key.WriteString(k)
		key.WriteByte(0)
		key.WriteString(strconv.Itoa(len(m[k])))
		key.WriteByte(0)
		key.WriteString(m[k])
	}
	return in.share(key.String(), m)
}

// internMeta interns an object's labels and annotations, its namespace
// and its owners' API versions and kinds. Those strings are few in a
// cluster, but each decoded object holds its own (docs/leader.md,
// "Reading from the cache: what each cut saved").
func internMeta(m *metav1.ObjectMeta) {
	setMap(&m.Labels, stringMaps.intern(m.Labels))
	setMap(&m.Annotations, stringMaps.intern(m.Annotations))
	setInterned(&m.Namespace)
	for i := range m.OwnerReferences {
		ref := &m.OwnerReferences[i]
		setInterned(&ref.APIVersion)
		setInterned(&ref.Kind)
	}
}

// setMap sets *dst to m unless it is m already. An object the informer
// stores may be handed to the transform again while readers copy it:
// then nothing is written. setInterned is the same for a string and its
// interned copy.
func setMap(dst *map[string]string, m map[string]string) {
	if reflect.ValueOf(*dst).UnsafePointer() != reflect.ValueOf(m).UnsafePointer() {
		*dst = m
	}
}

func setInterned(s *string) {
	if t := internString(*s); !sameBytes(t, *s) {
		*s = t
	}
}

// sameBytes reports whether a and b are the same bytes in memory, not
// only equal ones.
func sameBytes(a, b string) bool {
	return len(a) == len(b) && unsafe.StringData(a) == unsafe.StringData(b)
}

// internString is the one copy of s (unique.Make: held while an object
// holds it).
func internString(s string) string {
	if s == "" {
		return s
	}
	return unique.Make(s).Value()
}

// internSelector interns a selector's matchLabels.
func internSelector(s *metav1.LabelSelector) {
	if s != nil {
		s.MatchLabels = stringMaps.intern(s.MatchLabels)
	}
}

// stripNode drops what the leader never reads of a Node's status. Only
// the capacity and allocatable stay; the images, the largest part (tens
// of KiB a node), volumes, conditions and addresses go.
func stripNode(n *corev1.Node) {
	n.Status = corev1.NodeStatus{Capacity: n.Status.Capacity, Allocatable: n.Status.Allocatable}
}
