package rightsizing

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/kerf-dev/kerf/api/v1alpha1"
)

// A workload that keeps failing (docs/health.md, "A workload that keeps
// failing"): when rolledBack of its last `of` changes were rolled back,
// its recommendation is marked Degraded. Nothing is applied or
// recommended for it until a person resumes it (ResumeAnnotation) or
// the policy changes. The count reads status.history, so it survives a
// failover and needs no state of its own.

// rolledBackOfLast counts how many of the last n changes in history were
// rolled back. It counts the changes at or after since, and says how
// many it counted (at most n). A change is an applied action (a
// canary's promotion is the same change); a rolled_back action marks the
// change before it.
func rolledBackOfLast(history []v1alpha1.Action, since time.Time, n int) (rolledBack, changes int) {
	var rolled []bool
	for _, a := range history {
		if a.Time.Time.Before(since) {
			continue
		}
		switch {
		case a.Type == v1alpha1.ActionApplied && a.Reason == v1alpha1.ReasonCanaryPromoted && len(rolled) > 0:
			// The rest of a canary's change: the same change.
		case a.Type == v1alpha1.ActionApplied:
			rolled = append(rolled, false)
		case a.Type == v1alpha1.ActionRolledBack:
			if len(rolled) > 0 {
				rolled[len(rolled)-1] = true
			}
		}
	}
	if len(rolled) > n {
		rolled = rolled[len(rolled)-n:]
	}
	for _, r := range rolled {
		if r {
			rolledBack++
		}
	}
	return rolledBack, len(rolled)
}

// degradedVerdict is the Degraded mark that the rollback recorded as
// action deserves, or nil. It counts history with action added, from
// the last resume on, against the governing policy's
// spec.guardrails.degraded. A rollback finished without a policy marks
// nothing.
func (c *reconcileContext) degradedVerdict(action v1alpha1.Action) *v1alpha1.DegradedState {
	if c.resolved == nil {
		return nil
	}
	g := c.resolved.Spec.Guardrails.DegradedOrDefault()
	if g.Disabled {
		return nil
	}
	var since time.Time
	if d := c.rsr.Status.Degraded; d != nil && d.ResumedAt != nil {
		since = d.ResumedAt.Time
	}
	action.Time = metav1.NewTime(c.now)
	history := append(c.rsr.Status.History[:len(c.rsr.Status.History):len(c.rsr.Status.History)], action)
	rolledBack, changes := rolledBackOfLast(history, since, int(*g.Of))
	if rolledBack < int(*g.RolledBack) {
		return nil
	}
	d := &v1alpha1.DegradedState{Since: &metav1.Time{Time: c.now}, RolledBack: int32(rolledBack), Of: int32(changes),
		PolicyFingerprint: c.resolved.Ref.Fingerprint}
	if old := c.rsr.Status.Degraded; old != nil {
		d.ResumedAt = old.ResumedAt
	}
	return d
}

// degradedMessage says why a workload is Degraded and how to resume it.
func degradedMessage(rsr *v1alpha1.RightsizingRecommendation, d *v1alpha1.DegradedState) string {
	return fmt.Sprintf("%d of the last %d changes of %s %s were rolled back: Kerf applies and recommends nothing for it "+
		"until `kubectl kerf resume --workload %s -n %s` or a change of its policy",
		d.RolledBack, d.Of, rsr.Spec.TargetRef.Kind, rsr.Spec.TargetRef.Name, rsr.Name, rsr.Namespace)
}

// degradedOutcome adds the Degraded mark to the rollback's outcome o.
// It sets phase Degraded and status.degraded, and records a blocked
// action with reason Degraded after the rollback's. A Warning Degraded
// Event goes to the recommendation and its workload.
func (c *reconcileContext) degradedOutcome(o outcome, d *v1alpha1.DegradedState) outcome {
	msg := degradedMessage(c.rsr, d)
	o.phase, o.setReason, o.reason, o.message = v1alpha1.PhaseDegraded, true, v1alpha1.ReasonDegraded, msg
	rollback := o.status
	o.status = func(st *v1alpha1.RightsizingRecommendationStatus) {
		if rollback != nil {
			rollback(st)
		}
		st.Degraded = d
	}
	o.conditions = append(o.conditions, newCondition(v1alpha1.ConditionApplied, metav1.ConditionFalse, v1alpha1.AppliedReasonBlocked,
		v1alpha1.ReasonDegraded+": "+msg))
	o.then = &v1alpha1.Action{Type: v1alpha1.ActionBlocked, Reason: v1alpha1.ReasonDegraded, Message: msg}
	o.events = append(o.events,
		kubeEvent{typ: corev1.EventTypeWarning, reason: v1alpha1.EventDegraded, action: v1alpha1.EventActionRollback, note: msg},
		kubeEvent{typ: corev1.EventTypeWarning, reason: v1alpha1.EventDegraded, action: v1alpha1.EventActionRollback, note: "kerf: " + msg,
			onWorkload: true})
	return o
}

