package rightsizing

import (
	"context"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/policy"
)

// freshTurn reports whether the rolled-back values the recommendation
// still asks for may try again (design section 4). They may when:
//   - the backoff let them: its turn expired with turns left (state
//     backedOff);
//   - or they are failedPermanent under another policy state than the
//     governing policy's (policyFingerprint), which reopens them for a
//     fresh run.
func freshTurn(rsr *v1alpha1.RightsizingRecommendation, policyFingerprint string) bool {
	st := rsr.Status.Rollback
	if rsr.Status.Phase != v1alpha1.PhaseRolledBack || st == nil || st.Fingerprint != policy.ValueFingerprint(rsr.Spec.Containers) {
		return false
	}
	return st.State == v1alpha1.BackoffBackedOff || policy.Reopened(st, policyFingerprint)
}

// advanceBackoff moves backingOff on when its expiry passes.
func (c *reconcileContext) advanceBackoff(ctx context.Context) (ctrl.Result, error) {
	changed, evs := policy.Advance(c.now, c.rsr.Status.Rollback, c.resolved.Ref, c.resolved.Spec.Guardrails.Rollback.Backoff)
	if !changed {
		return ctrl.Result{RequeueAfter: backoffRequeue(c.rsr, c.now)}, nil
	}
	return ctrl.Result{}, c.record(ctx, outcome{doing: "advance backoff of", rollbackChanged: true, backoff: evs})
}

func backoffRequeue(rsr *v1alpha1.RightsizingRecommendation, now time.Time) time.Duration {
	if st := rsr.Status.Rollback; st != nil && st.Expiry != nil {
		return max(st.Expiry.Sub(now), 10*time.Millisecond)
	}
	return 0
}
