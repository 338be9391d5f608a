package rightsizing_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster"
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/kubetest"
	"github.com/kerf-dev/kerf/test/leadertest"
)

// pendingPod creates a pod of the Deployment's current template that no
// scheduler placed: Pending with PodScheduled=False, reason Unschedulable,
// as kube-scheduler writes it (none runs in these tests).
func pendingPod(t *testing.T, c client.Client, dep *appsv1.Deployment, name string) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	pod := kubetest.AdoptedPod(t, c, dep, name)
	pod.Status = corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{
		Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
		Message: "0/1 nodes are available: 1 Insufficient memory.", LastTransitionTime: metav1.Now()}}}
	require.NoError(t, c.Status().Update(ctx, pod))
	return pod
}

// TestUnschedulablePodRollsBackAfterTheGrace: a Rollout whose new pod stays
// Pending Unschedulable is rolled back, every touched resource, once
// unschedulableGrace has passed, long before the watch's end. It failed
// before: the change stayed Watching (and then ended NotAdopted in Applied).
func TestUnschedulablePodRollsBackAfterTheGrace(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	p := kubetest.PolicyWith(ns, time.Hour, func(g *v1alpha1.RollbackGuardrails) {
		g.UnschedulableGrace = &metav1.Duration{Duration: 2 * time.Second}
	})
	dep, l := leadertest.WatchedWeb(t, c, ns, p, cluster.Config{}, "250m", "128Mi")
	pendingPod(t, c, dep, "web-new-1")

	time.Sleep(time.Second)
	assert.Equal(t, v1alpha1.PhaseWatching, kubetest.GetRSR(t, c, ns, "web").Status.Phase, "within the grace")
	kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseRolledBack, v1alpha1.HealthWatchUnschedulable)
	rsr := kubetest.WaitRestored(t, c, ns, "web")
	res := kubetest.TemplateResources(t, c, dep)
	assert.Equal(t, "500m", res.Requests.Cpu().String(), "every touched resource restored")
	assert.Equal(t, "256Mi", res.Requests.Memory().String())
	rb := kubetest.HistoryOf(rsr, v1alpha1.ActionRolledBack)
	require.Len(t, rb, 1)
	assert.Equal(t, v1alpha1.HealthWatchUnschedulable, rb[0].Reason)
	assert.Equal(t, []v1alpha1.ResourceName{"cpu", "memory"}, rb[0].Resources)
	require.Len(t, rb[0].Figures, 1)
	assert.Contains(t, rb[0].Figures[0], "unschedulable pods 1, for unschedulableGrace 2s or longer (pod web-new-1 Unschedulable for ")
	assert.Contains(t, rb[0].Figures[0], "Insufficient memory")
	assert.Equal(t, v1alpha1.BackoffBackingOff, rsr.Status.Rollback.State)
	kubetest.Counts(t, l.Metrics.Actions.WithLabelValues("rolled_back", "Unschedulable", "memory"), 1)
	kubetest.WaitEvents(t, c, ns, "web", corev1.EventTypeWarning, v1alpha1.EventRolledBack, 2)
}

