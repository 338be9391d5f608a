package rightsizing

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/apply"
	"github.com/kerf-dev/kerf/cluster/healthwatch"
	"github.com/kerf-dev/kerf/cluster/policy"
	"github.com/kerf-dev/kerf/cluster/resources"
)

// breach marks the recommendation RolledBack, conditional on its
// resourceVersion, before anything is restored. From then on the webhook
// gives the values to no new pod, and of two leaders only one decides.
//
// The restore is the next write. The workload's mirror of the backoff
// state comes after it: the restore's record writes it, or breach does
// when the restore did not finish. Every write of the rollback goes
// through the rollbacks' client (rollingBack).
func (c *reconcileContext) breach(ctx context.Context, v healthwatch.Verdict) (ctrl.Result, error) {
	rsr := c.rsr
	c.beginRollback()
	// The values to put back are decided now and recorded with the
	// breach, so the workload's annotation shows them while the rollback
	// runs and backs off, and a leader that takes over restores the same.
	var restoring []v1alpha1.ContainerResources
	if values, err := c.restoreValues(ctx); err != nil {
		c.r.Log.Warn("decide the values to restore; the restore decides them again", "recommendation", rsr.Namespace+"/"+rsr.Name, "err", err)
	} else {
		restoring = onlyValues(values, v.Restore)
	}
	evs, err := policy.RollingBack(c.now, rsr.Status.Rollback, v.Reason, v.Message, restoring)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("roll back %s/%s: %w", rsr.Namespace, rsr.Name, err)
	}
	c.breachAsked = time.Now()
	err = c.record(ctx, outcome{
		doing: "record breach of",
		phase: v1alpha1.PhaseRolledBack, setReason: true, reason: v.Reason, message: v.Message,
		status: func(st *v1alpha1.RightsizingRecommendationStatus) {
			st.Breach = &v1alpha1.Breach{Reason: v.Reason, At: metav1.NewTime(c.now), Resources: v.Restore, Figures: v.Figures}
		},
		conditions:      []metav1.Condition{newCondition(v1alpha1.ConditionHealthWatch, metav1.ConditionFalse, v.Reason, v.Message)},
		rollbackChanged: true, backoff: evs, mirrorLater: true,
		hook: c.r.AfterBreach,
	})
	c.breachRecorded = time.Since(c.breachAsked)
	if err != nil {
		return ctrl.Result{}, err
	}
	res, err := c.restore(ctx)
	if c.mirrorPending {
		c.mirror(ctx)
	}
	return res, err
}

