package rightsizing

import (
	"context"
	"slices"

	resourcehelper "k8s.io/component-helpers/resource"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/cachestore"
)

// blockedBy maps a gating object to the recommendations of its namespace
// that a gate of reasons holds back. Such an object is a LimitRange, a
// ResourceQuota, a PodDisruptionBudget, ... A change to it tries them
// again: a watch, not a poll. A cluster-scoped object maps to every
// namespace's.
func (m mapper) blockedBy(reasons ...string) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		var list v1alpha1.RightsizingRecommendationList
		if err := m.c.List(ctx, &list, client.InNamespace(o.GetNamespace()), client.UnsafeDisableDeepCopy); err != nil {
			m.r.Log.Error("list recommendations a gate blocks", "object", o.GetName(), "namespace", o.GetNamespace(), "err", err)
			return nil
		}
		var out []reconcile.Request
		for i := range list.Items {
			st := &list.Items[i].Status
			if st.Phase == v1alpha1.PhaseBlocked && slices.Contains(reasons, st.Reason) {
				out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
			}
		}
		return out
	}
}

// blockedReasonIndex indexes Blocked recommendations by their reason,
// across namespaces. The pods' and Nodes' watches find the NodeHeadroom
// blocks without a list of them all.
const blockedReasonIndex = "status.blockedReason"

// blockedReason is a recommendation's blockedReasonIndex key: its reason
// while it is Blocked, none otherwise.
func blockedReason(o client.Object) []string {
	st := &o.(*v1alpha1.RightsizingRecommendation).Status
	if st.Phase != v1alpha1.PhaseBlocked || st.Reason == "" {
		return nil
	}
	return []string{st.Reason}
}

// nodeFreed maps a change that may free room on a node to the
// recommendations NodeHeadroom holds back, in every namespace. Such a
// change is a pod that ended or was deleted, or a Node's allocatable. It
// reads blockedReasonIndex, so it costs a lookup of those alone.
func (m mapper) nodeFreed(ctx context.Context, _ client.Object) []reconcile.Request {
	var list v1alpha1.RightsizingRecommendationList
	if err := m.c.List(ctx, &list, client.MatchingFields{blockedReasonIndex: v1alpha1.ReasonNodeHeadroom}, client.UnsafeDisableDeepCopy); err != nil {
		m.r.Log.Error("list recommendations the NodeHeadroom gate blocks", "err", err)
		return nil
	}
	out := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
	}
	return out
}

// podEnded reports whether a pod's status went from running or pending to
// a terminal phase: it no longer holds room on its node.
func podEnded(old, cur *corev1.PodStatus) bool {
	terminal := func(p corev1.PodPhase) bool { return p == corev1.PodSucceeded || p == corev1.PodFailed }
	return !terminal(old.Phase) && terminal(cur.Phase)
}

// podShrank reports whether a pod on a node asks less of it than before.
// It counts as the kubelet's resize admission and the NodeHeadroom gate
// do: the larger of spec and what the kubelet runs. Only a new generation
// or a status of one, a resize, can change that, so other updates cost
// nothing more.
func podShrank(oldObj, curObj client.Object, oldStatus, curStatus *corev1.PodStatus) bool {
	if oldObj.GetGeneration() == curObj.GetGeneration() && oldStatus.ObservedGeneration == curStatus.ObservedGeneration {
		return false
	}
	oldPod, ok1 := cachestore.PodView(oldObj)
	curPod, ok2 := cachestore.PodView(curObj)
	if !ok1 || !ok2 || curPod.Spec.NodeName == "" {
		return false
	}
	opts := resourcehelper.PodResourcesOptions{UseStatusResources: true}
	before, after := resourcehelper.PodRequests(oldPod, opts), resourcehelper.PodRequests(curPod, opts)
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if b, a := before[name], after[name]; a.Cmp(b) < 0 {
			return true
		}
	}
	return false
}

// allocatableChanged passes the updates of a Node that change its
// status.allocatable. The NodeHeadroom gate reads nothing else of it, and
// a node's status is written every few seconds. A new or deleted Node
// frees no room on the node of a pod Kerf resizes, and the informer's
// first list, a creation a Node, is not let through.
var allocatableChanged = predicate.Funcs{
	CreateFunc: func(event.CreateEvent) bool { return false },
	DeleteFunc: func(event.DeleteEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		old, ok1 := e.ObjectOld.(*corev1.Node)
		cur, ok2 := e.ObjectNew.(*corev1.Node)
		return !ok1 || !ok2 || !equality.Semantic.DeepEqual(old.Status.Allocatable, cur.Status.Allocatable)
	},
	GenericFunc: func(event.GenericEvent) bool { return false },
}

// rolledOut maps a workload of kind to its recommendation, found by the
// targetRef index, while the RolloutInProgress gate holds it back. A
// change of the workload's status then tries it again.
func (m mapper) rolledOut(kind v1alpha1.WorkloadKind) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		var list v1alpha1.RightsizingRecommendationList
		if err := m.c.List(ctx, &list, client.InNamespace(o.GetNamespace()), client.MatchingFields{targetRefIndex: targetKey(kind, o.GetName())},
			client.UnsafeDisableDeepCopy); err != nil {
			m.r.Log.Error("list the recommendations of a workload", "workload", targetKey(kind, o.GetName()), "namespace", o.GetNamespace(), "err", err)
			return nil
		}
		var out []reconcile.Request
		for i := range list.Items {
			st := &list.Items[i].Status
			if st.Phase == v1alpha1.PhaseBlocked && st.Reason == v1alpha1.ReasonRolloutInProgress {
				out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
			}
		}
		return out
	}
}
