package rightsizing_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster"
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/kubetest"
	"github.com/kerf-dev/kerf/test/leadertest"
)

// pastChanges is a history of four changes an hour ago, the first
// rolledBack of them rolled back and the others healthy.
func pastChanges(rolledBack int) []v1alpha1.Action {
	at := time.Now().Add(-time.Hour).Truncate(time.Second)
	var h []v1alpha1.Action
	for i := range 4 {
		t0 := metav1.NewTime(at.Add(time.Duration(i) * time.Minute))
		t1 := metav1.NewTime(t0.Add(30 * time.Second))
		h = append(h, v1alpha1.Action{Time: t0, Type: v1alpha1.ActionApplied, Reason: string(v1alpha1.StrategyRollout)})
		if i < rolledBack {
			h = append(h, v1alpha1.Action{Time: t1, Type: v1alpha1.ActionRolledBack, Reason: v1alpha1.HealthWatchOOMKills})
		} else {
			h = append(h, v1alpha1.Action{Time: t1, Type: v1alpha1.ActionHealthy, Reason: v1alpha1.HealthWatchHealthy})
		}
	}
	return h
}

// degradedWeb creates web and its recommendation (cpu 500m, memory
// 128Mi by Rollout) with pastChanges(rolledBack) in its history, starts
// a leader, and rolls the change it applies back on an OOM kill: the
// fifth change.
func degradedWeb(t *testing.T, rolledBack int) (*leadertest.Replica, string) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	ctx := context.Background()
	dep := kubetest.Web(t, c, ns, kubetest.PolicyWith(ns, time.Hour, func(g *v1alpha1.RollbackGuardrails) { g.Cooldown = &metav1.Duration{} }))
	rsr := kubetest.Recommendation(ns, "web", "web", v1alpha1.StrategyRollout, "500m", "128Mi")
	require.NoError(t, c.Create(ctx, rsr))
	rsr.Status.History = pastChanges(rolledBack)
	require.NoError(t, c.Status().Update(ctx, rsr))
	l := leadertest.StartReplica(t, ns, "a", cluster.Config{})
	kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseWatching, "")
	kubetest.OOMKilled(t, c, kubetest.AdoptedPod(t, c, dep, "web-new-1"), "OOMKilled")
	kubetest.WaitRestored(t, c, ns, "web")
	return l, ns
}

// TestTwoRollbacksOfFiveChangesLeaveTheWorkloadAlone: a rollback that
// makes 2 of the last 5 changes rolled back is a rollback like any other.
func TestTwoRollbacksOfFiveChangesLeaveTheWorkloadAlone(t *testing.T) {
	c := controlplane.Get(t).Client
	l, ns := degradedWeb(t, 1)
	rsr := kubetest.GetRSR(t, c, ns, "web")
	assert.Equal(t, v1alpha1.PhaseRolledBack, rsr.Status.Phase)
	assert.Nil(t, rsr.Status.Degraded)
	assert.Empty(t, kubetest.EventsFor(t, c, ns, "web", corev1.EventTypeWarning, v1alpha1.EventDegraded))
	assert.Equal(t, -1.0, leadertest.MetricValue(t, l, "kerf_degraded_recommendations", "namespace", ns))
}

