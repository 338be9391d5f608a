package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/apply"
	"github.com/kerf-dev/kerf/cluster/healthwatch"
	"github.com/kerf-dev/kerf/cluster/policy"
	"github.com/kerf-dev/kerf/cluster/resources"
	"github.com/kerf-dev/kerf/cluster/workload"
)

// watchRecheck bounds how long a running watch goes without a look, for
// signals that arrive without an event (none should).
const watchRecheck = 30 * time.Second

// ReasonRollbackError is the reason of a failed action recorded when a
// restore fails; the restore is retried with exponential backoff.
const ReasonRollbackError = "RollbackError"

// health runs the part of a recommendation's life after its change was
// applied: the watch, the rollback and the backoff (design sections 3 and
// 4). It returns handled=false when there is nothing for it to do.
func (r *RecommendationReconciler) health(ctx context.Context, rsr *v1alpha1.RightsizingRecommendation, resolved *policy.Resolved) (ctrl.Result, bool, error) {
	st := &rsr.Status
	current := st.ObservedGeneration == rsr.Generation
	switch {
	case st.Breach != nil && !st.Breach.Restored:
		// Marked RolledBack but not restored yet (or a leader stopped
		// half-way): finish the restore. Pause and freeze windows never
		// hold a rollback back.
		res, err := r.restore(ctx, rsr, resolved)
		return res, true, err
	case !current:
		return ctrl.Result{}, false, nil // a new generation: plan it
	case st.Phase == v1alpha1.PhaseApplied && st.Change != nil && !hasWatchEnded(rsr):
		res, err := r.startWatch(ctx, rsr)
		return res, true, err
	case st.Phase == v1alpha1.PhaseWatching && st.Change != nil:
		res, err := r.watch(ctx, rsr, resolved)
		return res, true, err
	case st.Rollback != nil && st.Rollback.State == v1alpha1.BackoffBackingOff:
		res, err := r.advanceBackoff(ctx, rsr, resolved)
		return res, true, err
	}
	return ctrl.Result{}, false, nil
}

func hasWatchEnded(rsr *v1alpha1.RightsizingRecommendation) bool {
	c := meta.FindStatusCondition(rsr.Status.Conditions, v1alpha1.ConditionHealthWatch)
	return c != nil && c.Reason == v1alpha1.HealthWatchNotAdopted
}

// startWatch moves an applied change into the watch.
func (r *RecommendationReconciler) startWatch(ctx context.Context, rsr *v1alpha1.RightsizingRecommendation) (ctrl.Result, error) {
	now := r.Now()
	if rsr.Status.Rollback == nil {
		rsr.Status.Rollback = &v1alpha1.RollbackState{}
	}
	evs, err := policy.StartMonitoring(now, rsr.Status.Rollback, rsr.Status.Change.ValueFingerprint)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("start monitoring %s/%s: %w", rsr.Namespace, rsr.Name, err)
	}
	rsr.Status.Phase = v1alpha1.PhaseWatching
	rsr.Status.Breach = nil
	setCondition(rsr, v1alpha1.ConditionHealthWatch, metav1.ConditionTrue, v1alpha1.HealthWatchWatching,
		fmt.Sprintf("watching since %s", rsr.Status.Change.AppliedAt.UTC().Format(time.RFC3339)), now)
	if err := r.Client.Status().Update(ctx, rsr); err != nil {
		return ctrl.Result{}, fmt.Errorf("start watch of %s/%s: %w", rsr.Namespace, rsr.Name, err)
	}
	r.stateEvents(ctx, rsr, evs)
	return ctrl.Result{RequeueAfter: time.Millisecond}, nil
}

