package rightsizing_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster"
	"github.com/kerf-dev/kerf/cluster/healthwatch"
	"github.com/kerf-dev/kerf/cluster/signals"
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/kubetest"
	"github.com/kerf-dev/kerf/test/leadertest"
)

func TestOOMKillRollsBackMemoryOnly(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	ctx := context.Background()
	dep, l := leadertest.WatchedWeb(t, c, ns, kubetest.PolicyWith(ns, time.Hour, nil), cluster.Config{}, "250m", "128Mi")
	pod := kubetest.AdoptedPod(t, c, dep, "web-new-1")

	kubetest.OOMKilled(t, c, pod, "OOMKilled")
	kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseRolledBack, v1alpha1.HealthWatchOOMKills)
	rsr := kubetest.WaitRestored(t, c, ns, "web")

	res := kubetest.TemplateResources(t, c, dep)
	assert.Equal(t, "256Mi", res.Requests.Memory().String(), "memory restored")
	assert.Equal(t, "250m", res.Requests.Cpu().String(), "cpu, not breached, stays applied")
	rb := kubetest.HistoryOf(rsr, v1alpha1.ActionRolledBack)
	require.Len(t, rb, 1)
	assert.Equal(t, v1alpha1.HealthWatchOOMKills, rb[0].Reason)
	assert.Equal(t, []v1alpha1.ResourceName{"memory"}, rb[0].Resources)
	assert.Contains(t, rb[0].Figures, "oomKills 1 ≥ 1")
	require.Len(t, rb[0].Containers, 1)
	assert.Equal(t, "128Mi", rb[0].Containers[0].Old.Requests.Memory.String())
	assert.Equal(t, "256Mi", rb[0].Containers[0].New.Requests.Memory.String())

	c1 := kubetest.Condition(rsr, v1alpha1.ConditionHealthWatch)
	require.NotNil(t, c1)
	assert.Equal(t, v1alpha1.HealthWatchOOMKills, c1.Reason)
	require.Len(t, rsr.Status.Cooldowns, 1)
	assert.Equal(t, v1alpha1.ResourceName("memory"), rsr.Status.Cooldowns[0].Resource)
	assert.Contains(t, rsr.Status.RolledBackFingerprints, rsr.Status.Change.ValueFingerprint)
	require.NotNil(t, rsr.Status.Rollback)
	assert.Equal(t, v1alpha1.BackoffBackingOff, rsr.Status.Rollback.State)

	kubetest.Counts(t, l.Metrics.Actions.WithLabelValues("rolled_back", "OOMKills", "memory"), 1)
	assert.Equal(t, 0.0, testutil.ToFloat64(l.Metrics.Actions.WithLabelValues("rolled_back", "OOMKills", "cpu")))
	kubetest.WaitEvents(t, c, ns, "web", corev1.EventTypeWarning, "RolledBack", 2) // on the RSR and on the Deployment
	var got appsv1.Deployment
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(dep), &got))
	var mirrored v1alpha1.RollbackState
	require.NoError(t, json.Unmarshal([]byte(got.Annotations[v1alpha1.RollbackStateAnnotation]), &mirrored))
	assert.Equal(t, v1alpha1.BackoffBackingOff, mirrored.State)
}

func TestRestartsRollBackEveryTouchedResourceEvenWhenPaused(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	p := kubetest.PolicyWith(ns, time.Hour, func(g *v1alpha1.RollbackGuardrails) { g.Restarts = ptr.To[int32](2) })
	dep, l := leadertest.WatchedWeb(t, c, ns, p, cluster.Config{}, "250m", "128Mi")
	pod := kubetest.AdoptedPod(t, c, dep, "web-new-1")

	// A pause holds applies back, never a rollback.
	kubetest.Update(t, c, p, func() { p.Spec.Guardrails.Paused = true })

	kubetest.OOMKilled(t, c, pod, "Error")
	time.Sleep(300 * time.Millisecond)
	assert.Equal(t, v1alpha1.PhaseWatching, kubetest.GetRSR(t, c, ns, "web").Status.Phase, "one restart of two allowed")
	kubetest.OOMKilled(t, c, pod, "Error")
	kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseRolledBack, v1alpha1.HealthWatchRestarts)
	rsr := kubetest.WaitRestored(t, c, ns, "web")
	res := kubetest.TemplateResources(t, c, dep)
	assert.Equal(t, "256Mi", res.Requests.Memory().String())
	assert.Equal(t, "500m", res.Requests.Cpu().String())
	assert.Contains(t, kubetest.HistoryOf(rsr, v1alpha1.ActionRolledBack)[0].Figures, "restarts 2 ≥ 2")
	kubetest.Counts(t, l.Metrics.Actions.WithLabelValues("rolled_back", "Restarts", "cpu"), 1)
	kubetest.Counts(t, l.Metrics.Actions.WithLabelValues("rolled_back", "Restarts", "memory"), 1)
	assert.Len(t, rsr.Status.Cooldowns, 2, "both resources cool down after a restart rollback")
}

