package rightsizing_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

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
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/kubetest"
	"github.com/kerf-dev/kerf/test/leadertest"
)

// canaryPolicy is a namespaced policy with a 1h watch and a canary of one
// pod watched for canaryFor.
func canaryPolicy(ns string, canaryFor time.Duration) *v1alpha1.RightsizingPolicy {
	p := kubetest.PolicyWith(ns, time.Hour, nil)
	p.Spec.Guardrails.Canary = &v1alpha1.CanaryGuardrails{Pods: ptr.To[int32](1), Duration: &metav1.Duration{Duration: canaryFor}}
	return p
}

// runningPods is kubetest.RunningPodsOn on the tests' node.
func runningPods(t *testing.T, c client.Client, dep *appsv1.Deployment, suffixes ...string) []*corev1.Pod {
	t.Helper()
	return kubetest.RunningPodsOn(t, c, dep, kubetest.Node(t, c), suffixes...)
}

// kubeletResizedTo waits until the pod's spec reaches generation gen (a
// resize) and writes what its kubelet reports once it runs the spec's
// values.
func kubeletResizedTo(t *testing.T, c client.Client, pod *corev1.Pod, gen int64) {
	t.Helper()
	ctx := context.Background()
	require.Eventually(t, func() bool {
		require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(pod), pod))
		return pod.Generation >= gen
	}, 20*time.Second, 50*time.Millisecond, "pod %s never reached generation %d", pod.Name, gen)
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return err
		}
		pod.Status.ObservedGeneration = pod.Generation
		pod.Status.ContainerStatuses[0].Resources = pod.Spec.Containers[0].Resources.DeepCopy()
		return c.Status().Update(ctx, pod)
	}))
}

// touchedPods are the pods in the change's touched objects.
func touchedPods(rsr *v1alpha1.RightsizingRecommendation) []string {
	var out []string
	for _, o := range rsr.Status.Change.Touched {
		if o.Kind == "Pod" {
			out = append(out, o.Name)
		}
	}
	return out
}

// assertNeverResized checks that the pods still run the template's values
// (500m, 256Mi) and were never resized: their generation is 1.
func assertNeverResized(t *testing.T, c client.Client, pods ...*corev1.Pod) {
	t.Helper()
	for _, p := range pods {
		var got corev1.Pod
		require.NoError(t, c.Get(context.Background(), client.ObjectKeyFromObject(p), &got))
		assert.Equal(t, int64(1), got.Generation, "pod %s was resized", p.Name)
		r := got.Spec.Containers[0].Resources
		assert.Equal(t, "500m", r.Requests.Cpu().String(), "pod %s cpu", p.Name)
		assert.Equal(t, "256Mi", r.Requests.Memory().String(), "pod %s memory", p.Name)
	}
}

// waitCanary waits until the change is watched on its canary, web-h1-a,
// and checks that only the canary was resized.
func waitCanary(t *testing.T, c client.Client, ns string, pods []*corev1.Pod) *v1alpha1.RightsizingRecommendation {
	t.Helper()
	kubetest.KubeletReports(t, c, pods[0], "")
	rsr := kubetest.WaitRSR(t, c, ns, "web", func(rsr *v1alpha1.RightsizingRecommendation) bool {
		return rsr.Status.Phase == v1alpha1.PhaseWatching && rsr.Status.Change != nil
	}, "the canary was never watched")
	require.NotNil(t, rsr.Status.Change.Canary, "no canary recorded")
	assert.Equal(t, []string{"web-h1-a"}, rsr.Status.Change.Canary.Pods, "the first ready pod by name")
	assert.Equal(t, int32(3), rsr.Status.Change.Canary.Of)
	assert.Nil(t, rsr.Status.Change.Canary.PromotedAt)
	assert.Equal(t, []string{"web-h1-a"}, touchedPods(rsr))
	applied := kubetest.HistoryOf(rsr, v1alpha1.ActionApplied)
	require.Len(t, applied, 1)
	assert.Equal(t, v1alpha1.ReasonCanary, applied[0].Reason)
	assert.Contains(t, applied[0].Message, "to canary pods web-h1-a (1 of 3)")
	assertNeverResized(t, c, pods[1:]...)
	return rsr
}

