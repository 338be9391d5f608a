package workload

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
)

// revisionAnnotation is the revision the deployment controller writes on
// its ReplicaSets.
const revisionAnnotation = "deployment.kubernetes.io/revision"

// ControllerIndex is the field index of pods and ReplicaSets by the UID of
// their controller (the owner reference with controller true). IndexFields
// registers it; on a reader Indexed marks, Pods, RunningPods and the
// lookup of a Deployment's ReplicaSets read a workload's own objects
// through it instead of listing the namespace by label selector.
const ControllerIndex = "metadata.ownerReferences.controller.uid"

// controllerUID is ControllerIndex's value of o: its controller's UID, or
// none.
func controllerUID(o client.Object) []string {
	if ref := metav1.GetControllerOfNoCopy(o); ref != nil {
		return []string{string(ref.UID)}
	}
	return nil
}

// IndexFields registers ControllerIndex for pods and ReplicaSets with idx,
// a manager's field indexer, before its cache starts. Its indexes must
// answer lists in one namespace, all that Pods, RunningPods and the
// ReplicaSet lookups make; the leader's do (cachestore.Namespaced).
func IndexFields(ctx context.Context, idx client.FieldIndexer) error {
	for _, obj := range []client.Object{&corev1.Pod{}, &appsv1.ReplicaSet{}} {
		if err := idx.IndexField(ctx, obj, ControllerIndex, controllerUID); err != nil {
			return fmt.Errorf("index %T by controller UID: %w", obj, err)
		}
	}
	return nil
}

// Indexed returns c marked as reading from a cache that has IndexFields'
// indexes: Pods, RunningPods and the ReplicaSet lookups then read through
// ControllerIndex. A reader without the mark (a live client, a cache
// without the indexes) is listed by label selector; both give the same
// objects.
func Indexed(c client.Client) client.Client { return indexedClient{c} }

// indexedClient is a client Indexed marked.
type indexedClient struct{ client.Client }

func (indexedClient) controllerIndexed() {}

// ReadOnly returns c reading with client.UnsafeDisableDeepCopy. From the
// leader's cache it reads the cache's own objects, or views of those it
// holds in a form of its own (cluster/cachestore's views), rather than
// copies. What it returns must only be read: a write to it, or to a map
// or slice it holds, would change the cache. It keeps c's Indexed mark:
// ReadOnly(Indexed(c)) is both.
func ReadOnly(c client.Client) client.Client {
	if indexed(c) {
		return indexedClient{readOnlyClient{c}}
	}
	return readOnlyClient{c}
}

// readOnlyClient is a client ReadOnly made.
type readOnlyClient struct{ client.Client }

func (r readOnlyClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	return r.Client.Get(ctx, key, obj, append(opts[:len(opts):len(opts)], client.UnsafeDisableDeepCopy)...)
}

func (r readOnlyClient) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return r.Client.List(ctx, list, append(opts[:len(opts):len(opts)], client.UnsafeDisableDeepCopy)...)
}

// IsIndexed reports whether r is marked by Indexed. If so, Pods and
// RunningPods read a workload's pods and ReplicaSets through
// ControllerIndex rather than by listing its namespace.
func IsIndexed(r client.Reader) bool { return indexed(r) }

// indexed reports whether r is marked by Indexed.
func indexed(r client.Reader) bool {
	_, ok := r.(interface{ controllerIndexed() })
	return ok
}

// Pods returns the workload's pods, sorted by name. They are the pods its
// selector selects whose controller is the workload, or for a Deployment
// one of the ReplicaSets it controls, of any revision.
//   - Every phase counts, and so do pods being deleted: the health watch
//     reads their restarts and OOM kills.
//   - A pod the selector selects but another controller owns is not the
//     workload's.
func Pods(ctx context.Context, r client.Reader, w *Workload) ([]corev1.Pod, error) {
	return PodsWith(ctx, r, w, nil)
}

// Scratch is the room a caller that reads one workload after another
// lends to GetWith and PodsWith. Its zero value is ready. It is not safe
// for concurrent use.
//
// On an Indexed reader, the workload's object and the lists' items are
// written into it rather than allocated anew for each workload. The usage
// series' pass reads thousands. Such a reader is the leader's cache,
// which writes a read into the object it is given and a list's items in
// the room they have.
type Scratch struct {
	pods           []corev1.Pod
	sets           []appsv1.ReplicaSet
	deployment     appsv1.Deployment
	statefulSet    appsv1.StatefulSet
	daemonSet      appsv1.DaemonSet
	meta           metav1.PartialObjectMetadata
	replicaSetMeta metav1.PartialObjectMetadata
}