func TestWatchEndsHealthy(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	dep, _ := leadertest.WatchedWeb(t, c, ns, kubetest.PolicyWith(ns, 2*time.Second, nil), cluster.Config{}, "250m", "128Mi")
	kubetest.AdoptedPod(t, c, dep, "web-new-1")
	// The reconcile that sees the adopted pod writes the message; on a
	// loaded machine it may come after the pod is created.
	var watching *metav1.Condition
	require.Eventually(t, func() bool {
		watching = kubetest.Condition(kubetest.GetRSR(t, c, ns, "web"), v1alpha1.ConditionHealthWatch)
		return watching != nil && strings.Contains(watching.Message, "not evaluated yet")
	}, 30*time.Second, 20*time.Millisecond, "the HealthWatch condition says what is not evaluated yet")
	assert.Equal(t, v1alpha1.HealthWatchWatching, watching.Reason, "Watching while watching, whatever is not evaluated yet")
	assert.Contains(t, watching.Message, "not evaluated yet: throttling: no throttling source is configured")

	rsr := kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseHealthy, "")
	healthy := kubetest.Condition(rsr, v1alpha1.ConditionHealthWatch)
	require.NotNil(t, healthy)
	assert.Equal(t, v1alpha1.HealthWatchHealthy, healthy.Reason)
	assert.Equal(t, metav1.ConditionTrue, healthy.Status)
	assert.Contains(t, healthy.Message, "never evaluated: throttling: no throttling source is configured")
	require.NotNil(t, rsr.Status.LastHealthy)
	assert.Equal(t, rsr.Status.Change.ValueFingerprint, rsr.Status.LastHealthy.ValueFingerprint)
	assert.Len(t, kubetest.HistoryOf(rsr, v1alpha1.ActionHealthy), 1)
	assert.Equal(t, v1alpha1.BackoffMonitoringSucceeded, rsr.Status.Rollback.State)
	require.Eventually(t, func() bool {
		return len(kubetest.EventsFor(t, c, ns, "web", corev1.EventTypeNormal, v1alpha1.EventMonitoringSucceeded)) == 1
	}, 10*time.Second, 50*time.Millisecond)
	assert.Len(t, kubetest.EventsFor(t, c, ns, "web", corev1.EventTypeNormal, v1alpha1.EventMonitoringStarted), 1)
}

// TestFailoverMidRollbackRestoresOnce stops the leader right after it marked
// the recommendation RolledBack; the other replica finishes the restore and
// the rollback is recorded once.
func TestFailoverMidRollbackRestoresOnce(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	ctx := context.Background()
	dep := kubetest.Web(t, c, ns, kubetest.PolicyWith(ns, time.Hour, nil))
	// The leader dies between marking and restoring.
	a := leadertest.StartCrashing(t, ns, func(cfg *cluster.Config, crash func(context.Context, *v1alpha1.RightsizingRecommendation)) {
		cfg.AfterBreach = crash
	})
	require.NoError(t, c.Create(ctx, kubetest.Recommendation(ns, "web", "web", v1alpha1.StrategyRollout, "250m", "128Mi")))
	kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseWatching, "")
	pod := kubetest.AdoptedPod(t, c, dep, "web-new-1")
	kubetest.OOMKilled(t, c, pod, "OOMKilled")
	a.WaitCrashed(t, "marked the breach")
	assert.Equal(t, "128Mi", kubetest.TemplateResources(t, c, dep).Requests.Memory().String(), "a stopped before restoring")

	b := leadertest.StartReplica(t, ns, "b", cluster.Config{})
	rsr := kubetest.WaitRestored(t, c, ns, "web")
	assert.Equal(t, "256Mi", kubetest.TemplateResources(t, c, dep).Requests.Memory().String())
	assert.Len(t, kubetest.HistoryOf(rsr, v1alpha1.ActionRolledBack), 1)
	time.Sleep(500 * time.Millisecond)
	total := testutil.ToFloat64(a.Metrics.Actions.WithLabelValues("rolled_back", "OOMKills", "memory")) +
		testutil.ToFloat64(b.Metrics.Actions.WithLabelValues("rolled_back", "OOMKills", "memory"))
	assert.Equal(t, 1.0, total, "rolled back once")
}

// TestKernelOOMKillRollsBackBeforePodStatus feeds an OOM kill the way an
// agent's stream will (the kernel saw it; pod status shows nothing, as for
// a kill that did not restart the container): the leader acts on the
// signal alone.
func TestKernelOOMKillRollsBackBeforePodStatus(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	ctx := context.Background()
	kernel := signals.NewKernel()
	dep, _ := leadertest.WatchedWeb(t, c, ns, kubetest.PolicyWith(ns, time.Hour, nil), cluster.Config{Signals: kubetest.KernelOnly(kernel)}, "500m", "128Mi")
	pod := kubetest.AdoptedPod(t, c, dep, "web-new-1")
	time.Sleep(200 * time.Millisecond) // the pod reaches the leader's cache

	kernel.AddOOMKill(pod.UID, "app", time.Now())
	rsr := kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseRolledBack, v1alpha1.HealthWatchOOMKills)
	require.NotNil(t, rsr.Status.Breach)
	assert.Contains(t, rsr.Status.Breach.Figures, "oomKills 1 ≥ 1")
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(pod), pod))
	assert.Zero(t, pod.Status.ContainerStatuses[0].RestartCount, "pod status never showed the kill")
}

