// Package workload reads the workloads Kerf manages: apps/v1 Deployments,
// StatefulSets and DaemonSets.
//
//   - Get reads a workload by a recommendation's targetRef.
//   - Pods and RunningPods read the pods it owns; IndexFields, Indexed and
//     ReadOnly set up how a cache answers them.
//   - Of finds the workload of a pod.
//   - TemplateDigest compares pod templates as the deployment controller
//     does.
//
// It is the one place that switches over workload kinds. It reads
// workloads, ReplicaSets and pods through a controller-runtime
// client.Reader, in the leader the manager's cache, and writes nothing.
package workload

import (
	"context"
	"errors"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
)

// ErrUnsupportedKind says a target is not an apps/v1 Deployment,
// StatefulSet or DaemonSet, the only workloads Kerf manages.
var ErrUnsupportedKind = errors.New("unsupported workload kind")

// Kinds are the workload kinds Kerf manages (the kinds a recommendation can
// target), in the order they are documented.
var Kinds = []v1alpha1.WorkloadKind{v1alpha1.KindDeployment, v1alpha1.KindStatefulSet, v1alpha1.KindDaemonSet}

// Workload is a workload read by its targetRef, with the parts of its spec
// Kerf works with whatever its kind.
type Workload struct {
	// Kind is Deployment, StatefulSet or DaemonSet.
	Kind v1alpha1.WorkloadKind
	// Object is the workload as read (*appsv1.Deployment, StatefulSet or
	// DaemonSet); patches go to it.
	Object client.Object
	// Template points into Object's pod template, so a change to it is a
	// change to Object.
	Template *corev1.PodTemplateSpec
	// Selector is the workload's pod selector.
	Selector *metav1.LabelSelector
	// UpdateStrategy is the update strategy type as the spec writes it
	// (Deployment spec.strategy.type; StatefulSet and DaemonSet
	// spec.updateStrategy.type): RollingUpdate, Recreate or OnDelete.
	UpdateStrategy string
}

// OnDelete reports whether the workload replaces pods only when they are
// deleted, as a StatefulSet's or DaemonSet's updateStrategy OnDelete does.
// Then nothing rolls a changed pod template out.
func (w *Workload) OnDelete() bool {
	return w.Kind != v1alpha1.KindDeployment && w.UpdateStrategy == string(appsv1.OnDeleteStatefulSetStrategyType)
}

// String names the workload as Kind namespace/name, for messages.
func (w *Workload) String() string {
	return fmt.Sprintf("%s %s/%s", w.Kind, w.Object.GetNamespace(), w.Object.GetName())
}

// newObject returns an empty object of the kind ref names, to read it
// into. It fails with ErrUnsupportedKind for anything but apps/v1
// Deployment, StatefulSet and DaemonSet.
func newObject(ref v1alpha1.TargetRef) (client.Object, error) {
	if err := supported(ref); err != nil {
		return nil, err
	}
	switch ref.Kind {
	case v1alpha1.KindDeployment:
		return &appsv1.Deployment{}, nil
	case v1alpha1.KindStatefulSet:
		return &appsv1.StatefulSet{}, nil
	}
	return &appsv1.DaemonSet{}, nil
}

// supported checks that ref names a Deployment, StatefulSet or DaemonSet
// of apps/v1, failing with ErrUnsupportedKind.
func supported(ref v1alpha1.TargetRef) error {
	if ref.APIVersion != "" && ref.APIVersion != appsv1.SchemeGroupVersion.String() {
		return fmt.Errorf("%w: apiVersion %q (only apps/v1)", ErrUnsupportedKind, ref.APIVersion)
	}
	switch ref.Kind {
	case v1alpha1.KindDeployment, v1alpha1.KindStatefulSet, v1alpha1.KindDaemonSet:
		return nil
	}
	return fmt.Errorf("%w: kind %q (Deployment, StatefulSet or DaemonSet)", ErrUnsupportedKind, ref.Kind)
}