// restore puts the breached resources back and records the rollback once,
// in the status update that marks the breach restored. The values are
// those the breach recorded (status.rollback.restoring), else those
// restoreTo names now. It runs without a policy too: a rollback already
// decided is finished when its policy disappears (design section 4), with
// the default guardrails for the cooldown and the backoff.
func (c *reconcileContext) restore(ctx context.Context) (ctrl.Result, error) {
	rsr := c.rsr
	c.beginRollback()
	b, change := rsr.Status.Breach, rsr.Status.Change
	if change == nil {
		// A breach without its change (left by an older leader): nothing
		// says what to restore, so the breach is dropped, not retried.
		return ctrl.Result{}, c.record(ctx, outcome{
			doing:  "drop the breach without a change of",
			status: func(st *v1alpha1.RightsizingRecommendationStatus) { st.Breach = nil },
		})
	}
	values, err := c.recordedRestoreValues(ctx)
	if err != nil {
		return c.restoreFailed(ctx, err)
	}
	// The backoff state the rollback ends in is decided now. A restore
	// that patches the template then carries its mirror on the workload:
	// one write fewer in the rollback's pass. Otherwise the state is
	// mirrored after the record, as every other change of it.
	g := c.rollbackGuardrails()
	var next *v1alpha1.RollbackState
	var evs []string
	var backoffErr error
	var mirror map[string]*string
	if rsr.Status.Rollback != nil {
		next = rsr.Status.Rollback.DeepCopy()
		evs, backoffErr = policy.BackingOff(c.now, next, g.Backoff)
		if backoffErr == nil {
			mirror, backoffErr = mirrorAnnotation(next)
		}
	}
	restoreFrom := time.Now()
	res, err := c.applier().Restore(ctx, rsr, change, values, b.Resources, mirror)
	restoreTook := time.Since(restoreFrom)
	gone := ""
	if err != nil {
		if !c.workloadGone(ctx, err) {
			return c.restoreFailed(ctx, err)
		}
		// The workload was deleted: its changed values run nowhere any
		// more, so the rollback is over. Cooldowns and fingerprints are
		// still recorded, for a workload created again with that name.
		gone = fmt.Sprintf("; %s %s/%s is gone, nothing left to restore", rsr.Spec.TargetRef.Kind, rsr.Namespace, rsr.Spec.TargetRef.Name)
		res = &apply.Result{}
	}
	if len(res.Failed) > 0 {
		f := res.Failed[0]
		return c.restoreFailed(ctx, fmt.Errorf("pod %s: %s: %s", f.Pod, f.Reason, f.Message))
	}
	if len(res.Pending) > 0 {
		return ctrl.Result{RequeueAfter: pendingRequeue}, nil
	}

	if backoffErr != nil {
		return ctrl.Result{}, fmt.Errorf("back off %s/%s: %w", rsr.Namespace, rsr.Name, backoffErr)
	}
	if next != nil {
		rsr.Status.Rollback = next
	}
	msg := fmt.Sprintf("%s rolled back to %s values after %s%s%s", joinResources(b.Resources), g.RestoreTo, b.Reason, restoredCanary(change), gone)
	msg += leftPods(res.Left, statusLimits.actionMessage-len(msg))
	figures := joinFigures(b.Figures)
	rolledBack := outcome{
		doing: "record rollback of",
		// The phase and reason stay those the breach recorded.
		setReason: true, reason: rsr.Status.Reason, message: msg,
		status: func(st *v1alpha1.RightsizingRecommendationStatus) {
			b.Restored = true
			if g.Cooldown != nil && g.Cooldown.Duration > 0 {
				for _, res := range b.Resources {
					policy.AddCooldown(st, res, c.now.Add(g.Cooldown.Duration))
				}
			}
			policy.AddRolledBackFingerprint(st, change.ValueFingerprint)
		},
		action: &v1alpha1.Action{Type: v1alpha1.ActionRolledBack, Reason: b.Reason, Message: msg, Resources: b.Resources,
			Containers: restoredChanges(change, values, b.Resources), Figures: b.Figures},
		events: []kubeEvent{
			{typ: corev1.EventTypeWarning, reason: v1alpha1.EventRolledBack, action: v1alpha1.EventActionRollback, note: msg + ": " + figures},
			{typ: corev1.EventTypeWarning, reason: v1alpha1.EventRolledBack, action: v1alpha1.EventActionRollback, note: "kerf: " + msg + ": " + figures,
				onWorkload: true},
		},
		rollbackChanged: true, backoff: evs, mirrored: res.Annotated,
	}
	// The rollback that makes rolledBack of the last `of` changes marks
	// the workload Degraded, in the same write (degraded.go).
	if d := c.degradedVerdict(*rolledBack.action); d != nil {
		rolledBack = c.degradedOutcome(rolledBack, d)
	}
	if err := c.record(ctx, rolledBack); err != nil {
		return ctrl.Result{}, err
	}
	// Where a rollback's time went (docs/leader.md, "Metrics"):
	//   - the pass until its restore was written, and in it the breach's
	//     status write and the restore's own writes. A restore finished
	//     by a later pass has no breach write of its own.
	//   - by the wall clock, the instants the pass began, asked for the
	//     breach's write (the rollback's first request) and asked for the
	//     restore. A harness on the same machine compares them with when
	//     it caused the harm.
	attrs := []any{"recommendation", rsr.Namespace + "/" + rsr.Name, "reason", b.Reason,
		"untilRestoredMs", millis(restoreFrom.Add(restoreTook).Sub(c.began)),
		"breachWriteMs", millis(c.breachRecorded), "restoreWriteMs", millis(restoreTook), "passMs", millis(time.Since(c.began)),
		"passBegan", c.began, "restoreAsked", restoreFrom}
	if !c.breachAsked.IsZero() {
		attrs = append(attrs, "breachAsked", c.breachAsked)
	}
	c.r.Log.Info("rolled back", attrs...)
	return ctrl.Result{RequeueAfter: backoffRequeue(rsr, c.now)}, nil
}

// leftPods says which pods keep the changed values, and why, after a
// restore could not resize them back (apply.Result.Left). It takes at
// most n bytes: as many pods as fit, then how many more. It says nothing
// when no pod is left.
func leftPods(left []apply.Failure, n int) string {
	if len(left) == 0 {
		return ""
	}
	const intro = "; not resized back, these keep the changed values until they are recreated: "
	return intro + podFailures(left, n-len(intro))
}

