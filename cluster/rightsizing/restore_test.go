package rightsizing_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster"
	"github.com/kerf-dev/kerf/cluster/signals"
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/kubetest"
	"github.com/kerf-dev/kerf/test/leadertest"
)

// TestFailedRestoreIsRetriedUntilItSucceeds makes the apiserver itself
// refuse the restore (a ValidatingAdmissionPolicy denies putting the
// memory back) until the test lifts it: the failure is recorded as a
// failed action with reason RollbackError, the restore is retried, and
// once allowed the rollback completes and is recorded once.
func TestFailedRestoreIsRetriedUntilItSucceeds(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	ctx := context.Background()
	dep, l := leadertest.WatchedWeb(t, c, ns, kubetest.PolicyWith(ns, time.Hour, nil), cluster.Config{}, "500m", "128Mi")
	pod := kubetest.AdoptedPod(t, c, dep, "web-new-1")

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
		probe := kubetest.Deployment(ns, "probe", "500m", "128Mi")
		if err := c.Create(ctx, probe); err != nil {
			return false
		}
		defer c.Delete(ctx, probe)
		probe.Spec.Template.Spec.Containers[0].Resources.Requests[corev1.ResourceMemory] = resource.MustParse("256Mi")
		probe.Spec.Template.Spec.Containers[0].Resources.Limits[corev1.ResourceMemory] = resource.MustParse("256Mi")
		return c.Update(ctx, probe) != nil
	}, 15*time.Second, 100*time.Millisecond, "the admission policy never took effect")

	kubetest.OOMKilled(t, c, pod, "OOMKilled")
	var rsr *v1alpha1.RightsizingRecommendation
	require.Eventually(t, func() bool {
		rsr = kubetest.GetRSR(t, c, ns, "web")
		for _, a := range kubetest.HistoryOf(rsr, v1alpha1.ActionFailed) {
			if a.Reason == v1alpha1.ReasonRollbackError {
				return true
			}
		}
		return false
	}, 20*time.Second, 50*time.Millisecond, "the failed restore was not recorded")
	assert.Equal(t, v1alpha1.PhaseRolledBack, rsr.Status.Phase, "marked RolledBack before restoring")
	assert.False(t, rsr.Status.Breach.Restored)
	for _, a := range kubetest.HistoryOf(rsr, v1alpha1.ActionFailed) {
		assert.Contains(t, a.Message, "memory may not go back to 256Mi yet", "only the refusal is a failure, not a conflict")
	}
	assert.Equal(t, "128Mi", kubetest.TemplateResources(t, c, dep).Requests.Memory().String())

	require.NoError(t, c.Delete(ctx, binding))
	require.Eventually(t, func() bool {
		rsr = kubetest.GetRSR(t, c, ns, "web")
		return rsr.Status.Breach.Restored
	}, 30*time.Second, 100*time.Millisecond, "the restore never succeeded")
	assert.Equal(t, "256Mi", kubetest.TemplateResources(t, c, dep).Requests.Memory().String())
	assert.Len(t, kubetest.HistoryOf(rsr, v1alpha1.ActionRolledBack), 1)
	kubetest.Counts(t, l.Metrics.Actions.WithLabelValues("rolled_back", "OOMKills", "memory"), 1)
	assert.GreaterOrEqual(t, testutil.ToFloat64(l.Metrics.Actions.WithLabelValues("failed", v1alpha1.ReasonRollbackError, "memory")), 1.0)
}

