package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/apply"
	"github.com/kerf-dev/kerf/cluster/healthwatch"
	"github.com/kerf-dev/kerf/cluster/policy"
)

// historyLimit is how many actions status.history keeps (design section 2).
const historyLimit = 100

// Reasons of the Applied condition.
const (
	// AppliedReasonApplying marks a change recorded in status.change whose
	// apply has not finished: a leader that finds it finishes that change
	// (the apply is idempotent) rather than planning a new one.
	AppliedReasonApplying = "Applying"
	// AppliedReasonApplied means the values run (or, for InPlace and
	// Deferred, new pods get them from the webhook).
	AppliedReasonApplied = "Applied"
	// AppliedReasonAlreadyRunning means the values already ran: nothing
	// was changed and there is nothing to watch.
	AppliedReasonAlreadyRunning = "AlreadyRunning"
	// AppliedReasonBlocked means a guardrail holds the apply back.
	AppliedReasonBlocked = "Blocked"
)

// pendingRequeue is how soon a change whose in-place resizes are still
// running is looked at again.
const pendingRequeue = 2 * time.Second

// RecommendationReconciler applies RightsizingRecommendations: it resolves
// the workload's policy, checks the guardrails, records the change in
// status and then makes it run (design section 4). It is level-driven: a
// leader that restarts, or takes over, reads status and converges.
type RecommendationReconciler struct {
	Client   client.Client
	Applier  *apply.Applier
	Recorder events.EventRecorder
	Metrics  *Metrics
	// Kernel gives the agents' OOM kill counts; nil counts only what pod
	// status shows.
	Kernel healthwatch.KernelSource
	// Statuses gives the container restarts and terminations the agents
	// saw before pod status; nil counts only what pod status shows.
	Statuses healthwatch.AgentStatusSource
	// Throttling gives CFS counters; nil leaves throttling not evaluated.
	Throttling healthwatch.ThrottlingSource
	// Log is the leader's logger.
	Log *slog.Logger
	// Now is the clock; tests inject theirs.
	Now func() time.Time
	// AfterRecord, when set, runs after a change is recorded in status and
	// before it is applied; the failover test stops a leader there.
	AfterRecord func(ctx context.Context, rsr *v1alpha1.RightsizingRecommendation)
	// AfterBreach, when set, runs after a breach is recorded and before
	// the restore; the failover test stops a leader there.
	AfterBreach func(ctx context.Context, rsr *v1alpha1.RightsizingRecommendation)
}

