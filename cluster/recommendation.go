package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/apply"
	"github.com/kerf-dev/kerf/cluster/fence"
	"github.com/kerf-dev/kerf/cluster/healthwatch"
	"github.com/kerf-dev/kerf/cluster/policy"
)

// pendingRequeue is how soon a change whose in-place resizes are still
// running is looked at again.
const pendingRequeue = 2 * time.Second

// RecommendationReconciler applies RightsizingRecommendations: it resolves
// the workload's policy, checks the guardrails, records the change in
// status and then makes it run (design section 4). It is level-driven: a
// leader that restarts, or takes over, reads status and converges.
type RecommendationReconciler struct {
	Client  client.Client
	Applier *apply.Applier
	// RollbackClient and Rollbacks write a rollback (a breach's status,
	// the restore and its record, the workload's mirror): the same as
	// Client and Applier but on a client budget of their own, which the
	// applies never spend (docs/leader.md, "The clients and their
	// budgets"). Nil means Client and Applier.
	RollbackClient client.Client
	Rollbacks      *apply.Applier
	Recorder       events.EventRecorder
	Metrics        *Metrics
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
	// Workers is how many recommendations are reconciled at once (never
	// one twice at once); 0 means DefaultWorkers.
	Workers int
	// RollbackWorkers is how many workers are kept for the harm signals'
	// requests, on a controller of their own (docs/leader.md, "Workers
	// and the rollbacks' priority"); 0 means DefaultRollbackWorkers,
	// NoRollbackWorkers none.
	RollbackWorkers int
	// Now is the clock; tests inject theirs.
	Now func() time.Time
	// AfterRecord, when set, runs after a change is recorded in status and
	// before it is applied; the failover test stops a leader there.
	AfterRecord func(ctx context.Context, rsr *v1alpha1.RightsizingRecommendation)
	// AfterBreach, when set, runs after a breach is recorded and before
	// the restore; the failover test stops a leader there.
	AfterBreach func(ctx context.Context, rsr *v1alpha1.RightsizingRecommendation)
	// gate is the applies' yield to rollbacks: a rollback pass holds it
	// (reconcileContext.beginRollback); nil without (the tests'
	// reconcilers, unless they set it).
	gate *fence.RollbackGate
	// DuringPass, when set, runs as a pass of req starts, its lock taken,
	// in the rollbacks' path (reserved) or the other; the pass ends after
	// the func it returns (tests only).
	DuringPass func(req ctrl.Request, reserved bool) (done func())
}

// Reconcile is one pass over one recommendation.
func (r *RecommendationReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	c, err := r.newContext(ctx, req)
	if c == nil || err != nil {
		return ctrl.Result{}, err
	}
	res, err := func() (ctrl.Result, error) {
		defer c.endRollback()
		return c.reconcile(ctx)
	}()
	if err == nil {
		// After the pass's own work, so a refusal never delays a rollback.
		err = c.recordRefusals(ctx)
	}
	return res, err
}

// reconcile decides what the recommendation needs next and does it.
func (c *reconcileContext) reconcile(ctx context.Context) (ctrl.Result, error) {
	rsr := c.rsr
	if c.resolved == nil {
		// A rollback already decided is finished first: the policy going
		// away never leaves harmful values running, nor a breach without
		// its change (design section 4).
		if b := rsr.Status.Breach; b != nil && !b.Restored && rsr.Status.Change != nil {
			res, err := c.restore(ctx)
			if err != nil || !rsr.Status.Breach.Restored {
				return res, err
			}
		}
		return ctrl.Result{}, c.noPolicy(ctx)
	}
	// A change recorded but not finished (a leader stopped mid-apply):
	// finish exactly that change.
	if cond := meta.FindStatusCondition(rsr.Status.Conditions, v1alpha1.ConditionApplied); rsr.Status.Change != nil &&
		cond != nil && cond.Status != metav1.ConditionTrue && cond.Reason == v1alpha1.AppliedReasonApplying {
		return c.finish(ctx)
	}
	if res, handled, err := c.health(ctx); handled {
		return res, err
	}
	if rsr.Status.ObservedGeneration == rsr.Generation && rsr.Status.Phase != "" &&
		rsr.Status.Phase != v1alpha1.PhasePending && rsr.Status.Phase != v1alpha1.PhaseBlocked && !freshTurn(rsr, c.resolved.Ref.Fingerprint) {
		return ctrl.Result{}, nil // this generation was acted on; the health watch takes it from here
	}
	return c.plan(ctx)
}