// TestBackoffRunEndsFailedPermanent runs the backoff of design section 4
// with timePeriod 10s, multiplyByTurn 1 and maxAttempts 2 on the leader's
// injected clock: the values are rolled back, tried again once their turn
// expired, rolled back again, and after the second expiry are
// failedPermanent.
func TestBackoffRunEndsFailedPermanent(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	ctx := context.Background()
	dep := kubetest.Web(t, c, ns, kubetest.PolicyWith(ns, time.Hour, func(g *v1alpha1.RollbackGuardrails) {
		g.Cooldown = &metav1.Duration{}
		g.Backoff = v1alpha1.Backoff{TimePeriod: &metav1.Duration{Duration: 10 * time.Second}, MultiplyByTurn: 1, MaxAttempts: 2}
	}))
	var offset atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	src := signals.NewKernel()
	leadertest.StartReplica(t, ns, "a", cluster.Config{Now: now, Signals: kubetest.KernelOnly(src)})
	require.NoError(t, c.Create(ctx, kubetest.Recommendation(ns, "web", "web", v1alpha1.StrategyRollout, "500m", "128Mi")))
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
			rsr = kubetest.GetRSR(t, c, ns, "web")
			st := rsr.Status.Rollback
			return st != nil && st.State == state && st.Turn == turn
		}, 20*time.Second, 50*time.Millisecond, "never reached %s in turn %d", state, turn)
		return rsr
	}

	for turn := int32(1); turn <= 2; turn++ {
		waitState(v1alpha1.BackoffMonitoring, turn)
		pod := kubetest.AdoptedPod(t, c, dep, fmt.Sprintf("web-turn-%d", turn))
		time.Sleep(200 * time.Millisecond)
		src.AddOOMKill(pod.UID, "app", now())
		rsr := waitState(v1alpha1.BackoffBackingOff, turn)
		require.NotNil(t, rsr.Status.Rollback.Expiry)
		// Status times have one-second resolution and the expiry is
		// rounded up to the second.
		wait := rsr.Status.Rollback.Expiry.Sub(rsr.Status.Breach.At.Time)
		want := time.Duration(turn) * 10 * time.Second
		assert.True(t, wait >= want && wait <= want+2*time.Second, "expiry = timePeriod × multiplyByTurn × turn: %s after the breach, want %s", wait, want)
		assert.Equal(t, "256Mi", kubetest.TemplateResources(t, c, dep).Requests.Memory().String(), "turn %d rolled back", turn)
		offset.Add(int64(time.Duration(turn)*10*time.Second + time.Second))
		poke(int(turn))
	}
	rsr := waitState(v1alpha1.BackoffFailedPermanent, 2)
	assert.Len(t, kubetest.HistoryOf(rsr, v1alpha1.ActionRolledBack), 2)
	assert.Len(t, kubetest.HistoryOf(rsr, v1alpha1.ActionApplied), 2, "the same values were tried once more")
	kubetest.WaitEvents(t, c, ns, "web", corev1.EventTypeWarning, v1alpha1.EventBackoffExhausted, 1)
	assert.Len(t, kubetest.EventsFor(t, c, ns, "web", corev1.EventTypeNormal, v1alpha1.EventBackoffTurnCompleted), 1)
	poke(3)
	time.Sleep(500 * time.Millisecond)
	assert.Equal(t, "256Mi", kubetest.TemplateResources(t, c, dep).Requests.Memory().String(), "never applied a third time")
}

// oomRolledBackInPlace takes InPlaceWeb's change (memory 128Mi) through
// its watch to an OOM rollback, and waits until the leader resized pod
// back to 256Mi; the kubelet has not reported it yet.
func oomRolledBackInPlace(t *testing.T, c client.Client, ns string, pod *corev1.Pod) {
	t.Helper()
	kubetest.KubeletReports(t, c, pod, "")
	kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseWatching, "")
	kubetest.OOMKilled(t, c, pod, "OOMKilled")
	kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseRolledBack, v1alpha1.HealthWatchOOMKills)
	require.Eventually(t, func() bool {
		require.NoError(t, c.Get(context.Background(), client.ObjectKeyFromObject(pod), pod))
		return pod.Spec.Containers[0].Resources.Requests.Memory().String() == "256Mi"
	}, 20*time.Second, 50*time.Millisecond, "the pod was never resized back")
}