// object is s's object of ref's kind (newObject's, in s's room).
func (s *Scratch) object(ref v1alpha1.TargetRef) (client.Object, error) {
	if err := supported(ref); err != nil {
		return nil, err
	}
	switch ref.Kind {
	case v1alpha1.KindDeployment:
		return &s.deployment, nil
	case v1alpha1.KindStatefulSet:
		return &s.statefulSet, nil
	}
	return &s.daemonSet, nil
}

// PodsWith is Pods in s's room (nil: none): the pods it returns are
// valid until s's next use.
func PodsWith(ctx context.Context, r client.Reader, w *Workload, s *Scratch) ([]corev1.Pod, error) {
	if s == nil || !indexed(r) {
		s = &Scratch{}
	}
	sel, err := metav1.LabelSelectorAsSelector(w.Selector)
	if err != nil {
		return nil, fmt.Errorf("selector of %s: %w", w, err)
	}
	var owners []types.UID
	if w.Kind == v1alpha1.KindDeployment {
		sets, items, err := replicaSets(ctx, r, w, sel, s.sets[:0])
		if err != nil {
			return nil, err
		}
		for _, rs := range sets {
			owners = append(owners, rs.UID)
		}
		s.sets = keptRoom(items)
	} else {
		owners = append(owners, w.Object.GetUID())
	}
	pods, err := owned(ctx, r, w.Object.GetNamespace(), sel, owners, s.pods[:0])
	if err != nil {
		return nil, fmt.Errorf("pods of %s: %w", w, err)
	}
	s.pods = keptRoom(pods)
	return pods, nil
}

// maxScratchItems bounds the room a Scratch keeps. A workload with more
// pods, or a Deployment with more ReplicaSets, has its lists' items
// allocated anew. So one large workload does not hold that many structs
// for as long as the Scratch lives; a pod's size is in docs/leader.md,
// "Reading from the cache: what each cut saved".
const maxScratchItems = 256

// keptRoom is what a Scratch keeps of items as room: items, or none past
// maxScratchItems.
func keptRoom[T any](items []T) []T {
	if cap(items) > maxScratchItems {
		return nil
	}
	return items
}

// RunningPods returns the workload's pods (see Pods) an in-place resize
// writes to, sorted by name. They are those of its current revision that
// are Running and not being deleted. A Deployment's current revision is
// its current ReplicaSet, the one whose template is the Deployment's; a
// StatefulSet's or DaemonSet's is its own.
func RunningPods(ctx context.Context, r client.Reader, w *Workload) ([]corev1.Pod, error) {
	owner, sel := w.Object.GetUID(), w.Selector
	if w.Kind == v1alpha1.KindDeployment {
		rs, err := currentReplicaSet(ctx, r, w)
		if err != nil || rs == nil {
			return nil, err
		}
		owner, sel = rs.UID, rs.Spec.Selector
	}
	ls, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return nil, fmt.Errorf("pod selector of %s: %w", w, err)
	}
	pods, err := owned(ctx, r, w.Object.GetNamespace(), ls, []types.UID{owner}, nil)
	if err != nil {
		return nil, fmt.Errorf("running pods of %s: %w", w, err)
	}
	return slices.DeleteFunc(pods, func(p corev1.Pod) bool {
		return p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning
	}), nil
}

