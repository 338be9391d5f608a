package recommender_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/healthwatch"
	"github.com/kerf-dev/kerf/cluster/recommend"
	"github.com/kerf-dev/kerf/cluster/signals"
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/kubetest"
	"github.com/kerf-dev/kerf/test/leadertest"
)

// recommendedWeb creates the Deployment web (500m, 256Mi) under a
// recommending policy, starts a leader whose recommender reads every
// 200 ms, runs an adopted pod and, after before (given the leader's
// stores), feeds the leader's usage store four readings one second apart
// of a container using 50m and 40Mi.
func recommendedWeb(t *testing.T, before func(*signals.Stores, *corev1.Pod)) (client.Client, string) {
	t.Helper()
	c, ns, _ := leadertest.RecommendedWeb(t, before)
	return c, ns
}

// TestRecommenderLowersWhatAnIdleWorkloadDoesNotUse checks that a
// workload under a policy with spec.recommend gets, from its usage
// readings alone, a recommendation lower than what it requests, marked as
// the recommender's.
func TestRecommenderLowersWhatAnIdleWorkloadDoesNotUse(t *testing.T) {
	c, ns := recommendedWeb(t, nil)
	rsr, basis := kubetest.WaitRecommended(t, c, ns)
	got := rsr.Spec.Containers[0]
	assert.Negative(t, got.Requests.CPU.Cmp(resource.MustParse("100m")), "CPU request %s for 50m of use", got.Requests.CPU)
	assert.Positive(t, got.Requests.CPU.Cmp(resource.MustParse("50m")), "CPU request %s keeps a margin over 50m", got.Requests.CPU)
	assert.Negative(t, got.Requests.Memory.Cmp(resource.MustParse("256Mi")), "memory request %s", got.Requests.Memory)
	assert.Equal(t, got.Requests.CPU.MilliValue(), got.Limits.CPU.MilliValue(), "a Guaranteed pod's limit follows its request")
	assert.Equal(t, got.Requests.Memory.Value(), got.Limits.Memory.Value(), "a Guaranteed pod's limit follows its request")
	for _, f := range basis.Containers[0].Refusals {
		assert.NotEqual(t, string(recommend.ReasonOOMKill), f.Reason, "no OOM kill, no OOM refusal: %s", f.Message)
	}
}

// TestRecommenderNeverLowersTheMemoryOfAnOOMKilledContainer checks the
// memory latch end to end: with an OOM kill of the container in the
// leader's kernel store, CPU still goes down but memory does not, and the
// refusal is recorded with its figures.
func TestRecommenderNeverLowersTheMemoryOfAnOOMKilledContainer(t *testing.T) {
	c, ns := recommendedWeb(t, func(sig *signals.Stores, pod *corev1.Pod) {
		sig.Kernel.AddOOMKill(pod.UID, "app", time.Now().Add(-time.Minute))
	})
	rsr, basis := kubetest.WaitRecommended(t, c, ns)
	got := rsr.Spec.Containers[0]
	assert.Negative(t, got.Requests.CPU.Cmp(resource.MustParse("500m")), "CPU is still lowered: %s", got.Requests.CPU)
	// The kill is at the limit (256Mi): at least max(256Mi+100Mi, 256Mi×1.2).
	assert.GreaterOrEqual(t, got.Requests.Memory.Value(), int64(356<<20), "memory request %s after an OOM kill", got.Requests.Memory)
	assert.GreaterOrEqual(t, got.Limits.Memory.Value(), got.Requests.Memory.Value())
	var oom *v1alpha1.RefusalBasis
	for i, f := range basis.Containers[0].Refusals {
		if recommend.Reason(f.Reason) == recommend.ReasonOOMKill && recommend.Resource(f.Resource) == recommend.Memory && recommend.Field(f.Field) == recommend.Request {
			oom = &basis.Containers[0].Refusals[i]
		}
	}
	require.NotNil(t, oom, "the OOM refusal is recorded: %+v", basis.Containers[0].Refusals)
	assert.Less(t, oom.Asked, int64(256<<20), "what the estimator asked for")
	assert.GreaterOrEqual(t, oom.Held, int64(356<<20), "what was recommended instead")
	assert.Equal(t, float64(256<<20), oom.Observed, "the peak at the kill")
	assert.NotNil(t, oom.At, "when the kill happened")
	assert.NotEmpty(t, oom.Message)
}

