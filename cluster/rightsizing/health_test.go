package rightsizing_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kerf-dev/kerf/cluster"
	"github.com/kerf-dev/kerf/test/leadertest"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/healthwatch"
	"github.com/kerf-dev/kerf/cluster/signals"
	"github.com/kerf-dev/kerf/test/controlplane"
)

func TestOOMKillRollsBackMemoryOnly(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := leadertest.Namespace(t, c)
	ctx := context.Background()
	dep, l := leadertest.WatchedWeb(t, c, ns, leadertest.PolicyWith(ns, time.Hour, nil), cluster.Config{}, "250m", "128Mi")
	pod := leadertest.AdoptedPod(t, c, dep, "web-new-1")

	leadertest.OOMKilled(t, c, pod, "OOMKilled")
	leadertest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseRolledBack, v1alpha1.HealthWatchOOMKills)
	rsr := leadertest.WaitRestored(t, c, ns, "web")

	res := leadertest.TemplateResources(t, c, dep)
	assert.Equal(t, "256Mi", res.Requests.Memory().String(), "memory restored")
	assert.Equal(t, "250m", res.Requests.Cpu().String(), "cpu, not breached, stays applied")
	rb := leadertest.HistoryOf(rsr, v1alpha1.ActionRolledBack)
	require.Len(t, rb, 1)
	assert.Equal(t, v1alpha1.HealthWatchOOMKills, rb[0].Reason)
	assert.Equal(t, []v1alpha1.ResourceName{"memory"}, rb[0].Resources)
	assert.Contains(t, rb[0].Figures, "oomKills 1 ≥ 1")
	require.Len(t, rb[0].Containers, 1)
	assert.Equal(t, "128Mi", rb[0].Containers[0].Old.Requests.Memory.String())
	assert.Equal(t, "256Mi", rb[0].Containers[0].New.Requests.Memory.String())

	c1 := leadertest.Condition(rsr, v1alpha1.ConditionHealthWatch)
	require.NotNil(t, c1)
	assert.Equal(t, v1alpha1.HealthWatchOOMKills, c1.Reason)
	require.Len(t, rsr.Status.Cooldowns, 1)
	assert.Equal(t, v1alpha1.ResourceName("memory"), rsr.Status.Cooldowns[0].Resource)
	assert.Contains(t, rsr.Status.RolledBackFingerprints, rsr.Status.Change.ValueFingerprint)
	require.NotNil(t, rsr.Status.Rollback)
	assert.Equal(t, v1alpha1.BackoffBackingOff, rsr.Status.Rollback.State)

	leadertest.Counts(t, l.Metrics.Actions.WithLabelValues("rolled_back", "OOMKills", "memory"), 1)
	assert.Equal(t, 0.0, testutil.ToFloat64(l.Metrics.Actions.WithLabelValues("rolled_back", "OOMKills", "cpu")))
	leadertest.WaitEvents(t, c, ns, "web", corev1.EventTypeWarning, "RolledBack", 2) // on the RSR and on the Deployment
	var got appsv1.Deployment
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(dep), &got))
	var mirrored v1alpha1.RollbackState
	require.NoError(t, json.Unmarshal([]byte(got.Annotations[v1alpha1.RollbackStateAnnotation]), &mirrored))
	assert.Equal(t, v1alpha1.BackoffBackingOff, mirrored.State)
}

func TestRestartsRollBackEveryTouchedResourceEvenWhenPaused(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := leadertest.Namespace(t, c)
	p := leadertest.PolicyWith(ns, time.Hour, func(g *v1alpha1.RollbackGuardrails) { g.Restarts = ptr.To[int32](2) })
	dep, l := leadertest.WatchedWeb(t, c, ns, p, cluster.Config{}, "250m", "128Mi")
	pod := leadertest.AdoptedPod(t, c, dep, "web-new-1")

	// A pause holds applies back, never a rollback.
	leadertest.Update(t, c, p, func() { p.Spec.Guardrails.Paused = true })

	leadertest.OOMKilled(t, c, pod, "Error")
	time.Sleep(300 * time.Millisecond)
	assert.Equal(t, v1alpha1.PhaseWatching, leadertest.GetRSR(t, c, ns, "web").Status.Phase, "one restart of two allowed")
	leadertest.OOMKilled(t, c, pod, "Error")
	leadertest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseRolledBack, v1alpha1.HealthWatchRestarts)
	rsr := leadertest.WaitRestored(t, c, ns, "web")
	res := leadertest.TemplateResources(t, c, dep)
	assert.Equal(t, "256Mi", res.Requests.Memory().String())
	assert.Equal(t, "500m", res.Requests.Cpu().String())
	assert.Contains(t, leadertest.HistoryOf(rsr, v1alpha1.ActionRolledBack)[0].Figures, "restarts 2 ≥ 2")
	leadertest.Counts(t, l.Metrics.Actions.WithLabelValues("rolled_back", "Restarts", "cpu"), 1)
	leadertest.Counts(t, l.Metrics.Actions.WithLabelValues("rolled_back", "Restarts", "memory"), 1)
	assert.Len(t, rsr.Status.Cooldowns, 2, "both resources cool down after a restart rollback")
}