// watch evaluates the rules once and acts on the verdict.
func (r *RecommendationReconciler) watch(ctx context.Context, rsr *v1alpha1.RightsizingRecommendation, resolved *policy.Resolved) (ctrl.Result, error) {
	workload, err := r.Applier.Target(ctx, rsr)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("read workload of %s/%s: %w", rsr.Namespace, rsr.Name, err)
	}
	pods, err := r.workloadPods(ctx, workload)
	if err != nil {
		return ctrl.Result{}, err
	}
	now := r.Now()
	baselines := map[healthwatch.ContainerKey]int32{}
	for _, b := range rsr.Status.Change.RestartBaselines {
		baselines[healthwatch.ContainerKey{PodUID: types.UID(b.PodUID), Container: b.Container}] = b.RestartCount
	}
	in := healthwatch.Input{
		Change:           rsr.Status.Change,
		Guardrails:       resolved.Spec.Guardrails.Rollback,
		Pods:             pods,
		RestartBaselines: baselines,
		Kernel:           r.Kernel,
		Statuses:         r.Statuses,
		Throttling:       r.Throttling,
	}
	v := healthwatch.Evaluate(now, in)
	switch v.State {
	case healthwatch.StateBreached:
		return r.breach(ctx, rsr, resolved, v, now)
	case healthwatch.StateHealthy:
		return r.healthy(ctx, rsr, v, now)
	case healthwatch.StateNotAdopted:
		setCondition(rsr, v1alpha1.ConditionHealthWatch, metav1.ConditionFalse, v1alpha1.HealthWatchNotAdopted, v.Message, now)
		rsr.Status.Phase = v1alpha1.PhaseApplied
		if err := r.Client.Status().Update(ctx, rsr); err != nil {
			return ctrl.Result{}, fmt.Errorf("record adoption of %s/%s: %w", rsr.Namespace, rsr.Name, err)
		}
		r.Recorder.Eventf(rsr, nil, corev1.EventTypeWarning, v1alpha1.HealthWatchNotAdopted, "Watch", "%s", v.Message)
		return ctrl.Result{}, nil
	}
	reason := v1alpha1.HealthWatchWatching
	if v.ThrottlingApplies && !v.ThrottlingEvaluated {
		reason = v1alpha1.HealthWatchThrottlingNotEvaluated
	}
	// The message carries live figures; rewriting status for each would
	// cost a write per signal, so the condition follows the reason.
	c := meta.FindStatusCondition(rsr.Status.Conditions, v1alpha1.ConditionHealthWatch)
	if c == nil || c.Reason != reason {
		setCondition(rsr, v1alpha1.ConditionHealthWatch, metav1.ConditionTrue, reason, v.Message, now)
		if err := r.Client.Status().Update(ctx, rsr); err != nil {
			return ctrl.Result{}, fmt.Errorf("record watch of %s/%s: %w", rsr.Namespace, rsr.Name, err)
		}
	}
	next := watchRecheck
	if !v.NextCheck.IsZero() {
		next = min(max(v.NextCheck.Sub(now), 10*time.Millisecond), watchRecheck)
	}
	return ctrl.Result{RequeueAfter: next}, nil
}

// healthy ends a watch without a breach.
func (r *RecommendationReconciler) healthy(ctx context.Context, rsr *v1alpha1.RightsizingRecommendation, v healthwatch.Verdict, now time.Time) (ctrl.Result, error) {
	change := rsr.Status.Change
	evs, err := policy.MonitoringSucceeded(now, rsr.Status.Rollback)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("end watch of %s/%s: %w", rsr.Namespace, rsr.Name, err)
	}
	rsr.Status.Phase = v1alpha1.PhaseHealthy
	rsr.Status.LastHealthy = &v1alpha1.HealthyValues{At: metav1.NewTime(now), ValueFingerprint: change.ValueFingerprint,
		Containers: resources.Applied(change)}
	setCondition(rsr, v1alpha1.ConditionHealthWatch, metav1.ConditionTrue, v1alpha1.HealthWatchHealthy, v.Message, now)
	addHistory(rsr, v1alpha1.Action{Time: metav1.NewTime(now), Type: v1alpha1.ActionHealthy, Reason: v1alpha1.HealthWatchHealthy,
		Message: v.Message, Resources: change.Resources})
	if err := r.Client.Status().Update(ctx, rsr); err != nil {
		return ctrl.Result{}, fmt.Errorf("record healthy watch of %s/%s: %w", rsr.Namespace, rsr.Name, err)
	}
	r.stateEvents(ctx, rsr, evs)
	r.Metrics.count(v1alpha1.ActionHealthy, v1alpha1.HealthWatchHealthy, change.Resources)
	return ctrl.Result{}, nil
}