// TestCanaryOOMKillRollsBackOnlyTheCanary: with spec.guardrails.canary
// {pods: 1}, an InPlace change to a 3-replica Deployment resizes only
// web-h1-a. Its OOM kill rolls memory back on it alone, recorded as any
// breach (rolled_back action, cooldown, Events, kerf_actions_total). The
// other two pods are never resized nor in change.touched. Without the
// canary all three are resized at once.
func TestCanaryOOMKillRollsBackOnlyTheCanary(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	ctx := context.Background()
	dep := kubetest.Web(t, c, ns, canaryPolicy(ns, 10*time.Minute))
	pods := runningPods(t, c, dep, "a", "b", "c")
	l := leadertest.StartReplica(t, ns, "a", cluster.Config{})
	require.NoError(t, c.Create(ctx, kubetest.Recommendation(ns, "web", "web", v1alpha1.StrategyInPlace, "250m", "192Mi")))
	waitCanary(t, c, ns, pods)

	kubetest.OOMKilled(t, c, pods[0], "OOMKilled")
	kubeletResizedTo(t, c, pods[0], 3) // the restore
	rsr := kubetest.WaitRestored(t, c, ns, "web")
	assert.Equal(t, v1alpha1.PhaseRolledBack, rsr.Status.Phase)
	assert.Equal(t, v1alpha1.HealthWatchOOMKills, rsr.Status.Reason)
	assert.Equal(t, []v1alpha1.ResourceName{"memory"}, rsr.Status.Breach.Resources)
	rolled := kubetest.HistoryOf(rsr, v1alpha1.ActionRolledBack)
	require.Len(t, rolled, 1)
	assert.Contains(t, rolled[0].Message, "only the canary pods web-h1-a (1 of 3) had the values")
	assert.NotEmpty(t, rsr.Status.Cooldowns, "a canary breach starts the cooldown")
	assert.Contains(t, rsr.Status.RolledBackFingerprints, rsr.Status.Change.ValueFingerprint)
	require.NotNil(t, rsr.Status.Rollback)
	assert.Equal(t, v1alpha1.BackoffBackingOff, rsr.Status.Rollback.State)
	kubetest.WaitEvents(t, c, ns, "web", corev1.EventTypeWarning, v1alpha1.EventRolledBack, 2) // the recommendation's and the workload's
	assert.Equal(t, 1.0, leadertest.MetricValue(t, l, "kerf_actions_total", "type", "rolled_back", "resource", "memory"))

	var canary corev1.Pod
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(pods[0]), &canary))
	assert.Equal(t, "256Mi", canary.Spec.Containers[0].Resources.Limits.Memory().String(), "the canary's memory restored")
	assertNeverResized(t, c, pods[1:]...)
	assert.Equal(t, []string{"web-h1-a"}, touchedPods(rsr))
}

// TestCanaryWithoutBreachResizesTheRest: once the canary's 10 minutes
// pass without a breach (by the injected clock), the canary is promoted:
// the other two pods are resized, the applied action's reason is
// CanaryPromoted with its Event, and the full watch starts at the
// promotion (change.appliedAt). Without the canary's end, the other pods
// would never be resized.
func TestCanaryWithoutBreachResizesTheRest(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	ctx := context.Background()
	var offset atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	dep := kubetest.Web(t, c, ns, canaryPolicy(ns, 10*time.Minute))
	pods := runningPods(t, c, dep, "a", "b", "c")
	leadertest.StartReplica(t, ns, "a", cluster.Config{Now: now})
	require.NoError(t, c.Create(ctx, kubetest.Recommendation(ns, "web", "web", v1alpha1.StrategyInPlace, "250m", "192Mi")))
	rsr := waitCanary(t, c, ns, pods)
	until := rsr.Status.Change.Canary.Until.Time
	assert.Equal(t, 10*time.Minute, until.Sub(rsr.Status.Change.Canary.StartedAt.Time))

	offset.Store(int64(11 * time.Minute))
	promote(t, c, ns, pods)
	rsr = kubetest.GetRSR(t, c, ns, "web")
	assert.False(t, rsr.Status.Change.AppliedAt.Time.Before(until), "the full watch starts at the promotion, after the canary's end")
	assert.ElementsMatch(t, []string{"web-h1-a", "web-h1-b", "web-h1-c"}, touchedPods(rsr))
	kubetest.WaitEvents(t, c, ns, "web", corev1.EventTypeNormal, v1alpha1.EventCanaryPromoted, 1)

	// The full watch covers every pod: an OOM kill outside the canary,
	// after the promotion by the leader's clock, rolls memory back on all
	// three.
	offset.Store(int64(11*time.Minute + 2*time.Second)) // status times have one-second resolution
	kubetest.Update(t, c, pods[1], func() {})           // the freshest status
	cs := &pods[1].Status.ContainerStatuses[0]
	cs.RestartCount++
	cs.LastTerminationState = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "OOMKilled",
		StartedAt: metav1.NewTime(now().Add(-time.Second)), FinishedAt: metav1.NewTime(now())}}
	require.NoError(t, c.Status().Update(ctx, pods[1]))
	for _, p := range pods {
		kubeletResizedTo(t, c, p, p.Generation+1)
	}
	rsr = kubetest.WaitRestored(t, c, ns, "web")
	rolled := kubetest.HistoryOf(rsr, v1alpha1.ActionRolledBack)
	require.Len(t, rolled, 1)
	assert.NotContains(t, rolled[0].Message, "canary")
	for _, p := range pods {
		var got corev1.Pod
		require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(p), &got))
		assert.Equal(t, "256Mi", got.Spec.Containers[0].Resources.Limits.Memory().String(), "pod %s restored", p.Name)
	}
}