// Reconcile is one pass over one recommendation.
func (r *RecommendationReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var rsr v1alpha1.RightsizingRecommendation
	if err := r.Client.Get(ctx, req.NamespacedName, &rsr); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if rsr.DeletionTimestamp != nil {
		return ctrl.Result{}, nil
	}
	resolved, err := r.resolvePolicy(ctx, &rsr)
	if err != nil {
		return ctrl.Result{}, err
	}
	if resolved == nil {
		return ctrl.Result{}, r.noPolicy(ctx, &rsr)
	}

	// A change recorded but not finished (a leader stopped mid-apply):
	// finish exactly that change.
	if c := meta.FindStatusCondition(rsr.Status.Conditions, v1alpha1.ConditionApplied); rsr.Status.Change != nil &&
		c != nil && c.Status != metav1.ConditionTrue && c.Reason == AppliedReasonApplying {
		return r.finish(ctx, &rsr, resolved)
	}
	if res, handled, err := r.health(ctx, &rsr, resolved); handled {
		return res, err
	}
	if rsr.Status.ObservedGeneration == rsr.Generation && rsr.Status.Phase != "" &&
		rsr.Status.Phase != v1alpha1.PhasePending && rsr.Status.Phase != v1alpha1.PhaseBlocked && !freshTurn(&rsr) {
		return ctrl.Result{}, nil // this generation was acted on; the health watch takes it from here
	}

	workload, running, err := r.Applier.Workload(ctx, &rsr)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("read workload of %s/%s: %w", rsr.Namespace, rsr.Name, err)
	}
	now := r.Now()
	block, err := policy.CheckApply(now, resolved.Spec, &rsr.Status, running, rsr.Spec.Containers)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("check guardrails of %s/%s: %w", rsr.Namespace, rsr.Name, err)
	}
	if block != nil {
		return r.blocked(ctx, &rsr, resolved, block)
	}

	change, err := r.Applier.Plan(ctx, &rsr)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("plan %s/%s: %w", rsr.Namespace, rsr.Name, err)
	}
	if change == nil {
		rsr.Status.Phase = v1alpha1.PhaseApplied
		rsr.Status.Reason, rsr.Status.Message = "", "the recommended values already run"
		rsr.Status.Policy = &resolved.Ref
		rsr.Status.ObservedGeneration = rsr.Generation
		setCondition(&rsr, v1alpha1.ConditionApplied, metav1.ConditionTrue, AppliedReasonAlreadyRunning, "the recommended values already run", now)
		return ctrl.Result{}, r.Client.Status().Update(ctx, &rsr)
	}
	change.PolicyFingerprint = resolved.Ref.Fingerprint
	change.ValueFingerprint = policy.ValueFingerprint(rsr.Spec.Containers)
	pods, err := r.workloadPods(ctx, workload)
	if err != nil {
		return ctrl.Result{}, err
	}
	// Restarts count from the change on (design section 3).
	change.RestartBaselines = restartBaselines(pods)
	rsr.Status.Breach = nil

	// Record the change before acting, conditional on resourceVersion: of
	// two leaders only one records it, and whoever finds it later knows
	// exactly what to finish and what to restore.
	rsr.Status.Change = change
	rsr.Status.Policy = &resolved.Ref
	rsr.Status.ObservedGeneration = rsr.Generation
	rsr.Status.Reason, rsr.Status.Message = "", ""
	setCondition(&rsr, v1alpha1.ConditionApplied, metav1.ConditionFalse, AppliedReasonApplying,
		fmt.Sprintf("applying %s with strategy %s", joinResources(change.Resources), change.Strategy), now)
	if err := r.Client.Status().Update(ctx, &rsr); err != nil {
		return ctrl.Result{}, fmt.Errorf("record change of %s/%s: %w", rsr.Namespace, rsr.Name, err)
	}
	if r.AfterRecord != nil {
		r.AfterRecord(ctx, &rsr)
		if ctx.Err() != nil {
			return ctrl.Result{}, ctx.Err()
		}
	}
	return r.finish(ctx, &rsr, resolved)
}

// finish applies the recorded change and records the outcome. Apply is
// idempotent, so running it again after a crash changes nothing twice; the
// applied action, its Event and its metric are recorded only with the
// status update that ends the apply.
func (r *RecommendationReconciler) finish(ctx context.Context, rsr *v1alpha1.RightsizingRecommendation, resolved *policy.Resolved) (ctrl.Result, error) {
	change := rsr.Status.Change
	res, err := r.Applier.Apply(ctx, rsr, change)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("apply %s/%s: %w", rsr.Namespace, rsr.Name, err)
	}
	now := r.Now()
	if len(res.Failed) > 0 {
		f := res.Failed[0]
		msgs := make([]string, 0, len(res.Failed))
		for _, f := range res.Failed {
			msgs = append(msgs, fmt.Sprintf("pod %s: %s: %s", f.Pod, f.Reason, f.Message))
		}
		msg := strings.Join(msgs, "; ")
		rsr.Status.Phase = v1alpha1.PhaseFailed
		rsr.Status.Reason, rsr.Status.Message = f.Reason, msg
		change.Touched = res.Touched
		setCondition(rsr, v1alpha1.ConditionApplied, metav1.ConditionFalse, f.Reason, msg, now)
		addHistory(rsr, v1alpha1.Action{Time: metav1.NewTime(now), Type: v1alpha1.ActionFailed, Reason: f.Reason,
			Message: msg, Resources: change.Resources, Containers: valueChanges(change)})
		if err := r.Client.Status().Update(ctx, rsr); err != nil {
			return ctrl.Result{}, fmt.Errorf("record failed apply of %s/%s: %w", rsr.Namespace, rsr.Name, err)
		}
		r.Recorder.Eventf(rsr, nil, corev1.EventTypeWarning, "ApplyFailed", "Apply", "%s", msg)
		r.Metrics.count(v1alpha1.ActionFailed, f.Reason, change.Resources)
		return ctrl.Result{}, nil
	}
	if len(res.Pending) > 0 {
		return ctrl.Result{RequeueAfter: pendingRequeue}, nil
	}
	change.Touched = res.Touched
	rsr.Status.Phase = v1alpha1.PhaseApplied
	rsr.Status.Reason = ""
	rsr.Status.Message = fmt.Sprintf("%s applied with strategy %s under %s %s", joinResources(change.Resources), change.Strategy, resolved.Ref.Kind, resolved.Ref.Name)
	setCondition(rsr, v1alpha1.ConditionApplied, metav1.ConditionTrue, AppliedReasonApplied, rsr.Status.Message, now)
	addHistory(rsr, v1alpha1.Action{Time: metav1.NewTime(now), Type: v1alpha1.ActionApplied, Reason: string(change.Strategy),
		Message: rsr.Status.Message, Resources: change.Resources, Containers: valueChanges(change)})
	if err := r.Client.Status().Update(ctx, rsr); err != nil {
		return ctrl.Result{}, fmt.Errorf("record apply of %s/%s: %w", rsr.Namespace, rsr.Name, err)
	}
	r.Recorder.Eventf(rsr, nil, corev1.EventTypeNormal, "Applied", "Apply", "%s", rsr.Status.Message)
	r.Metrics.count(v1alpha1.ActionApplied, string(change.Strategy), change.Resources)
	return ctrl.Result{}, nil
}

