package rightsizing

import (
	"context"
	"slices"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kerf-dev/kerf/api/v1alpha1"
)

// blockedBy maps a gating object (a LimitRange, a ResourceQuota, a
// PodDisruptionBudget, ...) to the recommendations in its namespace that
// a gate of reasons holds back, so a change to it tries them again: a
// watch, not a poll. A cluster-scoped object maps to every namespace's.
//
//lint:ignore U1000 the gates' watches (issue 33) are being added.
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