// TestInPlaceOOMRollbackResizesPodsBack applies a memory decrease in place,
// sees the container OOM-killed and resizes the pod back: restored only
// once the kubelet reports the old values again.
func TestInPlaceOOMRollbackResizesPodsBack(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	ctx := context.Background()
	dep, pod, l := leadertest.InPlaceWeb(t, c, ns, kubetest.PolicyWith(ns, time.Hour, nil), "500m", "128Mi")

	oomRolledBackInPlace(t, c, ns, pod)
	assert.False(t, kubetest.GetRSR(t, c, ns, "web").Status.Breach.Restored, "restored only once the kubelet runs the values")

	// The kubelet runs the old values again.
	pod.Status.ObservedGeneration = pod.Generation
	pod.Status.ContainerStatuses[0].Resources = pod.Spec.Containers[0].Resources.DeepCopy()
	require.NoError(t, c.Status().Update(ctx, pod))
	kubetest.WaitRestored(t, c, ns, "web")
	assert.Equal(t, "500m", pod.Spec.Containers[0].Resources.Requests.Cpu().String())
	assert.Equal(t, "256Mi", kubetest.TemplateResources(t, c, dep).Requests.Memory().String(), "the template was never changed")
	kubetest.Counts(t, l.Metrics.Actions.WithLabelValues("rolled_back", "OOMKills", "memory"), 1)
}

// A workload deleted while its rollback runs leaves nothing to restore: the
// rollback ends, says so, and is not retried as an error.
func TestRollbackOfADeletedWorkloadEnds(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	ctx := context.Background()
	dep := kubetest.Web(t, c, ns, kubetest.PolicyWith(ns, time.Hour, nil))
	leadertest.StartReplica(t, ns, "a", cluster.Config{AfterBreach: func(ctx context.Context, _ *v1alpha1.RightsizingRecommendation) {
		require.NoError(t, c.Delete(ctx, dep))
		// The leader reads the workload from its cache: wait until the
		// deletion is there, as it would be in a real cluster soon after.
		time.Sleep(500 * time.Millisecond)
	}})
	require.NoError(t, c.Create(ctx, kubetest.Recommendation(ns, "web", "web", v1alpha1.StrategyRollout, "250m", "128Mi")))
	kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseWatching, "")
	pod := kubetest.AdoptedPod(t, c, dep, "web-new-1")
	kubetest.OOMKilled(t, c, pod, "OOMKilled")

	rsr := kubetest.WaitRestored(t, c, ns, "web")
	assert.Equal(t, v1alpha1.PhaseRolledBack, rsr.Status.Phase)
	rb := kubetest.HistoryOf(rsr, v1alpha1.ActionRolledBack)
	require.Len(t, rb, 1)
	assert.Contains(t, rb[0].Message, "Deployment "+ns+"/web is gone, nothing left to restore")
	assert.Empty(t, kubetest.HistoryOf(rsr, v1alpha1.ActionFailed), "a deleted workload is no restore failure")
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
	ns := kubetest.Namespace(t, c)
	ctx := context.Background()
	dep := kubetest.Deployment(ns, "web", "500m", "256Mi")
	dep.Spec.Template.Spec.Containers[0].Resources.Requests = corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("128Mi")}
	require.NoError(t, c.Create(ctx, dep))
	old := kubetest.RunningPod(t, c, dep) // Burstable, as the template
	// The change makes the new pods Guaranteed, which the policy allows.
	p := kubetest.PolicyWith(ns, time.Hour, nil)
	p.Spec.Guardrails.AllowQoSChange = true
	require.NoError(t, c.Create(ctx, p))
	leadertest.StartReplica(t, ns, "a", cluster.Config{})
	require.NoError(t, c.Create(ctx, kubetest.Recommendation(ns, "web", "web", v1alpha1.StrategyDeferred, "500m", "256Mi")))
	kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseWatching, "")

	// A pod of the same ReplicaSet starts, and the webhook gives it the values.
	started := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-h1-started", Labels: old.Labels, OwnerReferences: old.OwnerReferences},
		Spec:       *old.Spec.DeepCopy(),
	}
	started.Spec.Containers[0].Resources.Requests = started.Spec.Containers[0].Resources.Limits.DeepCopy()
	require.NoError(t, c.Create(ctx, started))
	kubetest.MarkRunning(t, c, started)
	require.Equal(t, corev1.PodQOSGuaranteed, started.Status.QOSClass)

	kubetest.OOMKilled(t, c, started, "OOMKilled")
	kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseRolledBack, v1alpha1.HealthWatchOOMKills)
	rsr := kubetest.WaitRestored(t, c, ns, "web")
	rb := kubetest.HistoryOf(rsr, v1alpha1.ActionRolledBack)
	require.Len(t, rb, 1)
	assert.Contains(t, rb[0].Message, "not resized back, these keep the changed values until they are recreated: pod web-h1-started: Rejected")
	assert.NotContains(t, rb[0].Message, old.Name)
	assert.Empty(t, kubetest.HistoryOf(rsr, v1alpha1.ActionFailed), "the rollback did not fail on it")
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(started), started))
	assert.Equal(t, "256Mi", started.Spec.Containers[0].Resources.Requests.Memory().String(), "left as it started")
	require.Eventually(t, func() bool {
		// One on the recommendation, one on the Deployment: both are web.
		evs := kubetest.EventsFor(t, c, ns, "web", corev1.EventTypeWarning, "RolledBack")
		return len(evs) == 2 && strings.Contains(evs[0].Note, "web-h1-started") && strings.Contains(evs[1].Note, "web-h1-started")
	}, 10*time.Second, 50*time.Millisecond, "the Warning events name the pod")
}