func TestWatchEndsHealthy(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := leadertest.Namespace(t, c)
	dep, _ := leadertest.WatchedWeb(t, c, ns, leadertest.PolicyWith(ns, 2*time.Second, nil), cluster.Config{}, "250m", "128Mi")
	leadertest.AdoptedPod(t, c, dep, "web-new-1")
	// The reconcile that sees the adopted pod writes the message; on a
	// loaded machine it may come after the pod is created.
	var watching *metav1.Condition
	require.Eventually(t, func() bool {
		watching = leadertest.Condition(leadertest.GetRSR(t, c, ns, "web"), v1alpha1.ConditionHealthWatch)
		return watching != nil && strings.Contains(watching.Message, "not evaluated yet")
	}, 30*time.Second, 20*time.Millisecond, "the HealthWatch condition says what is not evaluated yet")
	assert.Equal(t, v1alpha1.HealthWatchWatching, watching.Reason, "Watching while watching, whatever is not evaluated yet")
	assert.Contains(t, watching.Message, "not evaluated yet: throttling: no throttling source is configured")

	rsr := leadertest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseHealthy, "")
	healthy := leadertest.Condition(rsr, v1alpha1.ConditionHealthWatch)
	require.NotNil(t, healthy)
	assert.Equal(t, v1alpha1.HealthWatchHealthy, healthy.Reason)
	assert.Equal(t, metav1.ConditionTrue, healthy.Status)
	assert.Contains(t, healthy.Message, "never evaluated: throttling: no throttling source is configured")
	require.NotNil(t, rsr.Status.LastHealthy)
	assert.Equal(t, rsr.Status.Change.ValueFingerprint, rsr.Status.LastHealthy.ValueFingerprint)
	assert.Len(t, leadertest.HistoryOf(rsr, v1alpha1.ActionHealthy), 1)
	assert.Equal(t, v1alpha1.BackoffMonitoringSucceeded, rsr.Status.Rollback.State)
	require.Eventually(t, func() bool {
		return len(leadertest.EventsFor(t, c, ns, "web", corev1.EventTypeNormal, v1alpha1.EventMonitoringSucceeded)) == 1
	}, 10*time.Second, 50*time.Millisecond)
	assert.Len(t, leadertest.EventsFor(t, c, ns, "web", corev1.EventTypeNormal, v1alpha1.EventMonitoringStarted), 1)
}

