package cluster_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster"
	"github.com/kerf-dev/kerf/cluster/healthwatch"
	"github.com/kerf-dev/kerf/cluster/signals"
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/kubetest"
	"github.com/kerf-dev/kerf/test/leadertest"
)

// TestOOMBaselinesSurviveFailover: an InPlace memory change of a pod that
// ran at T0, whose container had been OOM-killed twice before (the
// kernel's count is cumulative). Leader a records that count, 2, in
// status.change.oomBaselines and stays Watching; leader b takes over with
// a store that holds only the count the agent sends it after three more
// kills (5, no OOM event): from a's baseline that is 3 kills since the
// change, and b rolls memory back. Without the recorded baseline b would
// take 5 for the count at T0 and count none.
func TestOOMBaselinesSurviveFailover(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	ctx := context.Background()
	srcA, srcB := signals.NewKernel(), signals.NewKernel()
	dep := kubetest.Web(t, c, ns, kubetest.PolicyWith(ns, time.Hour, nil))
	pod := kubetest.RunningPod(t, c, dep)
	a, b := leadertest.Pair(t, ns, cluster.Config{Signals: kubetest.KernelOnly(srcA)}, cluster.Config{Signals: kubetest.KernelOnly(srcB)})
	require.NoError(t, c.Create(ctx, kubetest.Recommendation(ns, "web", "web", v1alpha1.StrategyInPlace, "500m", "128Mi")))
	kubetest.KubeletReports(t, c, pod, "")
	kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseWatching, "")
	started := time.Now().Add(-time.Hour).Truncate(time.Second) // the instance that ran at T0
	sample := func(kills uint64) healthwatch.CounterSample {
		return healthwatch.CounterSample{PodUID: pod.UID, Container: "app", Started: started, At: time.Now(), Periods: 10,
			OOMKills: kills, HasOOMKills: true}
	}

	srcA.AddSamples(sample(2))
	rsr := kubetest.WaitRSR(t, c, ns, "web", func(rsr *v1alpha1.RightsizingRecommendation) bool {
		return len(rsr.Status.Change.OOMBaselines) > 0
	}, "a never recorded the OOM baselines")
	require.Len(t, rsr.Status.Change.OOMBaselines, 1)
	base := rsr.Status.Change.OOMBaselines[0]
	require.NotNil(t, base.StartedAt)
	assert.True(t, base.StartedAt.Time.Equal(started))
	assert.Equal(t, []any{pod.Name, string(pod.UID), "app", int64(2)}, []any{base.Pod, base.PodUID, base.Container, base.OOMKills})
	require.Equal(t, v1alpha1.PhaseWatching, rsr.Status.Phase, "kills before the change are no breach")

	leadertest.FailOver(t, a, b)
	srcB.AddSamples(sample(5))
	rsr = kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseRolledBack, v1alpha1.HealthWatchOOMKills)
	require.NotNil(t, rsr.Status.Breach)
	assert.Equal(t, []string{"oomKills 3 ≥ 1"}, rsr.Status.Breach.Figures, "from a's baseline")
	assert.Equal(t, []v1alpha1.ResourceName{"memory"}, rsr.Status.Breach.Resources)
}
