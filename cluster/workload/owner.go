package workload

import (
	"context"
	"errors"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
)

// ErrReplicaSetNotFound says the ReplicaSet a pod's controller reference
// names is not in the reader, or is another one of the same name and
// another UID. A cache may not have seen one just created, or the owner
// is gone.
var ErrReplicaSetNotFound = errors.New("the pod's ReplicaSet is not found")

// Ref names a workload Kerf manages; it compares equal to the workload a
// recommendation's targetRef names in the same namespace.
type Ref struct {
	// Kind is Deployment, StatefulSet or DaemonSet.
	Kind v1alpha1.WorkloadKind
	// Namespace and Name locate the workload.
	Namespace, Name string
}

// String names the workload as Kind/name, for logs.
func (r Ref) String() string { return string(r.Kind) + "/" + r.Name }

// Targets reports whether ref, a recommendation's targetRef in the
// recommendation's namespace ns, names this workload.
func (r Ref) Targets(ns string, ref v1alpha1.TargetRef) bool {
	return ns == r.Namespace && ref.Kind == r.Kind && ref.Name == r.Name &&
		(ref.APIVersion == "" || ref.APIVersion == appsv1.SchemeGroupVersion.String())
}

// Of follows the pod's controller chain to the workload Kerf manages that
// owns it: Pod → ReplicaSet → Deployment, Pod → StatefulSet, Pod →
// DaemonSet. The pod's namespace is the workload's.
//   - Only the pod's metadata is read: a *corev1.Pod, or the leader's
//     cached pod.
//   - ok is false when the pod has no such workload: no controller,
//     another kind, a ReplicaSet no Deployment controls.
//   - When r does not have the ReplicaSet, or has another of the same
//     name, the error wraps ErrReplicaSetNotFound.
//
// Only the ReplicaSet's metadata is used, but it is read from r as the
// typed ReplicaSet, a copy: on a cache other than the leader's, asking
// for the metadata alone would start a second informer holding every
// ReplicaSet's metadata again (docs/leader.md, "Reading from the cache";
// its cost is in docs/performance.md, "the third round"). OfWith reads it
// otherwise: the leader's cache's own, uncopied (ReplicaSetMetaOf, or
// cachestore.Stored).
func Of(ctx context.Context, r client.Reader, pod metav1.Object) (ref Ref, ok bool, err error) {
	return OfWith(ctx, pod, ReplicaSetsOf(r))
}

// ReplicaSetsOf reads ReplicaSets from r, as the typed ReplicaSet.
func ReplicaSetsOf(r client.Reader) ReplicaSetReader {
	return func(ctx context.Context, key client.ObjectKey) (metav1.Object, error) {
		rs := &appsv1.ReplicaSet{}
		if err := r.Get(ctx, key, rs); err != nil {
			return nil, err
		}
		return rs, nil
	}
}

// ReplicaSetMetaOf reads a ReplicaSet's metadata alone from r, as a
// metav1.PartialObjectMetadata. When r is Indexed it reads into s's room
// (nil: none), valid until s's next use. The
// leader's cache answers it from its ReplicaSet informer, uncopied when
// r is ReadOnly (cluster/cachestore, getMeta). controller-runtime's own
// cache would start a metadata informer of its own for it.
func ReplicaSetMetaOf(r client.Reader, s *Scratch) ReplicaSetReader {
	return func(ctx context.Context, key client.ObjectKey) (metav1.Object, error) {
		var room *metav1.PartialObjectMetadata
		if s != nil {
			room = &s.replicaSetMeta
		}
		pm, err := readMeta(ctx, r, key, "ReplicaSet", room)
		if err != nil {
			return nil, err
		}
		return pm, nil
	}
}

// ReplicaSetReader returns the ReplicaSet key names, or an error, a
// NotFound one when there is none. Only its metadata is read, so it may
// return an object the reader keeps, not a copy.
type ReplicaSetReader func(ctx context.Context, key client.ObjectKey) (metav1.Object, error)

// OfWith is Of reading the pod's ReplicaSet with get. The leader's signal
// mapping reads its cache's own ReplicaSet, where a copying read made a
// whole ReplicaSet for each agent's sample (docs/performance.md).
func OfWith(ctx context.Context, pod metav1.Object, get ReplicaSetReader) (ref Ref, ok bool, err error) {
	owner := metav1.GetControllerOfNoCopy(pod)
	if owner == nil || !isApps(owner.APIVersion) {
		return Ref{}, false, nil
	}
	ns := pod.GetNamespace()
	switch owner.Kind {
	case "StatefulSet":
		return Ref{v1alpha1.KindStatefulSet, ns, owner.Name}, true, nil
	case "DaemonSet":
		return Ref{v1alpha1.KindDaemonSet, ns, owner.Name}, true, nil
	case "ReplicaSet":
	default:
		return Ref{}, false, nil
	}
	key := client.ObjectKey{Namespace: ns, Name: owner.Name}
	rs, err := get(ctx, key)
	switch {
	case apierrors.IsNotFound(err):
		return Ref{}, false, fmt.Errorf("get ReplicaSet %s: %w: %w", key, ErrReplicaSetNotFound, err)
	case err != nil:
		return Ref{}, false, fmt.Errorf("get ReplicaSet %s: %w", key, err)
	case owner.UID != "" && rs.GetUID() != owner.UID:
		return Ref{}, false, fmt.Errorf("%w: ReplicaSet %s has UID %s, the pod's owner reference %s", ErrReplicaSetNotFound, key, rs.GetUID(), owner.UID)
	}
	d := metav1.GetControllerOfNoCopy(rs)
	if d == nil || d.Kind != "Deployment" || !isApps(d.APIVersion) {
		return Ref{}, false, nil
	}
	return Ref{v1alpha1.KindDeployment, ns, d.Name}, true, nil
}

// isApps reports whether apiVersion is of the apps group.
func isApps(apiVersion string) bool {
	gv, err := schema.ParseGroupVersion(apiVersion)
	return err == nil && gv.Group == appsv1.GroupName
}