// podFailures joins the pods' failures into at most n bytes: as many
// whole ones as fit, then how many pods were left out.
func podFailures(failures []apply.Failure, n int) string {
	msgs := make([]string, 0, len(failures))
	for _, f := range failures {
		msgs = append(msgs, fmt.Sprintf("pod %s: %s: %s", f.Pod, f.Reason, f.Message))
	}
	return joinFit(msgs, "; ", n, "pods")
}

// restoreFailed records a failed restore, once per distinct error of the
// rollback, and returns the error, so the restore is retried with
// exponential backoff. Every failure since the breach is compared, not
// only the last one. So errors that alternate neither push real history
// out of its bound nor inflate kerf_actions_total.
func (c *reconcileContext) restoreFailed(ctx context.Context, cause error) (ctrl.Result, error) {
	rsr := c.rsr
	if apierrors.IsConflict(cause) {
		// Optimistic concurrency (e.g. the workload's annotation was just
		// written): read again and retry; not a failure.
		return ctrl.Result{}, fmt.Errorf("restore %s/%s: %w", rsr.Namespace, rsr.Name, cause)
	}
	// Cut as the status write would, so that the same error is found
	// recorded on the next retry.
	msg := fit(cause.Error(), v1alpha1.MaxActionMessageLength)
	if !failureRecorded(rsr.Status.History, rsr.Status.Breach.At.Time, msg) {
		err := c.record(ctx, outcome{
			doing: "record failed restore of",
			action: &v1alpha1.Action{Type: v1alpha1.ActionFailed, Reason: v1alpha1.ReasonRollbackError,
				Message: msg, Resources: rsr.Status.Breach.Resources},
			events: []kubeEvent{{typ: corev1.EventTypeWarning, reason: v1alpha1.ReasonRollbackError, action: v1alpha1.EventActionRollback,
				note: "restore failed, retrying: " + msg}},
		})
		if err != nil {
			// The restore's error is returned all the same: the retry
			// records the failure again.
			c.r.Log.Debug("record failed restore", "recommendation", rsr.Namespace+"/"+rsr.Name, "err", err)
		}
	}
	return ctrl.Result{}, fmt.Errorf("restore %s/%s: %w", rsr.Namespace, rsr.Name, cause)
}

// failureRecorded reports whether history holds a failed restore with
// message msg at or after since, the breach: the rollback already
// recorded that error.
func failureRecorded(history []v1alpha1.Action, since time.Time, msg string) bool {
	for i := len(history) - 1; i >= 0; i-- {
		a := history[i]
		if a.Time.Time.Before(since.Truncate(time.Second)) {
			return false
		}
		if a.Type == v1alpha1.ActionFailed && a.Reason == v1alpha1.ReasonRollbackError && a.Message == msg {
			return true
		}
	}
	return false
}

// rollbackGuardrails are the governing policy's rollback guardrails, or
// the defaults when no policy resolves (a rollback finished without one).
func (c *reconcileContext) rollbackGuardrails() v1alpha1.RollbackGuardrails {
	if c.resolved != nil {
		return c.resolved.Spec.Guardrails.Rollback
	}
	var spec v1alpha1.PolicySpec
	spec.SetDefaults()
	return spec.Guardrails.Rollback
}

// recordedRestoreValues are the values the breach recorded
// (status.rollback.restoring), else restoreValues.
func (c *reconcileContext) recordedRestoreValues(ctx context.Context) ([]v1alpha1.ContainerResources, error) {
	if st := c.rsr.Status.Rollback; st != nil && len(st.Restoring) > 0 {
		return st.Restoring, nil
	}
	return c.restoreValues(ctx)
}

// restoreValues are the values restoreTo names (design section 2).
//   - Previous: the values before the change.
//   - LastHealthy: the values of the last change that ended healthy.
//     What they lack, a field or a whole container that change did not
//     touch, is taken from Previous. With no change ended healthy, it is
//     Previous itself.
//   - Manifest: the workload's pod template as its owner last applied it
//     (kubectl.kubernetes.io/last-applied-configuration); Previous
//     without it.
func (c *reconcileContext) restoreValues(ctx context.Context) ([]v1alpha1.ContainerResources, error) {
	rsr := c.rsr
	switch c.rollbackGuardrails().RestoreTo {
	case v1alpha1.RestoreLastHealthy:
		if lh := rsr.Status.LastHealthy; lh != nil && len(lh.Containers) > 0 {
			return fillFrom(lh.Containers, resources.Previous(rsr.Status.Change)), nil
		}
	case v1alpha1.RestoreManifest:
		w, err := c.workload(ctx)
		if err != nil {
			return nil, err
		}
		if v, ok := manifestValues(w); ok {
			return v, nil
		}
	}
	return resources.Previous(rsr.Status.Change), nil
}