// TestFailoverMidRollbackRestoresOnce stops the leader right after it marked
// the recommendation RolledBack; the other replica finishes the restore and
// the rollback is recorded once.
func TestFailoverMidRollbackRestoresOnce(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := leadertest.Namespace(t, c)
	ctx := context.Background()
	dep := leadertest.Web(t, c, ns, leadertest.PolicyWith(ns, time.Hour, nil))
	// The leader dies between marking and restoring.
	a := leadertest.StartCrashing(t, ns, func(cfg *cluster.Config, crash func(context.Context, *v1alpha1.RightsizingRecommendation)) {
		cfg.AfterBreach = crash
	})
	require.NoError(t, c.Create(ctx, leadertest.Recommendation(ns, "web", "web", v1alpha1.StrategyRollout, "250m", "128Mi")))
	leadertest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseWatching, "")
	pod := leadertest.AdoptedPod(t, c, dep, "web-new-1")
	leadertest.OOMKilled(t, c, pod, "OOMKilled")
	a.WaitCrashed(t, "marked the breach")
	assert.Equal(t, "128Mi", leadertest.TemplateResources(t, c, dep).Requests.Memory().String(), "a stopped before restoring")

	b := leadertest.StartReplica(t, ns, "b", cluster.Config{})
	rsr := leadertest.WaitRestored(t, c, ns, "web")
	assert.Equal(t, "256Mi", leadertest.TemplateResources(t, c, dep).Requests.Memory().String())
	assert.Len(t, leadertest.HistoryOf(rsr, v1alpha1.ActionRolledBack), 1)
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
	ns := leadertest.Namespace(t, c)
	ctx := context.Background()
	kernel := signals.NewKernel()
	dep, _ := leadertest.WatchedWeb(t, c, ns, leadertest.PolicyWith(ns, time.Hour, nil), cluster.Config{Signals: kernelOnly(kernel)}, "500m", "128Mi")
	pod := leadertest.AdoptedPod(t, c, dep, "web-new-1")
	time.Sleep(200 * time.Millisecond) // the pod reaches the leader's cache

	kernel.AddOOMKill(pod.UID, "app", time.Now())
	rsr := leadertest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseRolledBack, v1alpha1.HealthWatchOOMKills)
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
	ns := leadertest.Namespace(t, c)
	var offset atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	src := signals.NewKernel()
	dep, l := leadertest.WatchedWeb(t, c, ns, leadertest.PolicyWith(ns, time.Hour, nil), cluster.Config{Now: now, Signals: kernelOnly(src), Throttling: src}, "250m", "256Mi")
	rsr := leadertest.GetRSR(t, c, ns, "web")
	t0 := rsr.Status.Change.AppliedAt.Time
	pod := leadertest.AdoptedPod(t, c, dep, "web-new-1")
	time.Sleep(200 * time.Millisecond)

	offset.Store(int64(3 * time.Minute))
	windowStart := t0.Add(healthwatch.ThrottlingDelay)
	src.AddSamples(
		healthwatch.CounterSample{PodUID: pod.UID, Container: "app", Started: t0, At: windowStart.Add(-time.Second), Periods: 100, Throttled: 10},
		healthwatch.CounterSample{PodUID: pod.UID, Container: "app", Started: t0, At: now(), Periods: 500, Throttled: 210},
	)
	leadertest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseRolledBack, v1alpha1.HealthWatchThrottling)
	rsr = leadertest.WaitRestored(t, c, ns, "web")
	assert.Equal(t, []v1alpha1.ResourceName{"cpu"}, rsr.Status.Breach.Resources)
	assert.Contains(t, rsr.Status.Breach.Figures[0], "throttlingRatio 0.5")
	assert.Equal(t, "500m", leadertest.TemplateResources(t, c, dep).Requests.Cpu().String(), "cpu restored")
	leadertest.Counts(t, l.Metrics.Actions.WithLabelValues("rolled_back", "Throttling", "cpu"), 1)

	// CPU decreases are now in cooldown.
	leadertest.Update(t, c, rsr, func() {
		rsr.Spec.Containers[0].Requests.CPU = leadertest.Q("200m")
		rsr.Spec.Containers[0].Limits.CPU = leadertest.Q("200m")
	})
	rsr = leadertest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseBlocked, v1alpha1.ReasonCooldown)
	assert.Equal(t, "500m", leadertest.TemplateResources(t, c, dep).Requests.Cpu().String(), "the decrease was not applied")
}

