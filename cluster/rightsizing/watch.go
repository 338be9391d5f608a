package rightsizing

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/healthwatch"
	"github.com/kerf-dev/kerf/cluster/policy"
	"github.com/kerf-dev/kerf/cluster/resources"
)

// watchRecheck bounds how long a running watch goes without a look, for
// signals that arrive without an event (none should).
const watchRecheck = 30 * time.Second

// watchRecheckSpread is the part of watchRecheck by which a recheck comes
// sooner, at random (recheckAfter).
const watchRecheckSpread = 0.2

// recheckAfter is when a running watch is looked at again without an
// event. It is at the random point u (in [0, 1)) of the last
// watchRecheckSpread of watchRecheck, never later than it. Watches looked at together, as after
// a backlog of the reconciler, would otherwise come back together every
// 30 s, a burst of work the leader's heap holds at once: in a run at
// 25,000 watches its heap peaked in bursts 30 s apart (docs/performance.md,
// "The shipped build"). A spread drawn anew each time lets them drift
// apart.
func recheckAfter(u float64) time.Duration {
	return watchRecheck - time.Duration(u*watchRecheckSpread*float64(watchRecheck))
}

// health runs the part of a recommendation's life after its change was
// applied: the watch, the rollback and the backoff (design sections 3 and
// 4). It returns handled=false when there is nothing for it to do.
func (c *reconcileContext) health(ctx context.Context) (ctrl.Result, bool, error) {
	st := &c.rsr.Status
	current := st.ObservedGeneration == c.rsr.Generation
	switch {
	case st.Breach != nil && !st.Breach.Restored:
		// Marked RolledBack but not restored yet (or a leader stopped
		// half-way): finish the restore. Pause and freeze windows never
		// hold a rollback back.
		res, err := c.restore(ctx)
		return res, true, err
	case st.Phase == v1alpha1.PhaseApplied && st.Change != nil:
		// A change is watched to its end, whatever newer generation
		// arrived meanwhile (docs/health.md).
		res, err := c.startWatch(ctx)
		return res, true, err
	case st.Phase == v1alpha1.PhaseWatching && st.Change != nil:
		res, err := c.watch(ctx)
		if err != nil || current {
			return res, true, err
		}
		if st.Phase != v1alpha1.PhaseWatching {
			// The watch ended: the held generation is planned now.
			return ctrl.Result{RequeueAfter: time.Millisecond}, true, nil
		}
		return res, true, c.holdGeneration(ctx)
	case !current:
		return ctrl.Result{}, false, nil // a new generation: plan it
	case st.Rollback != nil && st.Rollback.State == v1alpha1.BackoffBackingOff:
		res, err := c.advanceBackoff(ctx)
		return res, true, err
	}
	return ctrl.Result{}, false, nil
}

// holdGeneration records, once per generation, that a newer generation
// of the spec waits for the running watch to end. Applying it now would
// end the watch of a change that has not passed one. A harm the first
// change causes later, such as an OOM kill under the memory it lowered,
// would be counted against the second. That one may not touch the
// resource, so the harm would never be rolled back. So the phase stays
// Watching, status.reason says WatchRunning, and the new values are
// planned (guardrails first) once the watch ends healthy or its rollback
// is restored.
func (c *reconcileContext) holdGeneration(ctx context.Context) error {
	rsr := c.rsr
	st := &rsr.Status
	t0, end := st.Change.AppliedAt.Time, st.Change.AppliedAt.Time
	if !st.Change.Promoted() {
		end = st.Change.Canary.Until.Time // then the full watch
	}
	msg := fmt.Sprintf("generation %d waits for the watch of the change applied at %s (generation %d) to end, by %s at the latest",
		rsr.Generation, t0.UTC().Format(time.RFC3339), st.ObservedGeneration,
		end.Add(c.resolved.Spec.Guardrails.Rollback.WatchDuration.Duration).UTC().Format(time.RFC3339))
	if st.Reason == v1alpha1.ReasonWatchRunning && st.Message == msg {
		return nil // already recorded
	}
	return c.record(ctx, outcome{
		doing:     "record held generation of",
		setReason: true, reason: v1alpha1.ReasonWatchRunning, message: msg,
		action: &v1alpha1.Action{Type: v1alpha1.ActionBlocked, Reason: v1alpha1.ReasonWatchRunning, Message: msg},
		events: []kubeEvent{{typ: corev1.EventTypeNormal, reason: v1alpha1.EventBlocked, action: v1alpha1.EventActionApply,
			note: v1alpha1.ReasonWatchRunning + ": " + msg}},
	})
}

// startWatch moves an applied change into the watch.
func (c *reconcileContext) startWatch(ctx context.Context) (ctrl.Result, error) {
	rsr := c.rsr
	if rsr.Status.Rollback == nil {
		rsr.Status.Rollback = &v1alpha1.RollbackState{LastKnownGood: rsr.Status.LastHealthy.DeepCopy()}
	}
	evs, err := policy.StartMonitoring(c.now, rsr.Status.Rollback, rsr.Status.Change.ValueFingerprint, c.resolved.Ref)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("start monitoring %s/%s: %w", rsr.Namespace, rsr.Name, err)
	}
	err = c.record(ctx, outcome{
		doing:  "start watch of",
		phase:  v1alpha1.PhaseWatching,
		status: func(st *v1alpha1.RightsizingRecommendationStatus) { st.Breach = nil },
		conditions: []metav1.Condition{newCondition(v1alpha1.ConditionHealthWatch, metav1.ConditionTrue, v1alpha1.HealthWatchWatching,
			fmt.Sprintf("watching since %s", rsr.Status.Change.AppliedAt.UTC().Format(time.RFC3339)))},
		rollbackChanged: true, backoff: evs,
	})
	if err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: time.Millisecond}, nil
}