// fillFrom gives each container of prev the values of values, and prev's
// where values lack a field or the whole container. A field absent from
// the last healthy values was not touched by that change. So it does not
// mean "had no value": removing it could delete a memory limit.
func fillFrom(values, prev []v1alpha1.ContainerResources) []v1alpha1.ContainerResources {
	out := make([]v1alpha1.ContainerResources, 0, len(prev))
	for _, p := range prev {
		c := *p.DeepCopy()
		for _, v := range values {
			if v.Name != p.Name {
				continue
			}
			for _, f := range resources.Fields {
				if q := f.Get(v.Requests, v.Limits); q != nil {
					f.Set(&c.Requests, &c.Limits, q)
				}
			}
		}
		out = append(out, c)
	}
	return out
}

// onlyValues keeps the given resources of each container's values; a
// container keeps its entry with no values when it has none of them.
func onlyValues(values []v1alpha1.ContainerResources, res []v1alpha1.ResourceName) []v1alpha1.ContainerResources {
	out := make([]v1alpha1.ContainerResources, 0, len(values))
	for _, v := range values {
		r := only(v1alpha1.Resources{Requests: v.Requests, Limits: v.Limits}, res)
		out = append(out, v1alpha1.ContainerResources{Name: v.Name, Requests: r.Requests.DeepCopy(), Limits: r.Limits.DeepCopy()})
	}
	return out
}

func restoredChanges(c *v1alpha1.Change, values []v1alpha1.ContainerResources, resources []v1alpha1.ResourceName) []v1alpha1.ContainerValueChange {
	byName := map[string]v1alpha1.ContainerResources{}
	for _, v := range values {
		byName[v.Name] = v
	}
	var out []v1alpha1.ContainerValueChange
	for _, cc := range c.Containers {
		v := byName[cc.Name]
		out = append(out, v1alpha1.ContainerValueChange{Name: cc.Name,
			Old: only(cc.Applied, resources), New: only(v1alpha1.Resources{Requests: v.Requests, Limits: v.Limits}, resources)})
	}
	return out
}

// only keeps the given resources of r.
func only(r v1alpha1.Resources, resources []v1alpha1.ResourceName) v1alpha1.Resources {
	keep := func(v *v1alpha1.ResourceValues) *v1alpha1.ResourceValues {
		if v == nil {
			return nil
		}
		var out v1alpha1.ResourceValues
		for _, res := range resources {
			switch res {
			case "cpu":
				out.CPU = v.CPU
			case "memory":
				out.Memory = v.Memory
			}
		}
		if out.CPU == nil && out.Memory == nil {
			return nil
		}
		return &out
	}
	return v1alpha1.Resources{Requests: keep(r.Requests), Limits: keep(r.Limits)}
}

func joinFigures(f []string) string {
	if len(f) == 0 {
		return "no figures"
	}
	out := f[0]
	for _, s := range f[1:] {
		out += "; " + s
	}
	return out
}

// manifestValues reads the container resources of the workload's pod
// template from its last-applied-configuration annotation.
func manifestValues(w client.Object) ([]v1alpha1.ContainerResources, bool) {
	raw := w.GetAnnotations()[corev1.LastAppliedConfigAnnotation]
	if raw == "" {
		return nil, false
	}
	var m struct {
		Spec struct {
			Template corev1.PodTemplateSpec `json:"template"`
		} `json:"spec"`
	}
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		return nil, false
	}
	out := resources.Values(&m.Spec.Template.Spec)
	return out, len(out) > 0
}

// infeasiblePods joins the pods whose resize the kubelet marks infeasible
// into at most n bytes, as podFailures does.
func infeasiblePods(failures []apply.Failure, n int) string {
	msgs := make([]string, 0, len(failures))
	for _, f := range failures {
		msgs = append(msgs, fmt.Sprintf("pod %s: resize %s: %s", f.Pod, f.Reason, f.Message))
	}
	return joinFit(msgs, "; ", n, "pods")
}

// millis is d in milliseconds, to a tenth, for a log.
func millis(d time.Duration) float64 { return float64(d.Microseconds()/100) / 10 }