// TestFailedRestoreIsRetriedUntilItSucceeds makes the apiserver itself
// refuse the restore (a ValidatingAdmissionPolicy denies putting the
// memory back) until the test lifts it: the failure is recorded as a
// failed action with reason RollbackError, the restore is retried, and
// once allowed the rollback completes and is recorded once.
func TestFailedRestoreIsRetriedUntilItSucceeds(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := leadertest.Namespace(t, c)
	ctx := context.Background()
	dep, l := leadertest.WatchedWeb(t, c, ns, leadertest.PolicyWith(ns, time.Hour, nil), cluster.Config{}, "500m", "128Mi")
	pod := leadertest.AdoptedPod(t, c, dep, "web-new-1")

	deny := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "deny-restore-" + ns},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{"apps"}, APIVersions: []string{"v1"}, Resources: []string{"deployments"}},
				}}}},
			Validations: []admissionregistrationv1.Validation{{
				Expression: `object.spec.template.spec.containers.all(c, !has(c.resources.requests) || !('memory' in c.resources.requests) || c.resources.requests['memory'] != '256Mi')`,
				Message:    "test: memory may not go back to 256Mi yet",
			}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "deny-restore-" + ns},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        deny.Name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources: &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}}},
		},
	}
	require.NoError(t, c.Create(ctx, deny))
	require.NoError(t, c.Create(ctx, binding))
	t.Cleanup(func() { _ = c.Delete(ctx, binding); _ = c.Delete(ctx, deny) })
	// The apiserver loads new policies asynchronously: wait until it refuses.
	require.Eventually(t, func() bool {
		probe := leadertest.Deployment(ns, "probe", "500m", "128Mi")
		if err := c.Create(ctx, probe); err != nil {
			return false
		}
		defer c.Delete(ctx, probe)
		probe.Spec.Template.Spec.Containers[0].Resources.Requests[corev1.ResourceMemory] = resource.MustParse("256Mi")
		probe.Spec.Template.Spec.Containers[0].Resources.Limits[corev1.ResourceMemory] = resource.MustParse("256Mi")
		return c.Update(ctx, probe) != nil
	}, 15*time.Second, 100*time.Millisecond, "the admission policy never took effect")

	leadertest.OOMKilled(t, c, pod, "OOMKilled")
	var rsr *v1alpha1.RightsizingRecommendation
	require.Eventually(t, func() bool {
		rsr = leadertest.GetRSR(t, c, ns, "web")
		for _, a := range leadertest.HistoryOf(rsr, v1alpha1.ActionFailed) {
			if a.Reason == v1alpha1.ReasonRollbackError {
				return true
			}
		}
		return false
	}, 20*time.Second, 50*time.Millisecond, "the failed restore was not recorded")
	assert.Equal(t, v1alpha1.PhaseRolledBack, rsr.Status.Phase, "marked RolledBack before restoring")
	assert.False(t, rsr.Status.Breach.Restored)
	for _, a := range leadertest.HistoryOf(rsr, v1alpha1.ActionFailed) {
		assert.Contains(t, a.Message, "memory may not go back to 256Mi yet", "only the refusal is a failure, not a conflict")
	}
	assert.Equal(t, "128Mi", leadertest.TemplateResources(t, c, dep).Requests.Memory().String())

	require.NoError(t, c.Delete(ctx, binding))
	require.Eventually(t, func() bool {
		rsr = leadertest.GetRSR(t, c, ns, "web")
		return rsr.Status.Breach.Restored
	}, 30*time.Second, 100*time.Millisecond, "the restore never succeeded")
	assert.Equal(t, "256Mi", leadertest.TemplateResources(t, c, dep).Requests.Memory().String())
	assert.Len(t, leadertest.HistoryOf(rsr, v1alpha1.ActionRolledBack), 1)
	leadertest.Counts(t, l.Metrics.Actions.WithLabelValues("rolled_back", "OOMKills", "memory"), 1)
	assert.GreaterOrEqual(t, testutil.ToFloat64(l.Metrics.Actions.WithLabelValues("failed", v1alpha1.ReasonRollbackError, "memory")), 1.0)
}

// TestBackoffRunEndsFailedPermanent runs the backoff of design section 4
// with timePeriod 10s, multiplyByTurn 1 and maxAttempts 2 on the leader's
// injected clock: the values are rolled back, tried again once their turn
// expired, rolled back again, and after the second expiry are
// failedPermanent.
func TestBackoffRunEndsFailedPermanent(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := leadertest.Namespace(t, c)
	ctx := context.Background()
	dep := leadertest.Web(t, c, ns, leadertest.PolicyWith(ns, time.Hour, func(g *v1alpha1.RollbackGuardrails) {
		g.Cooldown = &metav1.Duration{}
		g.Backoff = v1alpha1.Backoff{TimePeriod: &metav1.Duration{Duration: 10 * time.Second}, MultiplyByTurn: 1, MaxAttempts: 2}
	}))
	var offset atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	src := signals.NewKernel()
	leadertest.StartReplica(t, ns, "a", cluster.Config{Now: now, Signals: kernelOnly(src)})
	require.NoError(t, c.Create(ctx, leadertest.Recommendation(ns, "web", "web", v1alpha1.StrategyRollout, "500m", "128Mi")))
	// poke makes the leader look now, as the expiry's timer would.
	// The leader writes the status meanwhile: a conflict is retried.
	poke := func(i int) {
		require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
			var r v1alpha1.RightsizingRecommendation
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web"}, &r); err != nil {
				return err
			}
			if r.Annotations == nil {
				r.Annotations = map[string]string{}
			}
			r.Annotations["test/poke"] = fmt.Sprint(i)
			return c.Update(ctx, &r)
		}))
	}
	waitState := func(state v1alpha1.BackoffState, turn int32) *v1alpha1.RightsizingRecommendation {
		var rsr *v1alpha1.RightsizingRecommendation
		require.Eventually(t, func() bool {
			rsr = leadertest.GetRSR(t, c, ns, "web")
			st := rsr.Status.Rollback
			return st != nil && st.State == state && st.Turn == turn
		}, 20*time.Second, 50*time.Millisecond, "never reached %s in turn %d", state, turn)
		return rsr
	}

	for turn := int32(1); turn <= 2; turn++ {
		waitState(v1alpha1.BackoffMonitoring, turn)
		pod := leadertest.AdoptedPod(t, c, dep, fmt.Sprintf("web-turn-%d", turn))
		time.Sleep(200 * time.Millisecond)
		src.AddOOMKill(pod.UID, "app", now())
		rsr := waitState(v1alpha1.BackoffBackingOff, turn)
		require.NotNil(t, rsr.Status.Rollback.Expiry)
		// Status times have one-second resolution and the expiry is
		// rounded up to the second.
		wait := rsr.Status.Rollback.Expiry.Sub(rsr.Status.Breach.At.Time)
		want := time.Duration(turn) * 10 * time.Second
		assert.True(t, wait >= want && wait <= want+2*time.Second, "expiry = timePeriod × multiplyByTurn × turn: %s after the breach, want %s", wait, want)
		assert.Equal(t, "256Mi", leadertest.TemplateResources(t, c, dep).Requests.Memory().String(), "turn %d rolled back", turn)
		offset.Add(int64(time.Duration(turn)*10*time.Second + time.Second))
		poke(int(turn))
	}
	rsr := waitState(v1alpha1.BackoffFailedPermanent, 2)
	assert.Len(t, leadertest.HistoryOf(rsr, v1alpha1.ActionRolledBack), 2)
	assert.Len(t, leadertest.HistoryOf(rsr, v1alpha1.ActionApplied), 2, "the same values were tried once more")
	leadertest.WaitEvents(t, c, ns, "web", corev1.EventTypeWarning, v1alpha1.EventBackoffExhausted, 1)
	assert.Len(t, leadertest.EventsFor(t, c, ns, "web", corev1.EventTypeNormal, v1alpha1.EventBackoffTurnCompleted), 1)
	poke(3)
	time.Sleep(500 * time.Millisecond)
	assert.Equal(t, "256Mi", leadertest.TemplateResources(t, c, dep).Requests.Memory().String(), "never applied a third time")
}