// promote nudges the leader (a pod update) until the canary is promoted,
// reports the other pods' resizes as their kubelet would, and waits for
// the full watch.
func promote(t *testing.T, c client.Client, ns string, pods []*corev1.Pod) {
	t.Helper()
	n := 0
	kubetest.WaitRSR(t, c, ns, "web", func(rsr *v1alpha1.RightsizingRecommendation) bool {
		if ch := rsr.Status.Change; ch != nil && ch.Canary != nil && ch.Canary.PromotedAt != nil {
			return true
		}
		n++
		kubetest.Update(t, c, pods[2], func() { pods[2].Annotations = map[string]string{"nudge": fmt.Sprint(n)} })
		return false
	}, "the canary was never promoted")
	for _, p := range pods[1:] {
		kubetest.KubeletReports(t, c, p, "")
	}
	rsr := kubetest.WaitRSR(t, c, ns, "web", func(rsr *v1alpha1.RightsizingRecommendation) bool {
		return rsr.Status.Phase == v1alpha1.PhaseWatching && len(kubetest.HistoryOf(rsr, v1alpha1.ActionApplied)) == 2
	}, "the promoted change was never watched")
	applied := kubetest.HistoryOf(rsr, v1alpha1.ActionApplied)
	assert.Equal(t, v1alpha1.ReasonCanaryPromoted, applied[1].Reason)
	assert.Contains(t, applied[1].Message, "to every pod after canary pods web-h1-a (1 of 3) passed its watch")
	cond := kubetest.Condition(rsr, v1alpha1.ConditionApplied)
	require.NotNil(t, cond)
	assert.Equal(t, metav1.ConditionTrue, cond.Status)
	assert.Equal(t, applied[1].Message, cond.Message)
	for _, p := range pods {
		var got corev1.Pod
		require.NoError(t, c.Get(context.Background(), client.ObjectKeyFromObject(p), &got))
		assert.Equal(t, "192Mi", got.Spec.Containers[0].Resources.Requests.Memory().String(), "pod %s resized", p.Name)
	}
}

// TestCanaryResumesAfterFailover: leader a applies the change to the
// canary and stops; leader b, which takes over, knows the canary from
// status.change.canary alone. At the canary's end it promotes that canary:
// the other two pods are resized once, the canary is not chosen anew.
func TestCanaryResumesAfterFailover(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	ctx := context.Background()
	var offset atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	dep := kubetest.Web(t, c, ns, canaryPolicy(ns, 10*time.Minute))
	pods := runningPods(t, c, dep, "a", "b", "c")
	a, b := leadertest.Pair(t, ns, cluster.Config{Now: now}, cluster.Config{Now: now})
	require.NoError(t, c.Create(ctx, kubetest.Recommendation(ns, "web", "web", v1alpha1.StrategyInPlace, "250m", "192Mi")))
	before := waitCanary(t, c, ns, pods)

	leadertest.FailOver(t, a, b)
	assertNeverResized(t, c, pods[1:]...)
	offset.Store(int64(11 * time.Minute))
	promote(t, c, ns, pods)
	rsr := kubetest.GetRSR(t, c, ns, "web")
	assert.Equal(t, before.Status.Change.Canary.Pods, rsr.Status.Change.Canary.Pods)
	assert.Equal(t, before.Status.Change.Canary.Until, rsr.Status.Change.Canary.Until)
}

// TestCanaryIsNotOfferedWithRollout: a Rollout change under a policy with
// a canary applies whole, and its applied message says why (a
// Deployment's rollout has no partition to hold the rest back).
func TestCanaryIsNotOfferedWithRollout(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	leadertest.WatchedWeb(t, c, ns, canaryPolicy(ns, 10*time.Minute), cluster.Config{}, "250m", "256Mi")
	rsr := kubetest.GetRSR(t, c, ns, "web")
	assert.Nil(t, rsr.Status.Change.Canary)
	applied := kubetest.HistoryOf(rsr, v1alpha1.ActionApplied)
	require.Len(t, applied, 1)
	assert.Equal(t, string(v1alpha1.StrategyRollout), applied[0].Reason)
	assert.Contains(t, applied[0].Message, "no canary with strategy Rollout: the change applies whole")
}
