package rightsizing_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster"
	"github.com/kerf-dev/kerf/cluster/recommend"
	"github.com/kerf-dev/kerf/cluster/signals"
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/kubetest"
	"github.com/kerf-dev/kerf/test/leadertest"
)

// TestRecommenderWaitsForTheWatchSoTheOOMKillRollsBack is the demo's
// course (issue 29) on a real apiserver: the recommender lowers cpu and
// memory in place, a watch starts; the workload then uses more CPU, so the
// recommender would raise CPU; then the container is OOM-killed under the
// lowered memory. Before, the raise was a new change whose CPU-only watch
// replaced the first one, and the kill was never rolled back. Now the
// recommender asks for nothing new while the change is watched (it records
// what it would ask for once, as a WatchRunning refusal), and the kill
// rolls the memory back to the manifest's, exactly once.
func TestRecommenderWaitsForTheWatchSoTheOOMKillRollsBack(t *testing.T) {
	var sig *signals.Stores
	var pod *corev1.Pod
	c, ns, l := leadertest.RecommendedWeb(t, func(s *signals.Stores, p *corev1.Pod) { sig, pod = s, p })
	first, _ := kubetest.WaitRecommended(t, c, ns)
	lowered := first.Spec.Containers[0]
	require.Less(t, lowered.Limits.Memory.Value(), int64(256<<20), "the recommender lowers the memory")
	kubetest.KubeletReports(t, c, pod, "")
	watched := kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseWatching, "")
	require.Equal(t, first.Generation, watched.Generation)

	// The workload now uses 400m: the recommender would raise CPU.
	now := time.Now()
	for i := range 6 {
		sig.Usage.Add(signals.UsageSample{PodUID: pod.UID, Container: "app", At: now.Add(time.Duration(i+1) * time.Second),
			CPU: 150*time.Millisecond + time.Duration(i+1)*400*time.Millisecond, WorkingSet: 40 << 20, Peak: 40 << 20})
	}
	held := kubetest.WaitRSR(t, c, ns, "web", func(rsr *v1alpha1.RightsizingRecommendation) bool {
		return len(watchRunningRefusals(t, rsr)) > 0 && len(kubetest.HistoryOf(rsr, v1alpha1.ActionRefused)) > 0
	}, "the recommender never said it holds its CPU raise for the watch")
	f := watchRunningRefusals(t, held)[0]
	assert.Equal(t, v1alpha1.ResourceCPU, f.Resource)
	assert.Greater(t, f.Asked, f.Held, "it would raise CPU")
	assert.Equal(t, lowered.Requests.CPU.MilliValue(), f.Held, "held at the watched value")
	assert.Contains(t, f.Message, "is still watched")
	assert.Equal(t, first.Generation, held.Generation, "no new change while the first is watched")

	// More recommender passes (five a second, a recommendation a second)
	// record nothing more and change nothing.
	time.Sleep(2 * time.Second)
	got := kubetest.GetRSR(t, c, ns, "web")
	assert.Equal(t, first.Generation, got.Generation, "no new change while the first is watched")
	assert.Len(t, kubetest.HistoryOf(got, v1alpha1.ActionRefused), 1, "the hold is recorded once: %+v", got.Status.History)

	// The kill under the lowered memory rolls it back.
	kubetest.OOMKilled(t, c, pod, "OOMKilled")
	kubeletReportsAgain(t, c, pod)
	rsr := kubetest.WaitRSR(t, c, ns, "web", func(rsr *v1alpha1.RightsizingRecommendation) bool {
		return len(kubetest.HistoryOf(rsr, v1alpha1.ActionRolledBack)) > 0
	}, "the OOM kill was never rolled back")
	rb := kubetest.HistoryOf(rsr, v1alpha1.ActionRolledBack)
	require.Len(t, rb, 1, "exactly one rollback: %+v", rsr.Status.History)
	assert.Equal(t, v1alpha1.HealthWatchOOMKills, rb[0].Reason)
	assert.Equal(t, []v1alpha1.ResourceName{v1alpha1.ResourceMemory}, rb[0].Resources)
	require.NoError(t, c.Get(t.Context(), client.ObjectKeyFromObject(pod), pod))
	assert.Equal(t, "256Mi", pod.Spec.Containers[0].Resources.Limits.Memory().String(), "the memory is back")
	kubetest.Counts(t, l.Metrics.Actions.WithLabelValues("rolled_back", "OOMKills", "memory"), 1)

	// Only now the recommender asks again, from the restored values: the
	// memory it would lower is held by the kill and the cooldown.
	next := kubetest.WaitRSR(t, c, ns, "web", func(rsr *v1alpha1.RightsizingRecommendation) bool {
		return rsr.Generation > first.Generation
	}, "the recommender never recommended again after the rollback")
	assert.Greater(t, next.Spec.Containers[0].Requests.CPU.MilliValue(), lowered.Requests.CPU.MilliValue(), "the CPU raise")
	assert.GreaterOrEqual(t, next.Spec.Containers[0].Limits.Memory.Value(), int64(256<<20), "never below the memory the kill was restored to")
}