// From describes a workload object already read: a Deployment, StatefulSet
// or DaemonSet; anything else fails with ErrUnsupportedKind.
func From(obj client.Object) (*Workload, error) {
	switch o := obj.(type) {
	case *appsv1.Deployment:
		return &Workload{Kind: v1alpha1.KindDeployment, Object: o, Template: &o.Spec.Template,
			Selector: o.Spec.Selector, UpdateStrategy: string(o.Spec.Strategy.Type)}, nil
	case *appsv1.StatefulSet:
		return &Workload{Kind: v1alpha1.KindStatefulSet, Object: o, Template: &o.Spec.Template,
			Selector: o.Spec.Selector, UpdateStrategy: string(o.Spec.UpdateStrategy.Type)}, nil
	case *appsv1.DaemonSet:
		return &Workload{Kind: v1alpha1.KindDaemonSet, Object: o, Template: &o.Spec.Template,
			Selector: o.Spec.Selector, UpdateStrategy: string(o.Spec.UpdateStrategy.Type)}, nil
	}
	return nil, fmt.Errorf("%w: %T", ErrUnsupportedKind, obj)
}

// MetaWith reads the metadata alone of the workload ref names in
// namespace, in s's room (nil: none): valid until s's next use. A reader
// that needs no more (its labels and UID) reads much less than Get: the
// leader's cache answers from the workload's own informer, sharing the
// stored object's maps when r is ReadOnly, and makes no template or
// containers for it.
func MetaWith(ctx context.Context, r client.Reader, namespace string, ref v1alpha1.TargetRef, s *Scratch) (*metav1.PartialObjectMetadata, error) {
	if err := supported(ref); err != nil {
		return nil, err
	}
	var room *metav1.PartialObjectMetadata
	if s != nil {
		room = &s.meta
	}
	pm, err := readMeta(ctx, r, client.ObjectKey{Namespace: namespace, Name: ref.Name}, string(ref.Kind), room)
	if err != nil {
		return nil, fmt.Errorf("get %s %s/%s: %w", ref.Kind, namespace, ref.Name, err)
	}
	return pm, nil
}

// readMeta reads the metadata of the apps/v1 object of kind that key
// names. It reads into room when r is Indexed and room is not nil, else
// into a new object; into room it allocates nothing of its own.
func readMeta(ctx context.Context, r client.Reader, key client.ObjectKey, kind string, room *metav1.PartialObjectMetadata) (*metav1.PartialObjectMetadata, error) {
	pm := room
	if pm == nil || !indexed(r) {
		pm = &metav1.PartialObjectMetadata{}
	}
	pm.TypeMeta = metav1.TypeMeta{APIVersion: appsv1GroupVersion, Kind: kind}
	if err := r.Get(ctx, key, pm); err != nil {
		return nil, err
	}
	return pm, nil
}

// appsv1GroupVersion is apps/v1 as an apiVersion, made once: the
// metadata reads set it in their TypeMeta at every call.
var appsv1GroupVersion = appsv1.SchemeGroupVersion.String()

// Get reads the workload ref names in namespace (a recommendation's
// targetRef, in the recommendation's namespace).
func Get(ctx context.Context, r client.Reader, namespace string, ref v1alpha1.TargetRef) (*Workload, error) {
	return GetWith(ctx, r, namespace, ref, nil)
}

// GetWith is Get in s's room (nil: none; see Scratch): the workload's
// object is s's, valid until its next use.
func GetWith(ctx context.Context, r client.Reader, namespace string, ref v1alpha1.TargetRef, s *Scratch) (*Workload, error) {
	var obj client.Object
	var err error
	if s != nil && indexed(r) {
		obj, err = s.object(ref)
	} else {
		obj, err = newObject(ref)
	}
	if err != nil {
		return nil, err
	}
	if err := r.Get(ctx, client.ObjectKey{Namespace: namespace, Name: ref.Name}, obj); err != nil {
		return nil, fmt.Errorf("get %s %s/%s: %w", ref.Kind, namespace, ref.Name, err)
	}
	return From(obj)
}