// breach marks the recommendation RolledBack, conditional on its
// resourceVersion, before anything is restored: from then on the webhook
// gives the values to no new pod, and of two leaders only one decides.
func (r *RecommendationReconciler) breach(ctx context.Context, rsr *v1alpha1.RightsizingRecommendation, resolved *policy.Resolved, v healthwatch.Verdict, now time.Time) (ctrl.Result, error) {
	evs, err := policy.RollingBack(now, rsr.Status.Rollback, v.Reason)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("roll back %s/%s: %w", rsr.Namespace, rsr.Name, err)
	}
	rsr.Status.Phase = v1alpha1.PhaseRolledBack
	rsr.Status.Reason, rsr.Status.Message = v.Reason, v.Message
	rsr.Status.Breach = &v1alpha1.Breach{Reason: v.Reason, At: metav1.NewTime(now), Resources: v.Restore, Figures: v.Figures}
	setCondition(rsr, v1alpha1.ConditionHealthWatch, metav1.ConditionFalse, v.Reason, v.Message, now)
	if err := r.Client.Status().Update(ctx, rsr); err != nil {
		return ctrl.Result{}, fmt.Errorf("mark %s/%s rolled back: %w", rsr.Namespace, rsr.Name, err)
	}
	r.stateEvents(ctx, rsr, evs)
	if r.AfterBreach != nil {
		r.AfterBreach(ctx, rsr)
		if ctx.Err() != nil {
			return ctrl.Result{}, ctx.Err()
		}
	}
	return r.restore(ctx, rsr, resolved)
}

// restore puts the breached resources back and records the rollback once,
// in the status update that marks the breach restored.
func (r *RecommendationReconciler) restore(ctx context.Context, rsr *v1alpha1.RightsizingRecommendation, resolved *policy.Resolved) (ctrl.Result, error) {
	b, change := rsr.Status.Breach, rsr.Status.Change
	values, err := r.restoreValues(ctx, rsr, resolved)
	if err != nil {
		return r.restoreFailed(ctx, rsr, err)
	}
	res, err := r.Applier.Restore(ctx, rsr, change, values, b.Resources)
	gone := ""
	if err != nil {
		if _, terr := r.Applier.Target(ctx, rsr); !apierrors.IsNotFound(terr) {
			return r.restoreFailed(ctx, rsr, err)
		}
		// The workload was deleted: its changed values run nowhere any
		// more, so the rollback is over. Cooldowns and fingerprints are
		// still recorded, for a workload created again with that name.
		gone = fmt.Sprintf("; %s %s/%s is gone, nothing left to restore", rsr.Spec.TargetRef.Kind, rsr.Namespace, rsr.Spec.TargetRef.Name)
		res = &apply.Result{}
	}
	if len(res.Failed) > 0 {
		f := res.Failed[0]
		return r.restoreFailed(ctx, rsr, fmt.Errorf("pod %s: %s: %s", f.Pod, f.Reason, f.Message))
	}
	if len(res.Pending) > 0 {
		return ctrl.Result{RequeueAfter: pendingRequeue}, nil
	}

	now := r.Now()
	g := resolved.Spec.Guardrails.Rollback
	b.Restored = true
	if g.Cooldown != nil && g.Cooldown.Duration > 0 {
		for _, res := range b.Resources {
			policy.AddCooldown(&rsr.Status, res, now.Add(g.Cooldown.Duration))
		}
	}
	policy.AddRolledBackFingerprint(&rsr.Status, change.ValueFingerprint)
	evs, err := policy.BackingOff(now, rsr.Status.Rollback, g.Backoff)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("back off %s/%s: %w", rsr.Namespace, rsr.Name, err)
	}
	msg := fmt.Sprintf("%s rolled back to %s values after %s%s%s", joinResources(b.Resources), g.RestoreTo, b.Reason, gone, leftPods(res.Left))
	rsr.Status.Message = msg
	addHistory(rsr, v1alpha1.Action{Time: metav1.NewTime(now), Type: v1alpha1.ActionRolledBack, Reason: b.Reason,
		Message: msg, Resources: b.Resources, Containers: restoredChanges(change, values, b.Resources), Figures: b.Figures})
	if err := r.Client.Status().Update(ctx, rsr); err != nil {
		return ctrl.Result{}, fmt.Errorf("record rollback of %s/%s: %w", rsr.Namespace, rsr.Name, err)
	}
	figures := joinFigures(b.Figures)
	r.Recorder.Eventf(rsr, nil, corev1.EventTypeWarning, "RolledBack", "Rollback", "%s: %s", msg, figures)
	if w, err := r.Applier.Target(ctx, rsr); err == nil {
		r.Recorder.Eventf(w, rsr, corev1.EventTypeWarning, "RolledBack", "Rollback", "kerf: %s: %s", msg, figures)
	}
	r.Metrics.count(v1alpha1.ActionRolledBack, b.Reason, b.Resources)
	r.stateEvents(ctx, rsr, evs)
	return ctrl.Result{RequeueAfter: backoffRequeue(rsr, now)}, nil
}