// TestInPlaceOOMRollbackResizesPodsBack applies a memory decrease in place,
// sees the container OOM-killed and resizes the pod back: restored only
// once the kubelet reports the old values again.
func TestInPlaceOOMRollbackResizesPodsBack(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := leadertest.Namespace(t, c)
	ctx := context.Background()
	dep, pod, l := leadertest.InPlaceWeb(t, c, ns, leadertest.PolicyWith(ns, time.Hour, nil), "500m", "128Mi")

	leadertest.KubeletReports(t, c, pod, "")
	leadertest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseWatching, "")
	leadertest.OOMKilled(t, c, pod, "OOMKilled")
	leadertest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseRolledBack, v1alpha1.HealthWatchOOMKills)
	require.Eventually(t, func() bool {
		require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(pod), pod))
		return pod.Spec.Containers[0].Resources.Requests.Memory().String() == "256Mi"
	}, 20*time.Second, 50*time.Millisecond, "the pod was never resized back")
	assert.False(t, leadertest.GetRSR(t, c, ns, "web").Status.Breach.Restored, "restored only once the kubelet runs the values")

	// The kubelet runs the old values again.
	pod.Status.ObservedGeneration = pod.Generation
	pod.Status.ContainerStatuses[0].Resources = pod.Spec.Containers[0].Resources.DeepCopy()
	require.NoError(t, c.Status().Update(ctx, pod))
	leadertest.WaitRestored(t, c, ns, "web")
	assert.Equal(t, "500m", pod.Spec.Containers[0].Resources.Requests.Cpu().String())
	assert.Equal(t, "256Mi", leadertest.TemplateResources(t, c, dep).Requests.Memory().String(), "the template was never changed")
	leadertest.Counts(t, l.Metrics.Actions.WithLabelValues("rolled_back", "OOMKills", "memory"), 1)
}

// A workload deleted while its rollback runs leaves nothing to restore: the
// rollback ends, says so, and is not retried as an error.
func TestRollbackOfADeletedWorkloadEnds(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := leadertest.Namespace(t, c)
	ctx := context.Background()
	dep := leadertest.Web(t, c, ns, leadertest.PolicyWith(ns, time.Hour, nil))
	leadertest.StartReplica(t, ns, "a", cluster.Config{AfterBreach: func(ctx context.Context, _ *v1alpha1.RightsizingRecommendation) {
		require.NoError(t, c.Delete(ctx, dep))
		// The leader reads the workload from its cache: wait until the
		// deletion is there, as it would be in a real cluster soon after.
		time.Sleep(500 * time.Millisecond)
	}})
	require.NoError(t, c.Create(ctx, leadertest.Recommendation(ns, "web", "web", v1alpha1.StrategyRollout, "250m", "128Mi")))
	leadertest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseWatching, "")
	pod := leadertest.AdoptedPod(t, c, dep, "web-new-1")
	leadertest.OOMKilled(t, c, pod, "OOMKilled")

	rsr := leadertest.WaitRestored(t, c, ns, "web")
	assert.Equal(t, v1alpha1.PhaseRolledBack, rsr.Status.Phase)
	rb := leadertest.HistoryOf(rsr, v1alpha1.ActionRolledBack)
	require.Len(t, rb, 1)
	assert.Contains(t, rb[0].Message, "Deployment "+ns+"/web is gone, nothing left to restore")
	assert.Empty(t, leadertest.HistoryOf(rsr, v1alpha1.ActionFailed), "a deleted workload is no restore failure")
	assert.Contains(t, rsr.Status.RolledBackFingerprints, rsr.Status.Change.ValueFingerprint)
}