// blocked records that a guardrail holds the apply back, once per reason.
func (r *RecommendationReconciler) blocked(ctx context.Context, rsr *v1alpha1.RightsizingRecommendation, resolved *policy.Resolved, b *policy.Block) (ctrl.Result, error) {
	var result ctrl.Result
	if b.Until != nil {
		result.RequeueAfter = max(b.Until.Sub(r.Now()), time.Second)
	}
	if rsr.Status.Phase == v1alpha1.PhaseBlocked && rsr.Status.Reason == b.Reason && rsr.Status.Message == b.Message {
		return result, nil // already recorded
	}
	now := r.Now()
	rsr.Status.Phase = v1alpha1.PhaseBlocked
	rsr.Status.Reason, rsr.Status.Message = b.Reason, b.Message
	rsr.Status.Policy = &resolved.Ref
	rsr.Status.ObservedGeneration = rsr.Generation
	setCondition(rsr, v1alpha1.ConditionApplied, metav1.ConditionFalse, AppliedReasonBlocked, b.Reason+": "+b.Message, now)
	addHistory(rsr, v1alpha1.Action{Time: metav1.NewTime(now), Type: v1alpha1.ActionBlocked, Reason: b.Reason, Message: b.Message})
	if err := r.Client.Status().Update(ctx, rsr); err != nil {
		return ctrl.Result{}, fmt.Errorf("record block of %s/%s: %w", rsr.Namespace, rsr.Name, err)
	}
	r.Recorder.Eventf(rsr, nil, corev1.EventTypeNormal, "Blocked", "Apply", "%s: %s", b.Reason, b.Message)
	r.Metrics.count(v1alpha1.ActionBlocked, b.Reason, nil)
	return result, nil
}