// leftPods says which pods keep the changed values after a restore could
// not resize them back (apply.Result.Left) and why, or nothing when none
// do.
func leftPods(left []apply.Failure) string {
	if len(left) == 0 {
		return ""
	}
	msgs := make([]string, 0, len(left))
	for _, f := range left {
		msgs = append(msgs, fmt.Sprintf("pod %s: %s: %s", f.Pod, f.Reason, f.Message))
	}
	return "; not resized back, these keep the changed values until they are recreated: " + strings.Join(msgs, "; ")
}

// restoreFailed records a failed restore (once per distinct error) and
// returns the error, so the restore is retried with exponential backoff.
func (r *RecommendationReconciler) restoreFailed(ctx context.Context, rsr *v1alpha1.RightsizingRecommendation, cause error) (ctrl.Result, error) {
	if apierrors.IsConflict(cause) {
		// Optimistic concurrency (e.g. the workload's annotation was just
		// written): read again and retry; not a failure.
		return ctrl.Result{}, fmt.Errorf("restore %s/%s: %w", rsr.Namespace, rsr.Name, cause)
	}
	msg := cause.Error()
	h := rsr.Status.History
	if len(h) == 0 || h[len(h)-1].Type != v1alpha1.ActionFailed || h[len(h)-1].Message != msg {
		now := r.Now()
		addHistory(rsr, v1alpha1.Action{Time: metav1.NewTime(now), Type: v1alpha1.ActionFailed, Reason: ReasonRollbackError,
			Message: msg, Resources: rsr.Status.Breach.Resources})
		if err := r.Client.Status().Update(ctx, rsr); err == nil {
			r.Recorder.Eventf(rsr, nil, corev1.EventTypeWarning, ReasonRollbackError, "Rollback", "restore failed, retrying: %s", msg)
			r.Metrics.count(v1alpha1.ActionFailed, ReasonRollbackError, rsr.Status.Breach.Resources)
		}
	}
	return ctrl.Result{}, fmt.Errorf("restore %s/%s: %w", rsr.Namespace, rsr.Name, cause)
}

// restoreValues are the values restoreTo names (design section 2):
// Previous, the values before the change; LastHealthy, the values of the
// last change that ended healthy (Previous when none did); Manifest, the
// workload's pod template as its owner last applied it
// (kubectl.kubernetes.io/last-applied-configuration), Previous without it.
func (r *RecommendationReconciler) restoreValues(ctx context.Context, rsr *v1alpha1.RightsizingRecommendation, resolved *policy.Resolved) ([]v1alpha1.ContainerResources, error) {
	switch resolved.Spec.Guardrails.Rollback.RestoreTo {
	case v1alpha1.RestoreLastHealthy:
		if lh := rsr.Status.LastHealthy; lh != nil && len(lh.Containers) > 0 {
			return lh.Containers, nil
		}
	case v1alpha1.RestoreManifest:
		w, err := r.Applier.Target(ctx, rsr)
		if err != nil {
			return nil, err
		}
		if v, ok := manifestValues(w); ok {
			return v, nil
		}
	}
	return resources.Previous(rsr.Status.Change), nil
}