// plan checks the guardrails, plans the change and records it before
// acting, then applies it.
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
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("plan %s/%s: %w", rsr.Namespace, rsr.Name, err)
	}
	if change == nil {
		const msg = "the recommended values already run"
		return ctrl.Result{}, c.record(ctx, outcome{
			doing: "record values already running of",
			phase: v1alpha1.PhaseApplied, setReason: true, message: msg, observe: true,
			conditions: []metav1.Condition{newCondition(v1alpha1.ConditionApplied, metav1.ConditionTrue, v1alpha1.AppliedReasonAlreadyRunning, msg)},
		})
	}
	change.PolicyFingerprint = resolved.Ref.Fingerprint
	change.ValueFingerprint = policy.ValueFingerprint(rsr.Spec.Containers)
	pods, err := c.pods(ctx)
	if err != nil {
		return ctrl.Result{}, err
	}
	// Restarts count from the change on (design section 3).
	change.RestartBaselines = healthwatch.RestartBaselines(pods)

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
	msg := fmt.Sprintf("%s applied with strategy %s under %s %s", joinResources(change.Resources), change.Strategy, c.resolved.Ref.Kind, c.resolved.Ref.Name)
	if len(res.Infeasible) > 0 {
		// The health watch rolls the change back if it stays so.
		msg += "; " + infeasiblePods(res.Infeasible, v1alpha1.MaxActionMessageLength-len(msg)-len("; "))
	}
	return ctrl.Result{}, c.record(ctx, outcome{
		doing: "record apply of",
		phase: v1alpha1.PhaseApplied, setReason: true, message: msg,
		status:     touched,
		conditions: []metav1.Condition{newCondition(v1alpha1.ConditionApplied, metav1.ConditionTrue, v1alpha1.AppliedReasonApplied, msg)},
		action: &v1alpha1.Action{Type: v1alpha1.ActionApplied, Reason: string(change.Strategy), Message: msg,
			Resources: change.Resources, Containers: valueChanges(change)},
		events: []kubeEvent{{typ: corev1.EventTypeNormal, reason: v1alpha1.EventApplied, action: v1alpha1.EventActionApply, note: msg}},
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
	msg := fmt.Sprintf("no RightsizingPolicy or ClusterRightsizingPolicy selects %s %s", rsr.Spec.TargetRef.Kind, rsr.Spec.TargetRef.Name)
	return c.record(ctx, outcome{
		doing: "record missing policy of",
		phase: v1alpha1.PhaseBlocked, setReason: true, reason: v1alpha1.ReasonNoPolicy, message: msg, observe: true,
		conditions: []metav1.Condition{newCondition(v1alpha1.ConditionApplied, metav1.ConditionFalse, v1alpha1.AppliedReasonBlocked,
			v1alpha1.ReasonNoPolicy+": "+msg)},
		removeConditions: []string{v1alpha1.ConditionHealthWatch},
		action:           &v1alpha1.Action{Type: v1alpha1.ActionBlocked, Reason: v1alpha1.ReasonNoPolicy, Message: msg},
		events:           []kubeEvent{{typ: corev1.EventTypeWarning, reason: v1alpha1.ReasonNoPolicy, action: v1alpha1.EventActionApply, note: msg}},
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

// freshTurn reports whether the rolled-back values the recommendation
// still asks for may try again (design section 4): the backoff let them,
// its turn expired with turns left (state backedOff), or they are
// failedPermanent under another policy state than the governing policy's
// (policyFingerprint), which reopens them for a fresh run.
func freshTurn(rsr *v1alpha1.RightsizingRecommendation, policyFingerprint string) bool {
	st := rsr.Status.Rollback
	if rsr.Status.Phase != v1alpha1.PhaseRolledBack || st == nil || st.Fingerprint != policy.ValueFingerprint(rsr.Spec.Containers) {
		return false
	}
	return st.State == v1alpha1.BackoffBackedOff || policy.Reopened(st, policyFingerprint)
}