// TestRecommenderLeavesOthersRecommendationsAlone checks that a
// recommendation not made by the recommender is never overwritten.
func TestRecommenderLeavesOthersRecommendationsAlone(t *testing.T) {
	c, ns := recommendedWeb(t, func(_ *signals.Stores, pod *corev1.Pod) {
		// Made before the readings come, so before the recommender could.
		mine := kubetest.Recommendation(pod.Namespace, "web", "web", v1alpha1.StrategyRollout, "400m", "200Mi")
		require.NoError(t, controlplane.Get(t).Client.Create(context.Background(), mine))
	})
	// Ten of the recommender's passes, one of its recommendations a second.
	time.Sleep(2 * time.Second)
	got := kubetest.GetRSR(t, c, ns, "web")
	assert.Empty(t, got.Labels[v1alpha1.RecommendedByLabel])
	assert.Empty(t, got.Annotations[v1alpha1.RecommendationBasisAnnotation])
	assert.Equal(t, v1alpha1.StrategyRollout, got.Spec.Strategy)
	assert.Equal(t, "400m", got.Spec.Containers[0].Requests.CPU.String())
	assert.Equal(t, "200Mi", got.Spec.Containers[0].Requests.Memory.String())
}

// TestRecommenderNeverLowersTheCPUOfAThrottledContainer checks the CPU
// latch end to end: with the container throttled in 60 % of its periods
// (the policy's throttlingRatio is 0.25) in the leader's kernel store, CPU
// is not lowered, the refusal is recorded, and memory still goes down.
func TestRecommenderNeverLowersTheCPUOfAThrottledContainer(t *testing.T) {
	c, ns := recommendedWeb(t, func(sig *signals.Stores, pod *corev1.Pod) {
		now := time.Now()
		sig.Kernel.AddSamples(
			healthwatch.CounterSample{PodUID: pod.UID, Container: "app", Started: now.Add(-time.Minute), At: now.Add(-2 * time.Second), Periods: 100},
			healthwatch.CounterSample{PodUID: pod.UID, Container: "app", Started: now.Add(-time.Minute), At: now, Periods: 200, Throttled: 60})
	})
	rsr, basis := kubetest.WaitRecommended(t, c, ns)
	got := rsr.Spec.Containers[0]
	assert.Equal(t, int64(500), got.Requests.CPU.MilliValue(), "CPU request %s of a throttled container", got.Requests.CPU)
	assert.Equal(t, int64(500), got.Limits.CPU.MilliValue(), "CPU limit %s of a throttled container", got.Limits.CPU)
	assert.Negative(t, got.Requests.Memory.Cmp(resource.MustParse("256Mi")), "memory is still lowered: %s", got.Requests.Memory)
	var throttled *v1alpha1.RefusalBasis
	for i, f := range basis.Containers[0].Refusals {
		if recommend.Reason(f.Reason) == recommend.ReasonThrottled && recommend.Resource(f.Resource) == recommend.CPU && recommend.Field(f.Field) == recommend.Request {
			throttled = &basis.Containers[0].Refusals[i]
		}
	}
	require.NotNil(t, throttled, "the throttling refusal is recorded: %+v", basis.Containers[0].Refusals)
	assert.InDelta(t, 0.6, throttled.Observed, 1e-6, "the throttling ratio (kept as a float32)")
	assert.Equal(t, 0.25, throttled.Threshold, "the policy's throttlingRatio")
	assert.Less(t, throttled.Asked, int64(500), "what the estimator asked for")
}