// TestValuesAlreadyRunningAfterARollbackStartNoWatch: after an OOM
// rollback, the recommendation asks for what runs again (the restored
// values). Nothing is applied: phase Applied, reason AlreadyRunning, and
// no change is left in status. Before, the rolled-back change stayed in
// status.change under phase Applied: the leader tried to watch it again
// ("backingOff → monitoring is not a transition", for ever, seen in the
// e2e's recommender scenario) and the webhook would have given new pods
// its harmful values.
func TestValuesAlreadyRunningAfterARollbackStartNoWatch(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	ctx := context.Background()
	_, pod, _ := leadertest.InPlaceWeb(t, c, ns, kubetest.PolicyWith(ns, time.Hour, nil), "500m", "128Mi")
	oomRolledBackInPlace(t, c, ns, pod)
	pod.Status.ObservedGeneration = pod.Generation
	pod.Status.ContainerStatuses[0].Resources = pod.Spec.Containers[0].Resources.DeepCopy()
	require.NoError(t, c.Status().Update(ctx, pod))
	kubetest.WaitRestored(t, c, ns, "web")

	rsr := kubetest.GetRSR(t, c, ns, "web")
	kubetest.Update(t, c, rsr, func() {
		rsr.Spec.Containers[0].Requests.Memory, rsr.Spec.Containers[0].Limits.Memory = kubetest.Q("256Mi"), kubetest.Q("256Mi")
	})
	got := kubetest.WaitRSR(t, c, ns, "web", func(r *v1alpha1.RightsizingRecommendation) bool {
		return r.Status.ObservedGeneration == r.Generation && r.Status.Phase == v1alpha1.PhaseApplied
	}, "the values already running were never recorded")
	assert.Nil(t, got.Status.Change, "no change was made, and none is left to watch")
	cond := kubetest.Condition(got, v1alpha1.ConditionApplied)
	require.NotNil(t, cond)
	assert.Equal(t, v1alpha1.AppliedReasonAlreadyRunning, cond.Reason)
	require.NotNil(t, got.Status.Rollback)
	assert.Equal(t, v1alpha1.BackoffBackingOff, got.Status.Rollback.State, "the rolled-back values' backoff goes on")
	time.Sleep(time.Second) // a leader that started a watch would have done so by now
	again := kubetest.GetRSR(t, c, ns, "web")
	assert.Equal(t, v1alpha1.PhaseApplied, again.Status.Phase, "no watch of the rolled-back change")
}
