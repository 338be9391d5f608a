package cluster_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster"
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/kubetest"
	"github.com/kerf-dev/kerf/test/leadertest"
)

// TestTheLeaderExportsWhatItsChangesSavedPerNamespace: web (500m, 256Mi)
// gets 250m and 128Mi, an OOM kill rolls the memory back, and the
// leader's savings metrics say so for the namespace: the manifest's
// requests, those in force (250m, 256Mi), those recommended, what was
// saved, one rollback and its one OOM kill. A replica that does not lead
// exports none.
func TestTheLeaderExportsWhatItsChangesSavedPerNamespace(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	ctx := context.Background()
	dep := kubetest.Web(t, c, ns, kubetest.PolicyWith(ns, time.Hour, func(g *v1alpha1.RollbackGuardrails) { g.Cooldown = &metav1.Duration{} }))
	require.NoError(t, c.Create(ctx, kubetest.Recommendation(ns, "web", "web", v1alpha1.StrategyRollout, "250m", "128Mi")))
	a, b := leadertest.Pair(t, ns, cluster.Config{}, cluster.Config{})
	kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseWatching, "")
	kubetest.OOMKilled(t, c, kubetest.AdoptedPod(t, c, dep, "web-new-1"), "OOMKilled")
	rsr := kubetest.WaitRestored(t, c, ns, "web")
	require.Equal(t, []v1alpha1.ResourceName{v1alpha1.ResourceMemory}, rsr.Status.Breach.Resources, "an OOM kill restores memory only")

	leader, standby := a, b
	if !a.Leading() {
		leader, standby = b, a
	}
	metric := func(name string, labels ...string) float64 {
		return leadertest.MetricValue(t, leader, name, append([]string{"namespace", ns}, labels...)...)
	}
	require.Eventually(t, func() bool { return metric("kerf_savings_rollbacks") == 1 }, 30*time.Second, 50*time.Millisecond,
		"the rollback is counted once the cache has the restored status")
	for _, tc := range []struct {
		values   string
		cpu, mem float64
	}{
		{"manifest", 0.5, 256 << 20},
		{"in_force", 0.25, 256 << 20},
		{"recommended", 0.25, 128 << 20},
		{"saved", 0.25, 0},
	} {
		assert.Equal(t, tc.cpu, metric("kerf_savings_cpu_cores", "values", tc.values), tc.values)
		assert.Equal(t, tc.mem, metric("kerf_savings_memory_bytes", "values", tc.values), tc.values)
	}
	assert.Equal(t, 1.0, metric("kerf_savings_oom_kills"))
	assert.Equal(t, 1.0, metric("kerf_savings_workloads"))
	assert.Equal(t, 0.0, metric("kerf_savings_unrecorded_requests"))
	assert.Equal(t, -1.0, leadertest.MetricValue(t, standby, "kerf_savings_workloads", "namespace", ns), "the standby exports none")
}
