package rightsizing

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/apply"
	"github.com/kerf-dev/kerf/cluster/gates"
	"github.com/kerf-dev/kerf/cluster/healthwatch"
	"github.com/kerf-dev/kerf/cluster/policy"
	"github.com/kerf-dev/kerf/cluster/workload"
)

// plan checks the guardrails, plans the change, checks the gates
// (cluster/gates) and records it before acting, then applies it.
func (c *reconcileContext) plan(ctx context.Context) (ctrl.Result, error) {
	rsr, resolved := c.rsr, c.resolved
	if rsr.Annotations[v1alpha1.PausedAnnotation] == "true" {
		return c.blocked(ctx, &policy.Block{Reason: v1alpha1.ReasonPaused,
			Message: "the recommendation pauses applies (annotation " + v1alpha1.PausedAnnotation + " is \"true\")"})
	}
	w, err := c.targetWorkload(ctx)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("read workload of %s/%s: %w", rsr.Namespace, rsr.Name, err)
	}
	running, err := c.r.Applier.Running(ctx, w, rsr.Spec.Strategy)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("read the values %s %s/%s runs: %w", w.Kind, rsr.Namespace, rsr.Spec.TargetRef.Name, err)
	}
	block, err := policy.CheckApply(c.now, resolved.Spec, &rsr.Status, running, rsr.Spec.Containers)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("check guardrails of %s/%s: %w", rsr.Namespace, rsr.Name, err)
	}
	if block != nil {
		return c.blocked(ctx, block)
	}

	change, err := c.r.Applier.Plan(ctx, rsr, w, running)
	if errors.Is(err, apply.ErrContainerNotFound) || errors.Is(err, apply.ErrInvalidValues) {
		// Retried when the recommendation or the workload changes.
		return c.blocked(ctx, &policy.Block{Reason: v1alpha1.ReasonInvalidValues, Message: err.Error()})
	}
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("plan %s/%s: %w", rsr.Namespace, rsr.Name, err)
	}
	if change == nil {
		// Nothing is changed, so no change is left in status: an earlier
		// one (rolled back, or healthy) under phase Applied would be
		// watched again, and the webhook would give its values to new pods.
		const msg = "the recommended values already run"
		return ctrl.Result{}, c.record(ctx, outcome{
			doing: "record values already running of",
			phase: v1alpha1.PhaseApplied, setReason: true, message: msg, observe: true,
			status:     func(st *v1alpha1.RightsizingRecommendationStatus) { st.Change = nil },
			conditions: []metav1.Condition{newCondition(v1alpha1.ConditionApplied, metav1.ConditionTrue, v1alpha1.AppliedReasonAlreadyRunning, msg)},
		})
	}
	change.PolicyFingerprint = resolved.Ref.Fingerprint
	change.ValueFingerprint = policy.ValueFingerprint(rsr.Spec.Containers)
	pods, err := c.pods(ctx)
	if err != nil {
		return ctrl.Result{}, err
	}
	guardrails := resolved.Spec.DeepCopy()
	guardrails.SetDefaults()
	block, err = c.r.Gates.Check(ctx, &gates.Change{Workload: w, Strategy: change.Strategy, Containers: change.Containers,
		Pods: pods, Guardrails: guardrails.Guardrails})
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("check the gates of %s/%s: %w", rsr.Namespace, rsr.Name, err)
	}
	if block != nil {
		return c.blocked(ctx, block)
	}
	// Restarts count from the change on (design section 3).
	change.RestartBaselines = healthwatch.RestartBaselines(pods)
	if guardrails.Guardrails.Canary != nil {
		running, err := workload.RunningPods(ctx, c.r.Client, w)
		if err != nil {
			return ctrl.Result{}, fmt.Errorf("choose the canary of %s/%s: %w", rsr.Namespace, rsr.Name, err)
		}
		change.Canary, c.canaryNote = chooseCanary(guardrails.Guardrails.Canary, change, running)
	}

	// Record the change before acting, conditional on resourceVersion: of
	// two leaders only one records it, and whoever finds it later knows
	// exactly what to finish and what to restore.
	err = c.record(ctx, outcome{
		doing:     "record change of",
		hook:      c.r.AfterRecord,
		setReason: true, observe: true,
		status: func(st *v1alpha1.RightsizingRecommendationStatus) {
			st.Breach, st.Change = nil, change
		},
		conditions: []metav1.Condition{newCondition(v1alpha1.ConditionApplied, metav1.ConditionFalse, v1alpha1.AppliedReasonApplying,
			fmt.Sprintf("applying %s with strategy %s", joinResources(change.Resources), change.Strategy))},
	})
	if err != nil {
		return ctrl.Result{}, err
	}
	return c.finish(ctx)
}