// advanceBackoff moves backingOff on when its expiry passes.
func (r *RecommendationReconciler) advanceBackoff(ctx context.Context, rsr *v1alpha1.RightsizingRecommendation, resolved *policy.Resolved) (ctrl.Result, error) {
	now := r.Now()
	changed, evs := policy.Advance(now, rsr.Status.Rollback, resolved.Spec.Guardrails.Rollback.Backoff)
	if !changed {
		return ctrl.Result{RequeueAfter: backoffRequeue(rsr, now)}, nil
	}
	if err := r.Client.Status().Update(ctx, rsr); err != nil {
		return ctrl.Result{}, fmt.Errorf("advance backoff of %s/%s: %w", rsr.Namespace, rsr.Name, err)
	}
	r.stateEvents(ctx, rsr, evs)
	return ctrl.Result{}, nil
}

func backoffRequeue(rsr *v1alpha1.RightsizingRecommendation, now time.Time) time.Duration {
	if st := rsr.Status.Rollback; st != nil && st.Expiry != nil {
		return max(st.Expiry.Sub(now), 10*time.Millisecond)
	}
	return 0
}

// stateEvents emits the backoff state machine's events and mirrors its
// state, which every caller has just changed, in the workload's
// kerf.dev/rollback-state annotation.
func (r *RecommendationReconciler) stateEvents(ctx context.Context, rsr *v1alpha1.RightsizingRecommendation, reasons []string) {
	for _, reason := range reasons {
		typ, msg := policy.Describe(reason, rsr.Status.Rollback)
		r.Recorder.Eventf(rsr, nil, typ, reason, "Backoff", "%s", msg)
	}
	if err := r.annotate(ctx, rsr); err != nil {
		r.Log.Error("mirror rollback state on the workload", "recommendation", rsr.Namespace+"/"+rsr.Name, "err", err)
	}
}

// annotate writes status.rollback to the workload's annotation.
func (r *RecommendationReconciler) annotate(ctx context.Context, rsr *v1alpha1.RightsizingRecommendation) error {
	w, err := r.Applier.Target(ctx, rsr)
	if err != nil {
		return err
	}
	val, err := policy.AnnotationValue(rsr.Status.Rollback)
	if err != nil {
		return err
	}
	var v any = val
	if val == "" {
		v = nil // removes it
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{v1alpha1.RollbackStateAnnotation: v}}})
	if err != nil {
		return err
	}
	return r.Client.Patch(ctx, w, client.RawPatch(types.MergePatchType, patch))
}

// workloadPods lists the workload's pods (workload.Pods).
func (r *RecommendationReconciler) workloadPods(ctx context.Context, w client.Object) ([]corev1.Pod, error) {
	wl, err := workload.From(w)
	if err != nil {
		return nil, err
	}
	return workload.Pods(ctx, r.Client, wl)
}

// restartBaselines are the pods' restart counts now, per container.
func restartBaselines(pods []corev1.Pod) []v1alpha1.RestartBaseline {
	var out []v1alpha1.RestartBaseline
	for _, p := range pods {
		for _, cs := range p.Status.ContainerStatuses {
			out = append(out, v1alpha1.RestartBaseline{Pod: p.Name, PodUID: string(p.UID), Container: cs.Name, RestartCount: cs.RestartCount})
		}
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
	var out []v1alpha1.ContainerResources
	for i := range m.Spec.Template.Spec.Containers {
		out = append(out, resources.ContainerValues(&m.Spec.Template.Spec.Containers[i]))
	}
	return out, len(out) > 0
}