// TestRecommenderForgetsAWorkloadThatIsGone checks that the history is
// bounded by the workloads that exist: once the Deployment and its pod are
// deleted, the recommender keeps nothing of them
// (kerf_recommender_containers).
func TestRecommenderForgetsAWorkloadThatIsGone(t *testing.T) {
	c, ns, l := leadertest.RecommendedWeb(t, nil)
	kubetest.WaitRecommended(t, c, ns)
	tracked := func() float64 {
		mfs, err := l.Registry().Gather()
		require.NoError(t, err)
		for _, mf := range mfs {
			if mf.GetName() == "kerf_recommender_containers" {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		return -1
	}
	// The pass sets the gauge once its recommendations are written: the
	// recommendation can be seen before that.
	require.Eventually(t, func() bool { return tracked() == 1 }, 15*time.Second, 50*time.Millisecond,
		"the one container of web: %v", tracked())
	ctx := context.Background()
	require.NoError(t, c.Delete(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"}}))
	require.NoError(t, c.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-1"}}, client.GracePeriodSeconds(0)))
	require.Eventually(t, func() bool { return tracked() == 0 }, 15*time.Second, 50*time.Millisecond,
		"the recommender still keeps the history of a deleted workload")
}

// TestRecommenderTakesOOMKillsFromThePodStatus checks that an OOM kill the
// kubelet reports (lastState.terminated.reason OOMKilled), with nothing in
// the kernel store, latches memory the same way.
func TestRecommenderTakesOOMKillsFromThePodStatus(t *testing.T) {
	c, ns := recommendedWeb(t, func(_ *signals.Stores, pod *corev1.Pod) {
		kubetest.OOMKilled(t, controlplane.Get(t).Client, pod, "OOMKilled")
	})
	rsr, basis := kubetest.WaitRecommended(t, c, ns)
	got := rsr.Spec.Containers[0]
	assert.GreaterOrEqual(t, got.Requests.Memory.Value(), int64(356<<20), "memory request %s after an OOM kill", got.Requests.Memory)
	var reasons []recommend.Reason
	for _, f := range basis.Containers[0].Refusals {
		reasons = append(reasons, recommend.Reason(f.Reason))
	}
	assert.Contains(t, reasons, recommend.ReasonOOMKill)
}

// TestRecommenderRaisesItsRecommendationWhenTheContainerIsThrottled checks
// the update path: a recommendation the recommender made is patched when a
// latch starts to hold, here CPU back to the manifest's 500m once the
// container is throttled, with the refusal recorded.
func TestRecommenderRaisesItsRecommendationWhenTheContainerIsThrottled(t *testing.T) {
	var sig *signals.Stores
	var pod *corev1.Pod
	// Paused, so the first recommendation is not applied: the pod keeps
	// the manifest's 500m for the latch to hold (an applied change would
	// be watched, and the recommender asks for nothing new meanwhile:
	// TestRecommenderWaitsForTheWatchSoTheOOMKillRollsBack).
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	p := kubetest.RecommendingPolicy(ns)
	p.Spec.Guardrails.Paused = true
	leadertest.RecommendedWebUnder(t, c, ns, p, func(s *signals.Stores, p *corev1.Pod) { sig, pod = s, p })
	first, _ := kubetest.WaitRecommended(t, c, ns)
	require.Less(t, first.Spec.Containers[0].Requests.CPU.MilliValue(), int64(500))

	started := time.Now().Add(-time.Minute)
	sig.Kernel.AddSamples(healthwatch.CounterSample{PodUID: pod.UID, Container: "app", Started: started, At: time.Now(), Periods: 100})
	time.Sleep(500 * time.Millisecond)
	sig.Kernel.AddSamples(healthwatch.CounterSample{PodUID: pod.UID, Container: "app", Started: started, At: time.Now(), Periods: 200, Throttled: 60})

	var got *v1alpha1.RightsizingRecommendation
	require.Eventually(t, func() bool {
		got = kubetest.GetRSR(t, c, ns, "web")
		return got.Spec.Containers[0].Requests.CPU.MilliValue() == 500
	}, 15*time.Second, 50*time.Millisecond, "the recommendation still lowers the CPU of a throttled container")
	assert.Equal(t, v1alpha1.RecommendedByKerf, got.Labels[v1alpha1.RecommendedByLabel])
	assert.Equal(t, first.Spec.Containers[0].Requests.Memory.Value(), got.Spec.Containers[0].Requests.Memory.Value(), "memory as before")
	var basis v1alpha1.RecommendationBasis
	require.NoError(t, json.Unmarshal([]byte(got.Annotations[v1alpha1.RecommendationBasisAnnotation]), &basis))
	var reasons []recommend.Reason
	for _, f := range basis.Containers[0].Refusals {
		reasons = append(reasons, recommend.Reason(f.Reason))
	}
	assert.Contains(t, reasons, recommend.ReasonThrottled)
}

// TestRecommenderAnswersAnOOMKillAtOnce checks that an OOM kill makes the
// workload's recommendation due at once, not at its next interval (an
// hour here): each kill waited for is a restart. The policy is paused,
// so no change is watched and the recommender may write.
func TestRecommenderAnswersAnOOMKillAtOnce(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	p := kubetest.RecommendingPolicy(ns)
	p.Spec.Guardrails.Paused = true
	p.Spec.Recommend.Interval = &metav1.Duration{Duration: time.Hour}
	var sig *signals.Stores
	var pod *corev1.Pod
	leadertest.RecommendedWebUnder(t, c, ns, p, func(s *signals.Stores, p *corev1.Pod) { sig, pod = s, p })
	rsr, _ := kubetest.WaitRecommended(t, c, ns)
	lowered := rsr.Spec.Containers[0].Requests.Memory.Value()
	require.Less(t, lowered, int64(256<<20), "the first recommendation lowers the memory")

	sig.Kernel.AddOOMKill(pod.UID, "app", time.Now())
	require.Eventually(t, func() bool {
		got := kubetest.GetRSR(t, c, ns, "web").Spec.Containers[0]
		return got.Requests.Memory.Value() >= 256<<20
	}, 15*time.Second, 50*time.Millisecond, "the kill is answered within the hour's interval: memory back to at least the manifest's 256Mi")
}