// TestDeferredRollbackNamesAPodItCannotResizeBack: a Deferred change with
// requests equal to limits made the pods that started with it Guaranteed.
// Its OOM rollback puts the memory request back, which would make such a
// pod Burstable, and Kubernetes keeps a pod's QoS class: the apiserver
// refuses the resize. The rollback still completes, and its message names
// the pod that keeps the changed values.
func TestDeferredRollbackNamesAPodItCannotResizeBack(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := leadertest.Namespace(t, c)
	ctx := context.Background()
	dep := leadertest.Deployment(ns, "web", "500m", "256Mi")
	dep.Spec.Template.Spec.Containers[0].Resources.Requests = corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("128Mi")}
	require.NoError(t, c.Create(ctx, dep))
	old := leadertest.RunningPod(t, c, dep) // Burstable, as the template
	require.NoError(t, c.Create(ctx, leadertest.PolicyWith(ns, time.Hour, nil)))
	leadertest.StartReplica(t, ns, "a", cluster.Config{})
	require.NoError(t, c.Create(ctx, leadertest.Recommendation(ns, "web", "web", v1alpha1.StrategyDeferred, "500m", "256Mi")))
	leadertest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseWatching, "")

	// A pod of the same ReplicaSet starts, and the webhook gives it the values.
	started := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-h1-started", Labels: old.Labels, OwnerReferences: old.OwnerReferences},
		Spec:       *old.Spec.DeepCopy(),
	}
	started.Spec.Containers[0].Resources.Requests = started.Spec.Containers[0].Resources.Limits.DeepCopy()
	require.NoError(t, c.Create(ctx, started))
	leadertest.MarkRunning(t, c, started)
	require.Equal(t, corev1.PodQOSGuaranteed, started.Status.QOSClass)

	leadertest.OOMKilled(t, c, started, "OOMKilled")
	leadertest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseRolledBack, v1alpha1.HealthWatchOOMKills)
	rsr := leadertest.WaitRestored(t, c, ns, "web")
	rb := leadertest.HistoryOf(rsr, v1alpha1.ActionRolledBack)
	require.Len(t, rb, 1)
	assert.Contains(t, rb[0].Message, "not resized back, these keep the changed values until they are recreated: pod web-h1-started: Rejected")
	assert.NotContains(t, rb[0].Message, old.Name)
	assert.Empty(t, leadertest.HistoryOf(rsr, v1alpha1.ActionFailed), "the rollback did not fail on it")
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(started), started))
	assert.Equal(t, "256Mi", started.Spec.Containers[0].Resources.Requests.Memory().String(), "left as it started")
	require.Eventually(t, func() bool {
		// One on the recommendation, one on the Deployment: both are web.
		evs := leadertest.EventsFor(t, c, ns, "web", corev1.EventTypeWarning, "RolledBack")
		return len(evs) == 2 && strings.Contains(evs[0].Note, "web-h1-started") && strings.Contains(evs[1].Note, "web-h1-started")
	}, 10*time.Second, 50*time.Millisecond, "the Warning events name the pod")
}

// kernelOnly returns the leader's signal stores around a test's Kernel.
func kernelOnly(k *signals.Kernel) *signals.Stores {
	return &signals.Stores{Kernel: k, Statuses: signals.NewAgentStatuses(0)}
}