// watch evaluates the rules once and acts on the verdict.
func (c *reconcileContext) watch(ctx context.Context) (ctrl.Result, error) {
	rsr := c.rsr
	pods, err := c.pods(ctx)
	if err != nil {
		return ctrl.Result{}, err
	}
	in := healthwatch.Input{
		Change:           rsr.Status.Change,
		Guardrails:       c.resolved.Spec.Guardrails.Rollback,
		Pods:             pods,
		RestartBaselines: rsr.Status.Change.RestartBaselines,
		Kernel:           c.r.Kernel,
		Statuses:         c.r.Statuses,
		Throttling:       c.r.Throttling,
		// A leader that takes over after the window opened starts it
		// from the recorded counters, not from its own first sample.
		ThrottlingBaselines: rsr.Status.Change.ThrottlingBaselines,
		// Kills since the change are the kernel's absolute counts less
		// these: a leader that was down while they happened counts them.
		OOMBaselines: rsr.Status.Change.OOMBaselines,
	}
	// An unpromoted canary is watched alone, with the same rules, until
	// canary.until (docs/health.md, "Canary").
	v := healthwatch.Evaluate(c.now, canaryWatch(in))
	v.Message = canaryMessage(rsr.Status.Change, v.Message)
	switch {
	case v.State == healthwatch.StateBreached:
		return c.breach(ctx, v)
	case v.State == healthwatch.StateHealthy && !rsr.Status.Change.Promoted():
		return c.promote(ctx, v)
	case v.State == healthwatch.StateHealthy:
		return c.healthy(ctx, v)
	}
	// The message carries live figures; rewriting status for each would
	// cost a write per signal, so the condition is rewritten only when
	// what is not evaluated yet changes (the reason stays Watching).
	// New throttling baselines (the window opened, or a container got its
	// first counters in it) are written with it, so that a leader that
	// takes over continues the window instead of starting it anew. So are
	// new OOM baselines (the instances' kernel OOM kill counts at T0, on
	// the watch's first evaluation), so that kills made while no leader
	// ran count from them.
	cond := meta.FindStatusCondition(rsr.Status.Conditions, v1alpha1.ConditionHealthWatch)
	if cond == nil || cond.Reason != v1alpha1.HealthWatchWatching || !sameNotEvaluated(cond.Message, v) || v.ThrottlingBaselines != nil || v.OOMBaselines != nil {
		o := outcome{
			doing:      "record watch of",
			conditions: []metav1.Condition{newCondition(v1alpha1.ConditionHealthWatch, metav1.ConditionTrue, v1alpha1.HealthWatchWatching, v.Message)},
		}
		if v.ThrottlingBaselines != nil || v.OOMBaselines != nil {
			o.status = func(st *v1alpha1.RightsizingRecommendationStatus) {
				if v.ThrottlingBaselines != nil {
					st.Change.ThrottlingBaselines = v.ThrottlingBaselines
				}
				if v.OOMBaselines != nil {
					st.Change.OOMBaselines = v.OOMBaselines
				}
			}
		}
		err := c.record(ctx, o)
		if err != nil {
			return ctrl.Result{}, err
		}
	}
	next := recheckAfter(rand.Float64())
	if !v.NextCheck.IsZero() {
		next = min(max(v.NextCheck.Sub(c.now), 10*time.Millisecond), next)
	}
	return ctrl.Result{RequeueAfter: next}, nil
}

// sameNotEvaluated reports whether a Watching condition's message says the
// same is not evaluated yet as the verdict.
func sameNotEvaluated(msg string, v healthwatch.Verdict) bool {
	if v.NotEvaluated == "" {
		return !strings.Contains(msg, notEvaluatedYet)
	}
	return strings.Contains(msg, notEvaluatedYet+v.NotEvaluated+";")
}

// notEvaluatedYet introduces what a Watching verdict's message says is not
// evaluated yet.
const notEvaluatedYet = "; not evaluated yet: "

// healthy ends a watch without a breach.
func (c *reconcileContext) healthy(ctx context.Context, v healthwatch.Verdict) (ctrl.Result, error) {
	rsr, change := c.rsr, c.rsr.Status.Change
	good := &v1alpha1.HealthyValues{At: metav1.NewTime(c.now), ValueFingerprint: change.ValueFingerprint,
		Containers: resources.Applied(change)}
	evs, err := policy.MonitoringSucceeded(c.now, rsr.Status.Rollback, good)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("end watch of %s/%s: %w", rsr.Namespace, rsr.Name, err)
	}
	return ctrl.Result{}, c.record(ctx, outcome{
		doing:      "record healthy watch of",
		phase:      v1alpha1.PhaseHealthy,
		status:     func(st *v1alpha1.RightsizingRecommendationStatus) { st.LastHealthy = good },
		conditions: []metav1.Condition{newCondition(v1alpha1.ConditionHealthWatch, metav1.ConditionTrue, v1alpha1.HealthWatchHealthy, v.Message)},
		action: &v1alpha1.Action{Type: v1alpha1.ActionHealthy, Reason: v1alpha1.HealthWatchHealthy,
			Message: v.Message, Resources: change.Resources},
		rollbackChanged: true, backoff: evs,
	})
}