// finish applies the recorded change and records the outcome. Apply is
// idempotent, so running it again after a crash changes nothing twice; the
// applied action, its Event and its metric are recorded only with the
// status update that ends the apply.
func (c *reconcileContext) finish(ctx context.Context) (ctrl.Result, error) {
	rsr, change := c.rsr, c.rsr.Status.Change
	res, err := c.r.Applier.Apply(ctx, rsr, change)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("apply %s/%s: %w", rsr.Namespace, rsr.Name, err)
	}
	touched := func(st *v1alpha1.RightsizingRecommendationStatus) {
		st.Change.Touched, st.Change.TouchedOmitted = capTouched(res.Touched)
	}
	if len(res.Failed) > 0 {
		f := res.Failed[0]
		msg := podFailures(res.Failed, v1alpha1.MaxActionMessageLength)
		return ctrl.Result{}, c.record(ctx, outcome{
			doing: "record failed apply of",
			phase: v1alpha1.PhaseFailed, setReason: true, reason: f.Reason, message: msg,
			status:     touched,
			conditions: []metav1.Condition{newCondition(v1alpha1.ConditionApplied, metav1.ConditionFalse, f.Reason, msg)},
			action: &v1alpha1.Action{Type: v1alpha1.ActionFailed, Reason: f.Reason, Message: msg,
				Resources: change.Resources, Containers: valueChanges(change)},
			events: []kubeEvent{{typ: corev1.EventTypeWarning, reason: v1alpha1.EventApplyFailed, action: v1alpha1.EventActionApply, note: msg}},
		})
	}
	if len(res.Pending) > 0 {
		return ctrl.Result{RequeueAfter: pendingRequeue, Priority: ptr.To(pendingPriority)}, nil
	}
	note := c.canaryNote
	if note == "" {
		note = canaryNote(c.resolved.Spec.Guardrails.Canary, change)
	}
	msg := fmt.Sprintf("%s applied with strategy %s under %s %s%s", joinResources(change.Resources), change.Strategy, c.resolved.Ref.Kind, c.resolved.Ref.Name,
		canaryApplied(change, note))
	if len(res.Infeasible) > 0 {
		// The health watch rolls the change back if it stays so.
		msg += "; " + infeasiblePods(res.Infeasible, v1alpha1.MaxActionMessageLength-len(msg)-len("; "))
	}
	// The applied action's reason is the strategy; a canary's are Canary
	// and, once the rest followed, CanaryPromoted (docs/health.md).
	reason, event := string(change.Strategy), v1alpha1.EventApplied
	if ch := change.Canary; ch != nil && ch.PromotedAt == nil {
		reason = v1alpha1.ReasonCanary
	} else if ch != nil {
		reason, event = v1alpha1.ReasonCanaryPromoted, v1alpha1.EventCanaryPromoted
	}
	return ctrl.Result{}, c.record(ctx, outcome{
		doing: "record apply of",
		phase: v1alpha1.PhaseApplied, setReason: true, message: msg,
		status:     touched,
		conditions: []metav1.Condition{newCondition(v1alpha1.ConditionApplied, metav1.ConditionTrue, v1alpha1.AppliedReasonApplied, msg)},
		action: &v1alpha1.Action{Type: v1alpha1.ActionApplied, Reason: reason, Message: msg,
			Resources: change.Resources, Containers: valueChanges(change)},
		events: []kubeEvent{{typ: corev1.EventTypeNormal, reason: event, action: v1alpha1.EventActionApply, note: msg}},
	})
}