// TestInfeasibleResizeRollsBack: an in-place resize the kubelet marks
// Infeasible ends the apply (Applied, not Failed) and is rolled back with
// reason Infeasible once it stays so for unschedulableGrace; the pod is
// resized back. It failed before: the apply was recorded Failed and the
// pod kept the values in its spec.
func TestInfeasibleResizeRollsBack(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	ctx := context.Background()
	p := kubetest.PolicyWith(ns, time.Hour, func(g *v1alpha1.RollbackGuardrails) { g.UnschedulableGrace = &metav1.Duration{Duration: time.Second} })
	_, pod, l := leadertest.InPlaceWeb(t, c, ns, p, "1", "256Mi")

	kubetest.KubeletReports(t, c, pod, corev1.PodReasonInfeasible)
	rsr := kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseRolledBack, v1alpha1.HealthWatchInfeasible)
	applied := kubetest.HistoryOf(rsr, v1alpha1.ActionApplied)
	require.Len(t, applied, 1, "the apply ended, not failed")
	assert.Contains(t, applied[0].Message, "resize Infeasible: Node didn't have enough capacity")
	assert.Empty(t, kubetest.HistoryOf(rsr, v1alpha1.ActionFailed))
	assert.Contains(t, rsr.Status.Breach.Figures[0], "infeasible pods 1, for unschedulableGrace 1s or longer (pod "+pod.Name+" Infeasible for ")
	require.Eventually(t, func() bool {
		require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(pod), pod))
		return pod.Spec.Containers[0].Resources.Requests.Cpu().String() == "500m"
	}, 20*time.Second, 50*time.Millisecond, "the pod was never resized back")

	// The kubelet runs the old values, as it always did.
	pod.Status.ObservedGeneration = pod.Generation
	require.NoError(t, c.Status().Update(ctx, pod))
	rsr = kubetest.WaitRestored(t, c, ns, "web")
	assert.Equal(t, []v1alpha1.ResourceName{"cpu"}, rsr.Status.Breach.Resources, "every touched resource (only cpu moved)")
	kubetest.Counts(t, l.Metrics.Actions.WithLabelValues("rolled_back", "Infeasible", "cpu"), 1)
	assert.Empty(t, kubetest.EventsFor(t, c, ns, "web", corev1.EventTypeWarning, v1alpha1.EventApplyFailed))
}

// TestNotAdoptedAtTheEndRollsBack: a Rollout none of whose pods runs the
// values by the watch's end is rolled back with reason NotAdopted, through
// the backoff (rollingBack, then backingOff), although
// adoptionThresholdPercent is 0. It failed before: the recommendation went
// back to Applied with HealthWatch NotAdopted and the backoff stayed
// monitoring.
func TestNotAdoptedAtTheEndRollsBack(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	ctx := context.Background()
	dep := kubetest.Web(t, c, ns, kubetest.PolicyWith(ns, 2*time.Second, nil))
	kubetest.RunningPod(t, c, dep) // of the old template; the rollout never replaces it
	l := leadertest.StartReplica(t, ns, "a", cluster.Config{})
	require.NoError(t, c.Create(ctx, kubetest.Recommendation(ns, "web", "web", v1alpha1.StrategyRollout, "250m", "128Mi")))
	kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseWatching, "")

	kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseRolledBack, v1alpha1.HealthWatchNotAdopted)
	rsr := kubetest.WaitRestored(t, c, ns, "web")
	assert.Equal(t, "500m", kubetest.TemplateResources(t, c, dep).Requests.Cpu().String())
	assert.Equal(t, "256Mi", kubetest.TemplateResources(t, c, dep).Requests.Memory().String())
	rb := kubetest.HistoryOf(rsr, v1alpha1.ActionRolledBack)
	require.Len(t, rb, 1)
	assert.Equal(t, v1alpha1.HealthWatchNotAdopted, rb[0].Reason)
	assert.Equal(t, []string{"adopted 0 of 1 pods (0%): none runs the applied values"}, rb[0].Figures)
	assert.Empty(t, kubetest.HistoryOf(rsr, v1alpha1.ActionHealthy))
	cond := kubetest.Condition(rsr, v1alpha1.ConditionHealthWatch)
	require.NotNil(t, cond)
	assert.Equal(t, v1alpha1.HealthWatchNotAdopted, cond.Reason)
	require.NotNil(t, rsr.Status.Rollback)
	assert.Equal(t, v1alpha1.BackoffBackingOff, rsr.Status.Rollback.State)
	assert.Contains(t, rsr.Status.RolledBackFingerprints, rsr.Status.Change.ValueFingerprint)
	kubetest.WaitEvents(t, c, ns, "web", corev1.EventTypeWarning, v1alpha1.EventRollingBackStarted, 1)
	kubetest.WaitEvents(t, c, ns, "web", corev1.EventTypeWarning, v1alpha1.EventRolledBack, 2)
	kubetest.Counts(t, l.Metrics.Actions.WithLabelValues("rolled_back", "NotAdopted", "cpu"), 1)
}
