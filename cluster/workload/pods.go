package workload

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
)

// revisionAnnotation is the revision the deployment controller writes on
// its ReplicaSets.
const revisionAnnotation = "deployment.kubernetes.io/revision"

// Pods returns the workload's pods, sorted by name: the pods its selector
// selects whose controller is the workload, or for a Deployment one of the
// ReplicaSets it controls (any revision). Every phase counts, and so do
// pods being deleted: the health watch reads their restarts and OOM kills.
// A pod the selector selects but another controller owns is not the
// workload's.
func Pods(ctx context.Context, r client.Reader, w *Workload) ([]corev1.Pod, error) {
	owners := map[types.UID]bool{}
	if w.Kind == v1alpha1.KindDeployment {
		sets, err := replicaSets(ctx, r, w)
		if err != nil {
			return nil, err
		}
		for _, rs := range sets {
			owners[rs.UID] = true
		}
	} else {
		owners[w.Object.GetUID()] = true
	}
	pods, err := selected(ctx, r, w.Object.GetNamespace(), w.Selector)
	if err != nil {
		return nil, fmt.Errorf("pods of %s: %w", w, err)
	}
	return slices.DeleteFunc(pods, func(p corev1.Pod) bool {
		ref := metav1.GetControllerOfNoCopy(&p)
		return ref == nil || !owners[ref.UID]
	}), nil
}

// RunningPods returns the workload's pods (see Pods) an in-place resize
// writes to, sorted by name: those of its current revision (for a
// Deployment its current ReplicaSet, the one whose template is the
// Deployment's; for a StatefulSet or DaemonSet its own) that are Running and not being
// deleted.
func RunningPods(ctx context.Context, r client.Reader, w *Workload) ([]corev1.Pod, error) {
	owner, sel := w.Object.GetUID(), w.Selector
	if w.Kind == v1alpha1.KindDeployment {
		rs, err := currentReplicaSet(ctx, r, w)
		if err != nil || rs == nil {
			return nil, err
		}
		owner, sel = rs.UID, rs.Spec.Selector
	}
	pods, err := selected(ctx, r, w.Object.GetNamespace(), sel)
	if err != nil {
		return nil, fmt.Errorf("running pods of %s: %w", w, err)
	}
	return slices.DeleteFunc(pods, func(p corev1.Pod) bool {
		ref := metav1.GetControllerOfNoCopy(&p)
		return ref == nil || ref.UID != owner || p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning
	}), nil
}

// currentReplicaSet returns a Deployment's current ReplicaSet: the one it
// controls whose template is the Deployment's (ignoring the
// pod-template-hash label, as the deployment controller compares them);
// failing that, the highest revision, then the newest. Nil when the
// Deployment has none, or w is not a Deployment.
func currentReplicaSet(ctx context.Context, r client.Reader, w *Workload) (*appsv1.ReplicaSet, error) {
	if w.Kind != v1alpha1.KindDeployment {
		return nil, nil
	}
	owned, err := replicaSets(ctx, r, w)
	if err != nil || len(owned) == 0 {
		return nil, err
	}
	for _, rs := range owned {
		if sameTemplateIgnoringHash(&rs.Spec.Template, w.Template) {
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

// replicaSets returns the ReplicaSets the Deployment controls that are not
// being deleted.
func replicaSets(ctx context.Context, r client.Reader, w *Workload) ([]*appsv1.ReplicaSet, error) {
	sel, err := metav1.LabelSelectorAsSelector(w.Selector)
	if err != nil {
		return nil, fmt.Errorf("selector of %s: %w", w, err)
	}
	var list appsv1.ReplicaSetList
	if err := r.List(ctx, &list, client.InNamespace(w.Object.GetNamespace()), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return nil, fmt.Errorf("list ReplicaSets of %s: %w", w, err)
	}
	var owned []*appsv1.ReplicaSet
	for i := range list.Items {
		rs := &list.Items[i]
		if ref := metav1.GetControllerOfNoCopy(rs); ref != nil && ref.UID == w.Object.GetUID() && rs.DeletionTimestamp == nil {
			owned = append(owned, rs)
		}
	}
	return owned, nil
}

// selected lists the pods in ns the selector selects, sorted by name; an
// empty selector selects none (apps/v1 requires one).
func selected(ctx context.Context, r client.Reader, ns string, selector *metav1.LabelSelector) ([]corev1.Pod, error) {
	sel, err := metav1.LabelSelectorAsSelector(selector)
	if err != nil {
		return nil, fmt.Errorf("pod selector: %w", err)
	}
	if sel.Empty() {
		sel = labels.Nothing()
	}
	var list corev1.PodList
	if err := r.List(ctx, &list, client.InNamespace(ns), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return nil, fmt.Errorf("list pods in %s: %w", ns, err)
	}
	slices.SortFunc(list.Items, func(x, y corev1.Pod) int { return cmp.Compare(x.Name, y.Name) })
	return list.Items, nil
}

// sameTemplateIgnoringHash reports whether two pod templates are equal but
// for the pod-template-hash label the deployment controller adds.
func sameTemplateIgnoringHash(a, b *corev1.PodTemplateSpec) bool {
	a, b = a.DeepCopy(), b.DeepCopy()
	delete(a.Labels, appsv1.DefaultDeploymentUniqueLabelKey)
	delete(b.Labels, appsv1.DefaultDeploymentUniqueLabelKey)
	if len(a.Labels) == 0 {
		a.Labels = nil
	}
	if len(b.Labels) == 0 {
		b.Labels = nil
	}
	return apiequality.Semantic.DeepEqual(a, b)
}