// blocked records that a guardrail holds the apply back, once per reason.
func (c *reconcileContext) blocked(ctx context.Context, b *policy.Block) (ctrl.Result, error) {
	var result ctrl.Result
	if b.Until != nil {
		result.RequeueAfter = max(b.Until.Sub(c.now), time.Second)
	}
	st := &c.rsr.Status
	if st.Phase == v1alpha1.PhaseBlocked && st.Reason == b.Reason && st.Message == b.Message {
		return result, nil // already recorded
	}
	err := c.record(ctx, outcome{
		doing: "record block of",
		phase: v1alpha1.PhaseBlocked, setReason: true, reason: b.Reason, message: b.Message, observe: true,
		conditions: []metav1.Condition{newCondition(v1alpha1.ConditionApplied, metav1.ConditionFalse, v1alpha1.AppliedReasonBlocked, b.Reason+": "+b.Message)},
		action:     &v1alpha1.Action{Type: v1alpha1.ActionBlocked, Reason: b.Reason, Message: b.Message},
		events: []kubeEvent{{typ: corev1.EventTypeNormal, reason: v1alpha1.EventBlocked, action: v1alpha1.EventActionApply,
			note: b.Reason + ": " + b.Message}},
	})
	if err != nil {
		return ctrl.Result{}, err
	}
	return result, nil
}

// noPolicy blocks a recommendation no policy selects. The watch and
// rollback state left from a policy that disappeared is cleared by
// policy.ClearForNoPolicy, with its Normal StateCleared Event, and the
// workload's kerf.dev/rollback-state annotation is removed (design
// section 2). The caller has finished an unrestored rollback first.
func (c *reconcileContext) noPolicy(ctx context.Context) error {
	rsr := c.rsr
	if rsr.Status.Phase == v1alpha1.PhaseBlocked && rsr.Status.Reason == v1alpha1.ReasonNoPolicy {
		return nil
	}
	evs, ok := policy.ClearForNoPolicy(&rsr.Status)
	if !ok {
		return fmt.Errorf("clear the state of %s/%s: its rollback is not restored yet", rsr.Namespace, rsr.Name)
	}
	msg := fmt.Sprintf("no RightsizingPolicy, ClusterRightsizingPolicy, RollbackPolicy or ClusterRollbackPolicy selects %s %s", rsr.Spec.TargetRef.Kind, rsr.Spec.TargetRef.Name)
	return c.record(ctx, outcome{
		doing: "record missing policy of",
		phase: v1alpha1.PhaseBlocked, setReason: true, reason: v1alpha1.ReasonNoPolicy, message: msg, observe: true,
		conditions: []metav1.Condition{newCondition(v1alpha1.ConditionApplied, metav1.ConditionFalse, v1alpha1.AppliedReasonBlocked,
			v1alpha1.ReasonNoPolicy+": "+msg)},
		removeConditions: []string{v1alpha1.ConditionHealthWatch},
		// No policy is a change of policy: a Degraded mark is lifted.
		status: func(st *v1alpha1.RightsizingRecommendationStatus) {
			if d := st.Degraded; d != nil && d.Since != nil {
				d.Since, d.ResumedAt = nil, &metav1.Time{Time: c.now}
			}
		},
		action: &v1alpha1.Action{Type: v1alpha1.ActionBlocked, Reason: v1alpha1.ReasonNoPolicy, Message: msg},
		events: []kubeEvent{{typ: corev1.EventTypeWarning, reason: v1alpha1.ReasonNoPolicy, action: v1alpha1.EventActionApply, note: msg}},
		// The state is gone: its mirror on the workload is removed.
		rollbackChanged: true, backoff: evs,
	})
}

func valueChanges(c *v1alpha1.Change) []v1alpha1.ContainerValueChange {
	out := make([]v1alpha1.ContainerValueChange, 0, len(c.Containers))
	for _, cc := range c.Containers {
		out = append(out, v1alpha1.ContainerValueChange{Name: cc.Name, Old: cc.Previous, New: cc.Applied})
	}
	return out
}

func joinResources(rs []v1alpha1.ResourceName) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = string(r)
	}
	return strings.Join(s, " and ")
}
