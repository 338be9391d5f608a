package rightsizing

import (
	"context"
	"slices"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kerf-dev/kerf/api/v1alpha1"
)

// blockedBy maps a gating object to the recommendations of its namespace
// that a gate of reasons holds back. The object is a LimitRange, a
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