// TestThreeRollbacksOfFiveChangesMarkTheWorkloadDegraded runs the
// Degraded mark's life on the real control plane: the rollback that makes
// 3 of the last 5 changes rolled back marks it Degraded (status, history,
// Event, gauge); new values wait, unapplied; a resume applies them, and
// the changes before the resume no longer count.
func TestThreeRollbacksOfFiveChangesMarkTheWorkloadDegraded(t *testing.T) {
	c := controlplane.Get(t).Client
	l, ns := degradedWeb(t, 2)
	rsr := kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseDegraded, v1alpha1.ReasonDegraded)
	d := rsr.Status.Degraded
	require.NotNil(t, d)
	require.NotNil(t, d.Since)
	assert.Equal(t, int32(3), d.RolledBack)
	assert.Equal(t, int32(5), d.Of)
	assert.Equal(t, rsr.Status.Policy.Fingerprint, d.PolicyFingerprint)
	assert.Contains(t, rsr.Status.Message, "3 of the last 5 changes of Deployment web were rolled back")
	assert.Contains(t, rsr.Status.Message, "kubectl kerf resume --workload web -n "+ns)
	h := rsr.Status.History
	require.GreaterOrEqual(t, len(h), 2)
	assert.Equal(t, v1alpha1.ActionRolledBack, h[len(h)-2].Type, "the rollback, then the verdict")
	assert.Equal(t, v1alpha1.ActionBlocked, h[len(h)-1].Type)
	assert.Equal(t, v1alpha1.ReasonDegraded, h[len(h)-1].Reason)
	// One about the recommendation, one about the workload.
	kubetest.WaitEvents(t, c, ns, "web", corev1.EventTypeWarning, v1alpha1.EventDegraded, 2)
	assert.Equal(t, 1.0, leadertest.MetricValue(t, l, "kerf_degraded_recommendations", "namespace", ns))
	assert.Equal(t, 1.0, leadertest.MetricValue(t, l, "kerf_actions_total", "type", "blocked", "reason", v1alpha1.ReasonDegraded))

	// New values are read and wait: nothing is applied. A resume older
	// than the verdict, written with them, is not this verdict's.
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"}}
	kubetest.Update(t, c, rsr, func() {
		// Requests and limits together: the pods stay Guaranteed (the QoSClass gate).
		rsr.Spec.Containers[0].Requests.CPU, rsr.Spec.Containers[0].Limits.CPU = kubetest.Q("400m"), kubetest.Q("400m")
		rsr.Annotations = map[string]string{v1alpha1.ResumeAnnotation: d.Since.Add(-time.Minute).UTC().Format(time.RFC3339)}
	})
	rsr = kubetest.WaitRSR(t, c, ns, "web", func(r *v1alpha1.RightsizingRecommendation) bool {
		return strings.HasSuffix(r.Status.Message, fmt.Sprintf("the values of generation %d wait", r.Generation))
	}, "the new generation was never read")
	assert.Equal(t, v1alpha1.PhaseDegraded, rsr.Status.Phase)
	assert.Equal(t, "500m", kubetest.TemplateResources(t, c, dep).Requests.Cpu().String(), "nothing applied while Degraded")
	assert.Len(t, kubetest.HistoryOf(rsr, v1alpha1.ActionApplied), 5)

	kubetest.Update(t, c, rsr, func() { rsr.Annotations[v1alpha1.ResumeAnnotation] = time.Now().UTC().Format(time.RFC3339) })
	kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseWatching, "")
	kubetest.WaitEvents(t, c, ns, "web", corev1.EventTypeNormal, v1alpha1.ReasonResumed, 1)
	assert.Equal(t, "400m", kubetest.TemplateResources(t, c, dep).Requests.Cpu().String(), "the values that waited are applied")
	rsr = kubetest.GetRSR(t, c, ns, "web")
	require.NotNil(t, rsr.Status.Degraded)
	assert.Nil(t, rsr.Status.Degraded.Since)
	assert.NotNil(t, rsr.Status.Degraded.ResumedAt)
	resumed := kubetest.HistoryOf(rsr, v1alpha1.ActionResumed)
	require.Len(t, resumed, 1, "the resume is in the audit trail")
	assert.Equal(t, v1alpha1.ReasonResumed, resumed[0].Reason)
	assert.Contains(t, resumed[0].Message, "resum")
	kubetest.WaitFor(t, 10*time.Second, func() bool {
		return leadertest.MetricValue(t, l, "kerf_degraded_recommendations", "namespace", ns) == -1
	}, "the gauge still counts the resumed recommendation")

	// 4 of the last 5 changes are rolled back now, but only the one
	// after the resume counts.
	kubetest.OOMKilled(t, c, kubetest.AdoptedPod(t, c, dep, "web-new-2"), "OOMKilled")
	rsr = kubetest.WaitRestored(t, c, ns, "web")
	assert.Equal(t, v1alpha1.PhaseRolledBack, rsr.Status.Phase, "1 of 1 change since the resume")
	assert.Len(t, kubetest.HistoryOf(rsr, v1alpha1.ActionRolledBack), 4)
}

// TestChangedPolicyResumesADegradedWorkload: a policy whose fingerprint
// differs from the verdict's lifts the mark.
func TestChangedPolicyResumesADegradedWorkload(t *testing.T) {
	c := controlplane.Get(t).Client
	_, ns := degradedWeb(t, 2)
	kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseDegraded, v1alpha1.ReasonDegraded)
	p := kubetest.NamespacedPolicy(ns, false)
	kubetest.Update(t, c, p, func() { p.Spec.Guardrails.Degraded = &v1alpha1.DegradedGuardrails{RolledBack: ptr.To[int32](4)} })
	kubetest.WaitEvents(t, c, ns, "web", corev1.EventTypeNormal, v1alpha1.ReasonPolicyChanged, 1)
	rsr := kubetest.GetRSR(t, c, ns, "web")
	assert.NotEqual(t, v1alpha1.PhaseDegraded, rsr.Status.Phase)
	require.NotNil(t, rsr.Status.Degraded)
	assert.Nil(t, rsr.Status.Degraded.Since)
	resumed := kubetest.HistoryOf(rsr, v1alpha1.ActionResumed)
	require.Len(t, resumed, 1, "the resume is in the audit trail")
	assert.Equal(t, v1alpha1.ReasonPolicyChanged, resumed[0].Reason)
}
