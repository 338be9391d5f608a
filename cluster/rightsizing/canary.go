package rightsizing

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/healthwatch"
)

// chooseCanary picks the canary pods of an InPlace change among the
// running pods of the workload's current revision (docs/health.md,
// "Canary"). The choice is deterministic:
//   - ready pods first, then by name;
//   - pods, or percent of the running pods rounded up, at least one and
//     at most v1alpha1.MaxCanaryPods.
//
// It returns nil and a note for the applied message when there is no
// canary: the strategy is not InPlace, no pod runs, or the canary would
// be every running pod.
func chooseCanary(g *v1alpha1.CanaryGuardrails, change *v1alpha1.Change, running []corev1.Pod) (*v1alpha1.CanaryState, string) {
	if g == nil {
		return nil, ""
	}
	if change.Strategy != v1alpha1.StrategyInPlace {
		return nil, fmt.Sprintf("no canary with strategy %s: the change applies whole (spec.guardrails.canary is for InPlace, docs/health.md)", change.Strategy)
	}
	total := len(running)
	if total == 0 {
		return nil, "no canary: no pod runs"
	}
	n := 0
	switch {
	case g.Pods != nil:
		n = int(*g.Pods)
	case g.Percent != nil:
		n = (int(*g.Percent)*total + 99) / 100
	}
	n = max(n, 1)
	if n >= total {
		return nil, fmt.Sprintf("no canary: its %d pods would be all %d running pods", n, total)
	}
	n = min(n, v1alpha1.MaxCanaryPods)
	pods := slices.Clone(running)
	slices.SortStableFunc(pods, func(a, b corev1.Pod) int {
		if ra, rb := podReady(&a), podReady(&b); ra != rb {
			if ra {
				return -1
			}
			return 1
		}
		return cmp.Compare(a.Name, b.Name)
	})
	names := make([]string, 0, n)
	for _, p := range pods[:n] {
		names = append(names, p.Name)
	}
	duration := v1alpha1.DefaultCanaryDuration
	if g.Duration != nil {
		duration = g.Duration.Duration
	}
	t0 := change.AppliedAt
	return &v1alpha1.CanaryState{Pods: names, Of: int32(total), StartedAt: t0, Until: metav1.NewTime(t0.Add(duration))}, ""
}

// podReady reports whether the pod is Ready: its Ready condition, else
// every container status ready.
func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	if len(p.Status.ContainerStatuses) == 0 {
		return false
	}
	for _, cs := range p.Status.ContainerStatuses {
		if !cs.Ready {
			return false
		}
	}
	return true
}

// canaryWatch narrows a health watch's input to the canary of an
// unpromoted change: its pods only, watched from change.appliedAt until
// canary.until. Every rule is the same (design section 3).
func canaryWatch(in healthwatch.Input) healthwatch.Input {
	ch := in.Change
	if ch.Promoted() {
		return in
	}
	canary := make(map[string]bool, len(ch.Canary.Pods))
	for _, name := range ch.Canary.Pods {
		canary[name] = true
	}
	in.Pods = slices.DeleteFunc(slices.Clone(in.Pods), func(p corev1.Pod) bool { return !canary[p.Name] })
	in.Guardrails = *in.Guardrails.DeepCopy()
	in.Guardrails.WatchDuration = &metav1.Duration{Duration: max(ch.Canary.Until.Sub(ch.AppliedAt.Time), time.Second)}
	return in
}

// canaryPods names a canary's pods for a message, at most n bytes, with
// their share: "pods web-a, web-b (2 of 5)".
func canaryPods(c *v1alpha1.CanaryState, n int) string {
	share := fmt.Sprintf(" (%d of %d)", len(c.Pods), c.Of)
	return "pods " + joinFit(c.Pods, ", ", max(n-len("pods ")-len(share), 0), "pods") + share
}

// canaryMessage prefixes a watch verdict's message with the canary it is
// about, for an unpromoted change.
func canaryMessage(ch *v1alpha1.Change, msg string) string {
	if ch.Promoted() {
		return msg
	}
	return "canary " + canaryPods(ch.Canary, 256) + ": " + msg
}

// promote ends a canary watch without a breach: the canary is promoted and
// the change goes to every pod (docs/health.md, "Canary").
//
// The promotion is recorded before the rest are resized, with the Applied
// condition Applying: a leader that takes over finishes exactly that
// apply. The full watch starts at the promotion. change.appliedAt becomes
// it, and the restart, OOM and throttling baselines are taken anew, so the
// full watch counts as a fresh change's.
func (c *reconcileContext) promote(ctx context.Context, v healthwatch.Verdict) (ctrl.Result, error) {
	rsr := c.rsr
	pods, err := c.pods(ctx)
	if err != nil {
		return ctrl.Result{}, err
	}
	ch := rsr.Status.Change
	msg := fmt.Sprintf("canary %s passed: %s; applying %s to every pod", canaryPods(ch.Canary, 256), v.Message, joinResources(ch.Resources))
	err = c.record(ctx, outcome{
		doing: "record canary promotion of",
		status: func(st *v1alpha1.RightsizingRecommendationStatus) {
			now := metav1.NewTime(c.now)
			st.Change.Canary.PromotedAt = &now
			st.Change.AppliedAt = now
			st.Change.RestartBaselines = healthwatch.RestartBaselines(pods)
			st.Change.OOMBaselines, st.Change.ThrottlingBaselines = nil, nil
		},
		conditions: []metav1.Condition{newCondition(v1alpha1.ConditionApplied, metav1.ConditionFalse, v1alpha1.AppliedReasonApplying, msg)},
	})
	if err != nil {
		return ctrl.Result{}, err
	}
	return c.finish(ctx)
}

// canaryApplied says, for the applied message, what a canary did: the
// canary pods resized and when the rest follow, or that the canary
// passed. note says why a policy's canary did not run.
func canaryApplied(ch *v1alpha1.Change, note string) string {
	switch {
	case ch.Canary == nil && note != "":
		return "; " + note
	case ch.Canary == nil:
		return ""
	case ch.Canary.PromotedAt == nil:
		return fmt.Sprintf(" to canary %s; the other pods follow after a canary watch without breach until %s",
			canaryPods(ch.Canary, 256), ch.Canary.Until.UTC().Format(time.RFC3339))
	}
	return fmt.Sprintf(" to every pod after canary %s passed its watch from %s", canaryPods(ch.Canary, 256),
		ch.Canary.StartedAt.UTC().Format(time.RFC3339))
}

// canaryNote says why a policy's canary does not apply to a change that
// has none. The strategy is not InPlace, or the canary was every pod.
func canaryNote(g *v1alpha1.CanaryGuardrails, ch *v1alpha1.Change) string {
	if g == nil || ch.Canary != nil {
		return ""
	}
	if ch.Strategy != v1alpha1.StrategyInPlace {
		_, note := chooseCanary(g, ch, nil)
		return note
	}
	return "no canary: it would be every running pod, or none ran"
}

// restoredCanary says, in a rollback's message, that only the canary pods
// were resized and are restored.
func restoredCanary(ch *v1alpha1.Change) string {
	if ch.Promoted() {
		return ""
	}
	return "; only the canary " + canaryPods(ch.Canary, 256) + " had the values, the other pods were never resized"
}