// pendingPod creates a pod of the Deployment's current template that no
// scheduler placed: Pending with PodScheduled=False, reason Unschedulable,
// as kube-scheduler writes it (none runs in these tests).
func pendingPod(t *testing.T, c client.Client, dep *appsv1.Deployment, name string) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	pod := leadertest.AdoptedPod(t, c, dep, name)
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
	ns := leadertest.Namespace(t, c)
	p := leadertest.PolicyWith(ns, time.Hour, func(g *v1alpha1.RollbackGuardrails) {
		g.UnschedulableGrace = &metav1.Duration{Duration: 2 * time.Second}
	})
	dep, l := leadertest.WatchedWeb(t, c, ns, p, cluster.Config{}, "250m", "128Mi")
	pendingPod(t, c, dep, "web-new-1")

	time.Sleep(time.Second)
	assert.Equal(t, v1alpha1.PhaseWatching, leadertest.GetRSR(t, c, ns, "web").Status.Phase, "within the grace")
	leadertest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseRolledBack, v1alpha1.HealthWatchUnschedulable)
	rsr := leadertest.WaitRestored(t, c, ns, "web")
	res := leadertest.TemplateResources(t, c, dep)
	assert.Equal(t, "500m", res.Requests.Cpu().String(), "every touched resource restored")
	assert.Equal(t, "256Mi", res.Requests.Memory().String())
	rb := leadertest.HistoryOf(rsr, v1alpha1.ActionRolledBack)
	require.Len(t, rb, 1)
	assert.Equal(t, v1alpha1.HealthWatchUnschedulable, rb[0].Reason)
	assert.Equal(t, []v1alpha1.ResourceName{"cpu", "memory"}, rb[0].Resources)
	require.Len(t, rb[0].Figures, 1)
	assert.Contains(t, rb[0].Figures[0], "unschedulable pods 1, for unschedulableGrace 2s or longer (pod web-new-1 Unschedulable for ")
	assert.Contains(t, rb[0].Figures[0], "Insufficient memory")
	assert.Equal(t, v1alpha1.BackoffBackingOff, rsr.Status.Rollback.State)
	leadertest.Counts(t, l.Metrics.Actions.WithLabelValues("rolled_back", "Unschedulable", "memory"), 1)
	leadertest.WaitEvents(t, c, ns, "web", corev1.EventTypeWarning, v1alpha1.EventRolledBack, 2)
}

// TestInfeasibleResizeRollsBack: an in-place resize the kubelet marks
// Infeasible ends the apply (Applied, not Failed) and is rolled back with
// reason Infeasible once it stays so for unschedulableGrace; the pod is
// resized back. It failed before: the apply was recorded Failed and the
// pod kept the values in its spec.
func TestInfeasibleResizeRollsBack(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := leadertest.Namespace(t, c)
	ctx := context.Background()
	p := leadertest.PolicyWith(ns, time.Hour, func(g *v1alpha1.RollbackGuardrails) { g.UnschedulableGrace = &metav1.Duration{Duration: time.Second} })
	_, pod, l := leadertest.InPlaceWeb(t, c, ns, p, "1", "256Mi")

	leadertest.KubeletReports(t, c, pod, corev1.PodReasonInfeasible)
	rsr := leadertest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseRolledBack, v1alpha1.HealthWatchInfeasible)
	applied := leadertest.HistoryOf(rsr, v1alpha1.ActionApplied)
	require.Len(t, applied, 1, "the apply ended, not failed")
	assert.Contains(t, applied[0].Message, "resize Infeasible: Node didn't have enough capacity")
	assert.Empty(t, leadertest.HistoryOf(rsr, v1alpha1.ActionFailed))
	assert.Contains(t, rsr.Status.Breach.Figures[0], "infeasible pods 1, for unschedulableGrace 1s or longer (pod "+pod.Name+" Infeasible for ")
	require.Eventually(t, func() bool {
		require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(pod), pod))
		return pod.Spec.Containers[0].Resources.Requests.Cpu().String() == "500m"
	}, 20*time.Second, 50*time.Millisecond, "the pod was never resized back")

	// The kubelet runs the old values, as it always did.
	pod.Status.ObservedGeneration = pod.Generation
	require.NoError(t, c.Status().Update(ctx, pod))
	rsr = leadertest.WaitRestored(t, c, ns, "web")
	assert.Equal(t, []v1alpha1.ResourceName{"cpu"}, rsr.Status.Breach.Resources, "every touched resource (only cpu moved)")
	leadertest.Counts(t, l.Metrics.Actions.WithLabelValues("rolled_back", "Infeasible", "cpu"), 1)
	assert.Empty(t, leadertest.EventsFor(t, c, ns, "web", corev1.EventTypeWarning, v1alpha1.EventApplyFailed))
}

