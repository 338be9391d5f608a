package cluster_test

import (
	"sync/atomic"
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

// TestThrottlingWindowSurvivesFailover fails the leader over at T0+3m,
// during a throttling window: leader a saw the counters at the window's
// start (T0+2m) and records them in status.change.throttlingBaselines;
// leader b, whose store holds only what the agents sent it after T0+3m,
// continues the window from them. Without the baselines b would start the
// window at its own first sample: 120 periods, too few to evaluate, and no
// rollback; with them the window holds 320 periods, 150 throttled (0.46 ≥
// 0.25), and b rolls cpu back.
func TestThrottlingWindowSurvivesFailover(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	var offset atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	srcA, srcB := signals.NewKernel(), signals.NewKernel()
	dep, a := leadertest.WatchedWeb(t, c, ns, kubetest.PolicyWith(ns, time.Hour, nil), cluster.Config{Now: now, Signals: kubetest.KernelOnly(srcA), Throttling: srcA}, "250m", "256Mi")
	b := leadertest.StartReplica(t, ns, "b", cluster.Config{Now: now, Signals: kubetest.KernelOnly(srcB), Throttling: srcB})
	t0 := kubetest.GetRSR(t, c, ns, "web").Status.Change.AppliedAt.Time
	pod := kubetest.AdoptedPod(t, c, dep, "web-new-1")
	time.Sleep(200 * time.Millisecond) // the pod reaches both caches

	// a, at T0+2m40s: the window opened with 100 periods, 10 throttled;
	// 150 periods since are too few to evaluate.
	w := t0.Add(healthwatch.ThrottlingDelay)
	offset.Store(int64(throttlingFailoverAt - 20*time.Second))
	sample := func(at time.Duration, periods, throttled uint64) healthwatch.CounterSample {
		return healthwatch.CounterSample{PodUID: pod.UID, Container: "app", Started: t0, At: t0.Add(at), Periods: periods, Throttled: throttled}
	}
	srcA.AddSamples(sample(healthwatch.ThrottlingDelay-time.Second, 100, 10), sample(healthwatch.ThrottlingDelay+30*time.Second, 250, 100))
	rsr := kubetest.WaitRSR(t, c, ns, "web", func(rsr *v1alpha1.RightsizingRecommendation) bool {
		return len(rsr.Status.Change.ThrottlingBaselines) > 0
	}, "a never recorded the throttling baselines")
	require.Len(t, rsr.Status.Change.ThrottlingBaselines, 1)
	base := rsr.Status.Change.ThrottlingBaselines[0]
	assert.Equal(t, v1alpha1.ThrottlingBaseline{Pod: pod.Name, PodUID: string(pod.UID), Container: "app", Periods: 100, Throttled: 10,
		At: base.At}, base)
	assert.False(t, base.At.After(w), "baseline at %s, want the sample at or before T0+2m (%s)", base.At, w)
	require.Equal(t, v1alpha1.PhaseWatching, rsr.Status.Phase, "a must not decide on 150 periods")

	// Failover at T0+3m: b takes over with a store that starts now.
	offset.Store(int64(throttlingFailoverAt))
	leadertest.FailOver(t, a, b)
	srcB.AddSamples(sample(throttlingFailoverAt-time.Second, 300, 150), sample(throttlingFailoverAt+5*time.Second, 420, 160))
	offset.Store(int64(throttlingFailoverAt + 10*time.Second))
	srcB.AddSamples(sample(throttlingFailoverAt+6*time.Second, 420, 160))

	rsr = kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseRolledBack, v1alpha1.HealthWatchThrottling)
	require.NotNil(t, rsr.Status.Breach)
	require.NotEmpty(t, rsr.Status.Breach.Figures)
	assert.Contains(t, rsr.Status.Breach.Figures[0], "throttlingRatio 0.46 ≥ 0.25 (container app, 320 periods)",
		"b's window starts at T0+2m from a's baseline, not at its own first sample")
	rsr = kubetest.WaitRestored(t, c, ns, "web")
	assert.Equal(t, []v1alpha1.ResourceName{"cpu"}, rsr.Status.Breach.Resources)
}

// throttlingFailoverAt is when TestThrottlingWindowSurvivesFailover fails
// the leader over: T0+3m, a minute into the throttling window.
const throttlingFailoverAt = 3 * time.Minute