// owned returns the pods in ns the selector selects whose controller is
// one of owners, sorted by name. An empty selector selects none, as
// apps/v1 requires one. On an Indexed reader it reads each owner's pods
// through ControllerIndex. Otherwise it lists the selector's pods and
// keeps the owners'.
func owned(ctx context.Context, r client.Reader, ns string, sel labels.Selector, owners []types.UID, room []corev1.Pod) ([]corev1.Pod, error) {
	if sel.Empty() {
		sel = labels.Nothing()
	}
	var pods []corev1.Pod
	if indexed(r) {
		pods = room[:0]
		for _, uid := range owners {
			// Each owner's pods are listed into the room after those
			// before (the cache writes them there when they fit), so that
			// appending them moves nothing.
			list := corev1.PodList{Items: pods[len(pods):]}
			if err := r.List(ctx, &list, client.InNamespace(ns), client.MatchingFields{ControllerIndex: string(uid)}); err != nil {
				return nil, fmt.Errorf("list pods in %s controlled by %s: %w", ns, uid, err)
			}
			matched := slices.DeleteFunc(list.Items, func(p corev1.Pod) bool { return !sel.Matches(labels.Set(p.Labels)) })
			if len(pods) == 0 {
				pods = matched // one owner's pods (nearly always): not copied again
				continue
			}
			pods = append(pods, matched...)
		}
	} else {
		var list corev1.PodList
		if err := r.List(ctx, &list, client.InNamespace(ns), client.MatchingLabelsSelector{Selector: sel}); err != nil {
			return nil, fmt.Errorf("list pods in %s: %w", ns, err)
		}
		pods = slices.DeleteFunc(list.Items, func(p corev1.Pod) bool {
			ref := metav1.GetControllerOfNoCopy(&p)
			return ref == nil || !slices.Contains(owners, ref.UID)
		})
	}
	slices.SortFunc(pods, func(x, y corev1.Pod) int { return cmp.Compare(x.Name, y.Name) })
	return pods, nil
}

// currentReplicaSet returns a Deployment's current ReplicaSet, nil when
// the Deployment has none or w is not a Deployment.
//   - It is the one it controls whose template is the Deployment's,
//     ignoring the pod-template-hash label as the deployment controller
//     compares them. It compares by TemplateDigest, which the leader's
//     cache keeps of the templates it strips.
//   - Failing that, it is the highest revision, then the newest.
func currentReplicaSet(ctx context.Context, r client.Reader, w *Workload) (*appsv1.ReplicaSet, error) {
	if w.Kind != v1alpha1.KindDeployment {
		return nil, nil
	}
	sel, err := metav1.LabelSelectorAsSelector(w.Selector)
	if err != nil {
		return nil, fmt.Errorf("selector of %s: %w", w, err)
	}
	owned, _, err := replicaSets(ctx, r, w, sel, nil)
	if err != nil || len(owned) == 0 {
		return nil, err
	}
	want := TemplateDigest(w.Template)
	for _, rs := range owned {
		if TemplateDigest(&rs.Spec.Template) == want {
			return rs, nil
		}
	}
	return slices.MaxFunc(owned, func(x, y *appsv1.ReplicaSet) int {
		rx, _ := strconv.ParseInt(x.Annotations[revisionAnnotation], 10, 64)
		ry, _ := strconv.ParseInt(y.Annotations[revisionAnnotation], 10, 64)
		if c := cmp.Compare(rx, ry); c != 0 {
			return c
		}
		return x.CreationTimestamp.Compare(y.CreationTimestamp.Time)
	}), nil
}

// replicaSets returns the ReplicaSets the Deployment controls that its
// selector selects and are not being deleted. They are copies: the
// leader's cache holds ReplicaSets in a form of its own that only a
// copying read turns into an appsv1.ReplicaSet
// (cluster/cachestore/apps.go). On an Indexed reader they are read through ControllerIndex; otherwise
// the selector's ReplicaSets are listed.
func replicaSets(ctx context.Context, r client.Reader, w *Workload, sel labels.Selector, room []appsv1.ReplicaSet) (owned []*appsv1.ReplicaSet, items []appsv1.ReplicaSet, err error) {
	opts := []client.ListOption{client.InNamespace(w.Object.GetNamespace())}
	list := appsv1.ReplicaSetList{Items: room}
	if indexed(r) {
		opts = append(opts, client.MatchingFields{ControllerIndex: string(w.Object.GetUID())})
	} else {
		list.Items = nil
		opts = append(opts, client.MatchingLabelsSelector{Selector: sel})
	}
	if err := r.List(ctx, &list, opts...); err != nil {
		return nil, nil, fmt.Errorf("list ReplicaSets of %s: %w", w, err)
	}
	for i := range list.Items {
		rs := &list.Items[i]
		if ref := metav1.GetControllerOfNoCopy(rs); ref != nil && ref.UID == w.Object.GetUID() && rs.DeletionTimestamp == nil &&
			sel.Matches(labels.Set(rs.Labels)) {
			owned = append(owned, rs)
		}
	}
	return owned, list.Items, nil
}