// TestAPersonsChangeWaitsForTheWatch shows the rule of docs/health.md, "A
// change while another is watched", for a recommendation a person edits
// while its change is watched: the new generation is held (phase
// Watching, reason WatchRunning, one blocked action), the running change
// stays watched as a whole, so an OOM kill under its memory rolls that
// back, and only then is the held generation planned, through the
// guardrails (here the memory cooldown the rollback started).
func TestAPersonsChangeWaitsForTheWatch(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	dep, l := leadertest.WatchedWeb(t, c, ns, kubetest.PolicyWith(ns, time.Hour, nil), cluster.Config{}, "250m", "128Mi")
	pod := kubetest.AdoptedPod(t, c, dep, "web-new-1")
	rsr := kubetest.GetRSR(t, c, ns, "web")

	// A person raises CPU and keeps the memory: on its own, a CPU-only
	// change.
	kubetest.Update(t, c, rsr, func() {
		rsr.Spec.Containers[0].Requests.CPU = kubetest.Q("300m")
		rsr.Spec.Containers[0].Limits.CPU = kubetest.Q("300m")
	})
	rsr = kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseWatching, v1alpha1.ReasonWatchRunning)
	assert.Contains(t, rsr.Status.Message, "waits for the watch of the change applied at")
	assert.Less(t, rsr.Status.ObservedGeneration, rsr.Generation, "the new generation is not acted on yet")
	assert.Equal(t, "250m", kubetest.TemplateResources(t, c, dep).Requests.Cpu().String(), "the held values are not applied")
	blocked := kubetest.HistoryOf(rsr, v1alpha1.ActionBlocked)
	require.Len(t, blocked, 1)
	assert.Equal(t, v1alpha1.ReasonWatchRunning, blocked[0].Reason)

	// The kill under the first change's memory is that change's harm.
	kubetest.OOMKilled(t, c, pod, "OOMKilled")
	// The phase is RolledBack only until the held generation is planned,
	// at once: the history keeps the rollback.
	rsr = kubetest.WaitRSR(t, c, ns, "web", func(rsr *v1alpha1.RightsizingRecommendation) bool {
		return len(kubetest.HistoryOf(rsr, v1alpha1.ActionRolledBack)) > 0
	}, "the OOM kill was never rolled back")
	rb := kubetest.HistoryOf(rsr, v1alpha1.ActionRolledBack)
	require.Len(t, rb, 1)
	assert.Equal(t, v1alpha1.HealthWatchOOMKills, rb[0].Reason)
	assert.Equal(t, []v1alpha1.ResourceName{v1alpha1.ResourceMemory}, rb[0].Resources)
	assert.Equal(t, "256Mi", kubetest.TemplateResources(t, c, dep).Requests.Memory().String(), "memory restored")
	kubetest.Counts(t, l.Metrics.Actions.WithLabelValues("rolled_back", "OOMKills", "memory"), 1)

	// Then the held generation: its 128Mi is a decrease in cooldown.
	rsr = kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseBlocked, v1alpha1.ReasonCooldown)
	assert.Equal(t, rsr.Generation, rsr.Status.ObservedGeneration)
	assert.Len(t, kubetest.HistoryOf(rsr, v1alpha1.ActionBlocked), 2, "WatchRunning once, then Cooldown: %+v", rsr.Status.History)
}

// watchRunningRefusals are the WatchRunning refusals of a recommendation's
// basis annotation.
func watchRunningRefusals(t *testing.T, rsr *v1alpha1.RightsizingRecommendation) []v1alpha1.RefusalBasis {
	t.Helper()
	var basis v1alpha1.RecommendationBasis
	require.NoError(t, json.Unmarshal([]byte(rsr.Annotations[v1alpha1.RecommendationBasisAnnotation]), &basis))
	var out []v1alpha1.RefusalBasis
	for _, cb := range basis.Containers {
		for _, f := range cb.Refusals {
			if recommend.Reason(f.Reason) == recommend.ReasonWatchRunning {
				out = append(out, f)
			}
		}
	}
	return out
}

// kubeletReportsAgain waits for a resize of pod after the one it runs
// (a rollback's) and reports the new values as running, as a kubelet
// would.
func kubeletReportsAgain(t *testing.T, c client.Client, pod *corev1.Pod) {
	t.Helper()
	ctx := t.Context()
	before := pod.Status.ObservedGeneration
	require.Eventually(t, func() bool {
		require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(pod), pod))
		return pod.Generation > before
	}, 20*time.Second, 50*time.Millisecond, "the pod was never resized back")
	pod.Status.ObservedGeneration = pod.Generation
	pod.Status.ContainerStatuses[0].Resources = pod.Spec.Containers[0].Resources.DeepCopy()
	require.NoError(t, c.Status().Update(ctx, pod))
}