// TestNotAdoptedAtTheEndRollsBack: a Rollout none of whose pods runs the
// values by the watch's end is rolled back with reason NotAdopted, through
// the backoff (rollingBack, then backingOff), although
// adoptionThresholdPercent is 0. It failed before: the recommendation went
// back to Applied with HealthWatch NotAdopted and the backoff stayed
// monitoring.
func TestNotAdoptedAtTheEndRollsBack(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := leadertest.Namespace(t, c)
	ctx := context.Background()
	dep := leadertest.Web(t, c, ns, leadertest.PolicyWith(ns, 2*time.Second, nil))
	leadertest.RunningPod(t, c, dep) // of the old template; the rollout never replaces it
	l := leadertest.StartReplica(t, ns, "a", cluster.Config{})
	require.NoError(t, c.Create(ctx, leadertest.Recommendation(ns, "web", "web", v1alpha1.StrategyRollout, "250m", "128Mi")))
	leadertest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseWatching, "")

	leadertest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseRolledBack, v1alpha1.HealthWatchNotAdopted)
	rsr := leadertest.WaitRestored(t, c, ns, "web")
	assert.Equal(t, "500m", leadertest.TemplateResources(t, c, dep).Requests.Cpu().String())
	assert.Equal(t, "256Mi", leadertest.TemplateResources(t, c, dep).Requests.Memory().String())
	rb := leadertest.HistoryOf(rsr, v1alpha1.ActionRolledBack)
	require.Len(t, rb, 1)
	assert.Equal(t, v1alpha1.HealthWatchNotAdopted, rb[0].Reason)
	assert.Equal(t, []string{"adopted 0 of 1 pods (0%): none runs the applied values"}, rb[0].Figures)
	assert.Empty(t, leadertest.HistoryOf(rsr, v1alpha1.ActionHealthy))
	cond := leadertest.Condition(rsr, v1alpha1.ConditionHealthWatch)
	require.NotNil(t, cond)
	assert.Equal(t, v1alpha1.HealthWatchNotAdopted, cond.Reason)
	require.NotNil(t, rsr.Status.Rollback)
	assert.Equal(t, v1alpha1.BackoffBackingOff, rsr.Status.Rollback.State)
	assert.Contains(t, rsr.Status.RolledBackFingerprints, rsr.Status.Change.ValueFingerprint)
	leadertest.WaitEvents(t, c, ns, "web", corev1.EventTypeWarning, v1alpha1.EventRollingBackStarted, 1)
	leadertest.WaitEvents(t, c, ns, "web", corev1.EventTypeWarning, v1alpha1.EventRolledBack, 2)
	leadertest.Counts(t, l.Metrics.Actions.WithLabelValues("rolled_back", "NotAdopted", "cpu"), 1)
}

// TestResizeRestartsAreNotCounted: three replicas resized in place with
// resizePolicy RestartContainer restart once each because of the resize,
// which is not harm (before, the three restarts tripped the default
// restarts: 3); one more restart each is.
func TestResizeRestartsAreNotCounted(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := leadertest.Namespace(t, c)
	ctx := context.Background()
	dep := leadertest.Deployment(ns, "web", "500m", "256Mi")
	dep.Spec.Replicas = ptr.To[int32](3)
	dep.Spec.Template.Spec.Containers[0].ResizePolicy = []corev1.ContainerResizePolicy{
		{ResourceName: corev1.ResourceMemory, RestartPolicy: corev1.RestartContainer}}
	require.NoError(t, c.Create(ctx, dep))
	require.NoError(t, c.Create(ctx, leadertest.PolicyWith(ns, time.Hour, nil)))
	first := leadertest.RunningPod(t, c, dep)
	pods := []*corev1.Pod{first}
	for i := 2; i <= 3; i++ {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("web-h1-%d", i), Labels: first.Labels,
			OwnerReferences: first.OwnerReferences}, Spec: *first.Spec.DeepCopy()}
		require.NoError(t, c.Create(ctx, p))
		leadertest.MarkRunning(t, c, p)
		pods = append(pods, p)
	}
	leadertest.StartReplica(t, ns, "a", cluster.Config{})
	require.NoError(t, c.Create(ctx, leadertest.Recommendation(ns, "web", "web", v1alpha1.StrategyInPlace, "500m", "128Mi")))

	restart := func(p *corev1.Pod) {
		require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
			require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(p), p))
			p.Status.ContainerStatuses[0].RestartCount++
			return c.Status().Update(ctx, p)
		}))
	}
	for _, p := range pods {
		leadertest.KubeletReports(t, c, p, "")
		restart(p) // the kubelet restarted app to resize its memory
	}
	leadertest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseWatching, "")
	time.Sleep(500 * time.Millisecond)
	rsr := leadertest.GetRSR(t, c, ns, "web")
	assert.Equal(t, v1alpha1.PhaseWatching, rsr.Status.Phase, "the resize's own restarts are no harm")

	for _, p := range pods {
		restart(p)
	}
	rsr = leadertest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseRolledBack, v1alpha1.HealthWatchRestarts)
	require.NotNil(t, rsr.Status.Breach)
	assert.Equal(t, []string{"restarts 3 ≥ 3"}, rsr.Status.Breach.Figures)
	assert.Contains(t, rsr.Status.Message, "1 more caused by the resize (resizePolicy RestartContainer) not counted")
}