// noPolicy blocks a recommendation no policy selects. A watch or rollback
// state left from a policy that disappeared is cleared, with an Event
// (design section 2).
func (r *RecommendationReconciler) noPolicy(ctx context.Context, rsr *v1alpha1.RightsizingRecommendation) error {
	if rsr.Status.Phase == v1alpha1.PhaseBlocked && rsr.Status.Reason == v1alpha1.ReasonNoPolicy {
		return nil
	}
	now := r.Now()
	cleared := rsr.Status.Change != nil || rsr.Status.Rollback != nil
	msg := fmt.Sprintf("no RightsizingPolicy or ClusterRightsizingPolicy selects %s %s", rsr.Spec.TargetRef.Kind, rsr.Spec.TargetRef.Name)
	rsr.Status.Phase = v1alpha1.PhaseBlocked
	rsr.Status.Reason, rsr.Status.Message = v1alpha1.ReasonNoPolicy, msg
	rsr.Status.Policy, rsr.Status.Change, rsr.Status.Rollback = nil, nil, nil
	rsr.Status.ObservedGeneration = rsr.Generation
	setCondition(rsr, v1alpha1.ConditionApplied, metav1.ConditionFalse, AppliedReasonBlocked, v1alpha1.ReasonNoPolicy+": "+msg, now)
	meta.RemoveStatusCondition(&rsr.Status.Conditions, v1alpha1.ConditionHealthWatch)
	addHistory(rsr, v1alpha1.Action{Time: metav1.NewTime(now), Type: v1alpha1.ActionBlocked, Reason: v1alpha1.ReasonNoPolicy, Message: msg})
	if err := r.Client.Status().Update(ctx, rsr); err != nil {
		return fmt.Errorf("record missing policy of %s/%s: %w", rsr.Namespace, rsr.Name, err)
	}
	r.Recorder.Eventf(rsr, nil, corev1.EventTypeWarning, v1alpha1.ReasonNoPolicy, "Apply", "%s", msg)
	if cleared {
		r.Recorder.Eventf(rsr, nil, corev1.EventTypeWarning, policy.EventStateCleared, "Watch",
			"watch and rollback state cleared: no policy resolves for this workload any more")
	}
	r.Metrics.count(v1alpha1.ActionBlocked, v1alpha1.ReasonNoPolicy, nil)
	return nil
}

// resolvePolicy finds the policy that governs the recommendation's
// workload, or nil.
func (r *RecommendationReconciler) resolvePolicy(ctx context.Context, rsr *v1alpha1.RightsizingRecommendation) (*policy.Resolved, error) {
	var ns corev1.Namespace
	if err := r.Client.Get(ctx, client.ObjectKey{Name: rsr.Namespace}, &ns); err != nil {
		return nil, fmt.Errorf("read namespace %s: %w", rsr.Namespace, err)
	}
	workload, err := r.Applier.Target(ctx, rsr)
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("read workload of %s/%s: %w", rsr.Namespace, rsr.Name, err)
	}
	w := policy.Workload{Kind: rsr.Spec.TargetRef.Kind, Namespace: rsr.Namespace, Name: rsr.Spec.TargetRef.Name}
	if workload != nil {
		w.Labels = workload.GetLabels()
	}
	var namespaced v1alpha1.RightsizingPolicyList
	if err := r.Client.List(ctx, &namespaced, client.InNamespace(rsr.Namespace)); err != nil {
		return nil, fmt.Errorf("list RightsizingPolicies in %s: %w", rsr.Namespace, err)
	}
	var cluster v1alpha1.ClusterRightsizingPolicyList
	if err := r.Client.List(ctx, &cluster); err != nil {
		return nil, fmt.Errorf("list ClusterRightsizingPolicies: %w", err)
	}
	return policy.Resolve(w, ns.Labels, namespaced.Items, cluster.Items)
}

func setCondition(rsr *v1alpha1.RightsizingRecommendation, typ string, status metav1.ConditionStatus, reason, msg string, now time.Time) {
	meta.SetStatusCondition(&rsr.Status.Conditions, metav1.Condition{
		Type: typ, Status: status, Reason: reason, Message: msg,
		ObservedGeneration: rsr.Generation, LastTransitionTime: metav1.NewTime(now),
	})
}

// addHistory appends an action and keeps the newest historyLimit.
func addHistory(rsr *v1alpha1.RightsizingRecommendation, a v1alpha1.Action) {
	h := append(rsr.Status.History, a)
	if len(h) > historyLimit {
		h = slices.Clone(h[len(h)-historyLimit:])
	}
	rsr.Status.History = h
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

// freshTurn reports whether the backoff has let the rolled-back values
// try again: its turn expired with turns left (state backedOff) for the
// values the recommendation still asks for (design section 4).
func freshTurn(rsr *v1alpha1.RightsizingRecommendation) bool {
	st := rsr.Status.Rollback
	return rsr.Status.Phase == v1alpha1.PhaseRolledBack && st != nil && st.State == v1alpha1.BackoffBackedOff &&
		st.Fingerprint == policy.ValueFingerprint(rsr.Spec.Containers)
}