// TestThrottlingRollsBackCPU runs the throttling rule on counters fed as the
// agents' stream will: the leader's clock is moved three minutes on (past
// T0+2m), and 400 periods with 200 throttled make a ratio of 0.5.
func TestThrottlingRollsBackCPU(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	var offset atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	src := signals.NewKernel()
	dep, l := leadertest.WatchedWeb(t, c, ns, kubetest.PolicyWith(ns, time.Hour, nil), cluster.Config{Now: now, Signals: kubetest.KernelOnly(src), Throttling: src}, "250m", "256Mi")
	rsr := kubetest.GetRSR(t, c, ns, "web")
	t0 := rsr.Status.Change.AppliedAt.Time
	pod := kubetest.AdoptedPod(t, c, dep, "web-new-1")
	time.Sleep(200 * time.Millisecond)

	offset.Store(int64(3 * time.Minute))
	windowStart := t0.Add(healthwatch.ThrottlingDelay)
	src.AddSamples(
		healthwatch.CounterSample{PodUID: pod.UID, Container: "app", Started: t0, At: windowStart.Add(-time.Second), Periods: 100, Throttled: 10},
		healthwatch.CounterSample{PodUID: pod.UID, Container: "app", Started: t0, At: now(), Periods: 500, Throttled: 210},
	)
	kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseRolledBack, v1alpha1.HealthWatchThrottling)
	rsr = kubetest.WaitRestored(t, c, ns, "web")
	assert.Equal(t, []v1alpha1.ResourceName{"cpu"}, rsr.Status.Breach.Resources)
	assert.Contains(t, rsr.Status.Breach.Figures[0], "throttlingRatio 0.5")
	assert.Equal(t, "500m", kubetest.TemplateResources(t, c, dep).Requests.Cpu().String(), "cpu restored")
	kubetest.Counts(t, l.Metrics.Actions.WithLabelValues("rolled_back", "Throttling", "cpu"), 1)

	// CPU decreases are now in cooldown.
	kubetest.Update(t, c, rsr, func() {
		rsr.Spec.Containers[0].Requests.CPU = kubetest.Q("200m")
		rsr.Spec.Containers[0].Limits.CPU = kubetest.Q("200m")
	})
	rsr = kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseBlocked, v1alpha1.ReasonCooldown)
	assert.Equal(t, "500m", kubetest.TemplateResources(t, c, dep).Requests.Cpu().String(), "the decrease was not applied")
}

// TestResizeRestartsAreNotCounted: three replicas resized in place with
// resizePolicy RestartContainer restart once each because of the resize,
// which is not harm (before, the three restarts tripped the default
// restarts: 3); one more restart each is.
func TestResizeRestartsAreNotCounted(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	ctx := context.Background()
	dep := kubetest.Deployment(ns, "web", "500m", "256Mi")
	dep.Spec.Replicas = ptr.To[int32](3)
	dep.Spec.Template.Spec.Containers[0].ResizePolicy = []corev1.ContainerResizePolicy{
		{ResourceName: corev1.ResourceMemory, RestartPolicy: corev1.RestartContainer}}
	require.NoError(t, c.Create(ctx, dep))
	require.NoError(t, c.Create(ctx, kubetest.PolicyWith(ns, time.Hour, nil)))
	first := kubetest.RunningPod(t, c, dep)
	pods := []*corev1.Pod{first}
	for i := 2; i <= 3; i++ {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("web-h1-%d", i), Labels: first.Labels,
			OwnerReferences: first.OwnerReferences}, Spec: *first.Spec.DeepCopy()}
		require.NoError(t, c.Create(ctx, p))
		kubetest.MarkRunning(t, c, p)
		pods = append(pods, p)
	}
	leadertest.StartReplica(t, ns, "a", cluster.Config{})
	require.NoError(t, c.Create(ctx, kubetest.Recommendation(ns, "web", "web", v1alpha1.StrategyInPlace, "500m", "128Mi")))

	restart := func(p *corev1.Pod) {
		require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
			require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(p), p))
			p.Status.ContainerStatuses[0].RestartCount++
			return c.Status().Update(ctx, p)
		}))
	}
	for _, p := range pods {
		kubetest.KubeletReports(t, c, p, "")
		restart(p) // the kubelet restarted app to resize its memory
	}
	kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseWatching, "")
	time.Sleep(500 * time.Millisecond)
	rsr := kubetest.GetRSR(t, c, ns, "web")
	assert.Equal(t, v1alpha1.PhaseWatching, rsr.Status.Phase, "the resize's own restarts are no harm")

	for _, p := range pods {
		restart(p)
	}
	rsr = kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseRolledBack, v1alpha1.HealthWatchRestarts)
	require.NotNil(t, rsr.Status.Breach)
	assert.Equal(t, []string{"restarts 3 ≥ 3"}, rsr.Status.Breach.Figures)
	assert.Contains(t, rsr.Status.Message, "1 more caused by the resize (resizePolicy RestartContainer) not counted")
}