// resume lifts the Degraded mark when a person resumed the workload or
// its policy changed (resumeReason). It records the resume: phase
// Pending, reason Resumed or PolicyChanged, a resumed action in the
// history (the audit trail's answer to "who let it go"), a Normal
// Event. The pass
// then goes on, so the waiting values are planned. A rollback not
// restored yet is finished first (reconcile).
func (c *reconcileContext) resume(ctx context.Context) error {
	d := c.rsr.Status.Degraded
	if d == nil || d.Since == nil {
		return nil
	}
	reason, msg := c.resumeReason(d)
	if reason == "" {
		return nil
	}
	return c.record(ctx, outcome{
		doing: "record resume of",
		phase: v1alpha1.PhasePending, setReason: true, reason: reason, message: msg,
		status: func(st *v1alpha1.RightsizingRecommendationStatus) {
			st.Degraded.Since, st.Degraded.ResumedAt = nil, &metav1.Time{Time: c.now}
		},
		action:           &v1alpha1.Action{Type: v1alpha1.ActionResumed, Reason: reason, Message: msg},
		removeConditions: []string{v1alpha1.ConditionApplied},
		events:           []kubeEvent{{typ: corev1.EventTypeNormal, reason: reason, action: v1alpha1.EventActionApply, note: msg}},
	})
}

// degraded holds a Degraded workload back: it is handled, and nothing is
// planned, while the mark stands. New values (a new generation) are
// said to wait in status.message, once; they stay unobserved, so the
// resume plans them as any new generation.
func (c *reconcileContext) degraded(ctx context.Context) (ctrl.Result, bool, error) {
	st := &c.rsr.Status
	d := st.Degraded
	if d == nil || d.Since == nil {
		return ctrl.Result{}, false, nil
	}
	msg := degradedMessage(c.rsr, d)
	if st.ObservedGeneration != c.rsr.Generation {
		msg += fmt.Sprintf("; the values of generation %d wait", c.rsr.Generation)
	}
	if st.Phase == v1alpha1.PhaseDegraded && st.Reason == v1alpha1.ReasonDegraded && st.Message == msg {
		return ctrl.Result{}, true, nil
	}
	return ctrl.Result{}, true, c.record(ctx, outcome{
		doing: "record degraded hold of",
		phase: v1alpha1.PhaseDegraded, setReason: true, reason: v1alpha1.ReasonDegraded, message: msg,
	})
}

// resumeReason says why the Degraded mark d is lifted, "" while it
// stands. A person resumed it at or after the verdict
// (ResumeAnnotation), or the governing policy differs from the
// verdict's or turned the mark off.
func (c *reconcileContext) resumeReason(d *v1alpha1.DegradedState) (reason, msg string) {
	rsr := c.rsr
	if v, ok := rsr.Annotations[v1alpha1.ResumeAnnotation]; ok {
		at, err := time.Parse(time.RFC3339, v)
		switch {
		case err != nil:
			c.r.Log.Warn("annotation is not an RFC 3339 time; the workload stays Degraded", "recommendation", rsr.Namespace+"/"+rsr.Name,
				"annotation", v1alpha1.ResumeAnnotation, "value", v, "err", err)
		case !at.Before(d.Since.Time.Truncate(time.Second)):
			return v1alpha1.ReasonResumed, fmt.Sprintf("resumed at %s (annotation %s): only the changes applied from now on count",
				v, v1alpha1.ResumeAnnotation)
		}
	}
	switch {
	case c.resolved.Spec.Guardrails.DegradedOrDefault().Disabled:
		return v1alpha1.ReasonPolicyChanged, fmt.Sprintf("%s %s turned spec.guardrails.degraded off", c.resolved.Ref.Kind, c.resolved.Ref.Name)
	case c.resolved.Ref.Fingerprint != d.PolicyFingerprint:
		return v1alpha1.ReasonPolicyChanged, fmt.Sprintf("%s %s changed since the workload was marked Degraded (fingerprint %s, then %s): only the changes applied from now on count",
			c.resolved.Ref.Kind, c.resolved.Ref.Name, c.resolved.Ref.Fingerprint, d.PolicyFingerprint)
	}
	return "", ""
}
