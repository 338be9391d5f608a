package e2e

// The scenarios on the sandbox's VM node: a QEMU guest with a cgroup v2
// kernel, tainted so that only pods that tolerate it run there. Its pods
// start in 5-30 s under emulation; the scenarios wait minutes for them
// (scenario.VMNodeGrace) and these tests assert no durations.

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/internal/scenario"
)

// vmCluster returns the sandbox with Kerf installed, skipping the test when
// the sandbox has no VM node.
func vmCluster(t *testing.T) *scenario.Installed {
	t.Helper()
	in := cluster(t)
	if in.Cluster.VMNode == "" {
		t.Skip("the sandbox has no VM node (cgroup v2): the e2e setup did not start one (scenario.InstallOptions.VMNode)")
	}
	return in
}

// TestV2NodeOOMInPlace runs the OOM scenario on a workload pinned to the
// VM node: the memory decrease is resized in place into cgroup v2's
// memory.max, the kill is seen by that node's agent and kubelet, and the
// rollback puts the old memory.max back in the same pod.
func TestV2NodeOOMInPlace(t *testing.T) {
	t.Parallel()
	in := vmCluster(t)
	e := env(t, in)
	e.Node = in.Cluster.VMNode
	ctx := t.Context()
	console, err := in.VMConsole()
	require.NoError(t, err, "the VM's console times the kernel's kill")
	defer console.Close()
	e.Console = console
	r, err := e.OOM(ctx, scenario.Options{})
	require.NoError(t, err)
	require.True(t, slices.ContainsFunc(r.Timeline, func(m scenario.Mark) bool { return m.Who == "kernel" && strings.HasPrefix(m.What, "OOM kill of pid") }),
		"the timeline has the kernel's kill, from the VM's console")
	assert.False(t, r.RolledBack.Before(r.Signal), "rolled back after the kill")

	rolledBack(t, in, e, r, v1alpha1.HealthWatchOOMKills, v1alpha1.ResourceMemory)
	assert.Equal(t, 2, r.Before.Version, "read from cgroup v2 on the VM node")
	assert.EqualValues(t, 256*scenario.Mi, r.Before.MemoryBytes, "memory.max before the change")
	assert.EqualValues(t, 96*scenario.Mi, r.Applied.MemoryBytes, "memory.max once applied in place")
	assert.EqualValues(t, 256*scenario.Mi, r.Restored.MemoryBytes, "memory.max after the rollback")
	assert.EqualValues(t, 500, r.Before.CPUMillis(), "cpu.max of the 500m limit")
	assert.Equal(t, r.Before.CPUQuotaMicros, r.Restored.CPUQuotaMicros, "CPU untouched")
	assert.Contains(t, strings.Join(scenario.History(r.RSR, v1alpha1.ActionRolledBack)[0].Figures, ","), "oomKills")

	pods, err := e.RunningPods(ctx, r.Workload.Selector())
	require.NoError(t, err)
	require.Len(t, pods, 1)
	assert.Equal(t, in.Cluster.VMNode, pods[0].Spec.NodeName)
	assert.Equal(t, r.Pod, pods[0].Name, "resized back in place, not recreated")
	assert.Equal(t, "256Mi", pods[0].Spec.Containers[0].Resources.Limits.Memory().String())
}

// TestTwoNodesRollBackOnce: one workload, a pod on each node, the memory
// decrease resized into both, and only the VM node's pod OOM-killed. The
// leader rolls the workload back once; both pods get the old limit back in
// place (each read by its own node's reader: v1 files on the host, the
// workload's GET /limits on the VM), and the host node's pod is neither
// restarted nor recreated.
func TestTwoNodesRollBackOnce(t *testing.T) {
	t.Parallel()
	in := vmCluster(t)
	e := env(t, in)
	r, err := e.TwoNodes(t.Context(), scenario.Options{})
	require.NoError(t, err)

	// Exactly one rolled_back action, one RolledBack Event on the
	// recommendation and on the Deployment.
	rolledBack(t, in, e, r, v1alpha1.HealthWatchOOMKills, v1alpha1.ResourceMemory)
	assert.EqualValues(t, 256*scenario.Mi, r.Before.MemoryBytes, "the VM node's pod before the change")
	assert.EqualValues(t, 96*scenario.Mi, r.Applied.MemoryBytes, "the VM node's pod once applied in place")

	require.Len(t, r.Replicas, 2, "%+v", r.Replicas)
	for _, p := range r.Replicas {
		assert.EqualValues(t, 256*scenario.Mi, p.Limits.MemoryBytes, "pod %s on %s: %s after the rollback", p.Pod, p.Node, p.Limits.MemoryFile())
		switch p.Pod {
		case r.Pod:
			assert.True(t, p.VM, "the OOM-killed pod runs on the VM node")
			assert.Equal(t, in.Cluster.VMNode, p.Node)
			assert.Equal(t, 2, p.Limits.Version)
			assert.GreaterOrEqual(t, p.Restarts, int32(1), "OOM-killed, restarted in its pod")
		case r.Bystander:
			assert.False(t, p.VM)
			assert.Equal(t, in.Cluster.NodeName, p.Node)
			assert.Equal(t, 1, p.Limits.Version)
			assert.Zero(t, p.Restarts, "the host node's pod was not restarted")
		default:
			t.Errorf("pod %s on %s was not there before the change: a pod was recreated (had %s and %s)", p.Pod, p.Node, r.Pod, r.Bystander)
		}
	}
}

// TestV2NodeDeferredOOMKill runs the Deferred scenario on the VM node: the
// replacement pod starts with the webhook's memory.max, is OOM-killed, and
// is resized back in place.
func TestV2NodeDeferredOOMKill(t *testing.T) {
	t.Parallel()
	in := vmCluster(t)
	e := env(t, in)
	e.Node = in.Cluster.VMNode
	r, err := e.OOM(t.Context(), scenario.Options{Deferred: true})
	require.NoError(t, err)

	rolledBack(t, in, e, r, v1alpha1.HealthWatchOOMKills, v1alpha1.ResourceMemory)
	assert.Equal(t, 2, r.Applied.Version, "read from cgroup v2 on the VM node")
	assert.EqualValues(t, 256*scenario.Mi, r.Before.MemoryBytes, "memory.max before the change")
	assert.EqualValues(t, 96*scenario.Mi, r.Applied.MemoryBytes, "memory.max of the pod that started after the change")
	assert.EqualValues(t, 256*scenario.Mi, r.Restored.MemoryBytes, "memory.max after the rollback")
	assert.Equal(t, v1alpha1.StrategyDeferred, r.RSR.Status.Change.Strategy)
	pods, err := e.RunningPods(t.Context(), r.Workload.Selector())
	require.NoError(t, err)
	require.Len(t, pods, 1)
	assert.Equal(t, in.Cluster.VMNode, pods[0].Spec.NodeName)
	assert.Equal(t, r.Pod, pods[0].Name, "resized back in place, not recreated")
}

// TestV2NodeThrottlingAtTheRealDefaults runs the throttling rule as shipped
// on the VM node: cpu.max drops to 100m under a 400-millicore burn, the
// agent reads throttled periods from cgroup v2's cpu.stat (nr_periods,
// nr_throttled, throttled_usec), and two minutes and 300 periods after the
// change the leader puts 1 core back.
func TestV2NodeThrottlingAtTheRealDefaults(t *testing.T) {
	t.Parallel()
	in := vmCluster(t)
	e := env(t, in)
	e.Node = in.Cluster.VMNode
	r, err := e.Throttling(t.Context(), scenario.Options{})
	require.NoError(t, err)

	rolledBack(t, in, e, r, v1alpha1.HealthWatchThrottling, v1alpha1.ResourceCPU)
	assert.Equal(t, 2, r.Applied.Version, "read from cgroup v2 on the VM node")
	assert.EqualValues(t, 1000, r.Before.CPUMillis(), "cpu.max before: 1 core")
	assert.EqualValues(t, 100, r.Applied.CPUMillis(), "cpu.max once applied: 100m")
	assert.EqualValues(t, 1000, r.Restored.CPUMillis(), "cpu.max after the rollback")
	assert.Equal(t, r.Before.MemoryBytes, r.Restored.MemoryBytes, "memory untouched")
	rb := scenario.History(r.RSR, v1alpha1.ActionRolledBack)[0]
	assert.GreaterOrEqual(t, rb.Time.Sub(r.RSR.Status.Change.AppliedAt.Time), 2*time.Minute)
	assert.Contains(t, strings.Join(rb.Figures, ","), "throttling")
}

// TestV2NodeRestartsRollBackByRollout runs the restarts scenario on the VM
// node: a rollout raises both requests (cpu.weight goes up with the CPU
// request), the new pod crashes three times, and every touched resource
// and the HPA target are rolled back.
func TestV2NodeRestartsRollBackByRollout(t *testing.T) {
	t.Parallel()
	in := vmCluster(t)
	e := env(t, in)
	e.Node = in.Cluster.VMNode
	r, err := e.Restarts(t.Context(), scenario.Options{HPA: true})
	require.NoError(t, err)

	rolledBack(t, in, e, r, v1alpha1.HealthWatchRestarts, v1alpha1.ResourceCPU, v1alpha1.ResourceMemory)
	assert.Equal(t, 2, r.Applied.Version, "read from cgroup v2 on the VM node")
	// runc converts the kubelet's shares to cpu.weight; its formula
	// changed between runc versions, so only the order is asserted.
	assert.Greater(t, r.Applied.CPUWeight, r.Before.CPUWeight, "cpu.weight of a 100m request above a 50m one's")
	assert.Equal(t, r.Before.CPUWeight, r.Restored.CPUWeight, "cpu.weight after the rollback")
	assert.Equal(t, [3]int32{60, 30, 60}, r.HPATarget, "HPA CPU utilization target: before, applied, rolled back")
}

// TestV2NodeAgentReadsItsNodesCgroups checks the agent on the VM node as a
// user would on a cgroup v2 node: ready, its layout found (no
// kerf_agent_layout_problem), the BPF OOM source in use, pods discovered
// through the kubelet's Pods API, no read errors, CPU usage read for a pod
// there, and its stream to the leader open. In its container it sees
// /sys/fs/cgroup from its own cgroup namespace (docs/kernel.md).
func TestV2NodeAgentReadsItsNodesCgroups(t *testing.T) {
	t.Parallel()
	in := vmCluster(t)
	e := env(t, in)
	e.Node = in.Cluster.VMNode
	ctx := t.Context()
	w := scenario.Workload{Name: "v2-agent", CPURequest: "10m", CPULimit: "200m", MemoryRequest: "16Mi", MemoryLimit: "64Mi",
		Args: []string{"--burn-millicores=50"}}
	pod, err := e.Deploy(ctx, w)
	require.NoError(t, err)
	require.Equal(t, in.Cluster.VMNode, pod.Spec.NodeName)

	agent, err := e.AgentPod(ctx, in.Cluster.VMNode)
	require.NoError(t, err)
	labels := map[string]string{"namespace": e.Namespace, "pod": pod.Name, "container": scenario.Container}
	var m map[string][]scenario.Series
	require.NoError(t, scenario.Poll(ctx, scenario.VMNodeGrace, time.Second, "the VM node's agent to read the pod's CPU", func(ctx context.Context) (bool, error) {
		m, err = e.AgentMetricsOn(ctx, in.Cluster.VMNode)
		return err == nil && scenario.Sum(m, "container_cpu_usage_seconds_total", labels) > 0, nil
	}), "agent %s: %v", agent.Name, err)
	assert.Zero(t, scenario.Sum(m, "kerf_agent_layout_problem", nil), "no layout problem on cgroup v2")
	assert.Zero(t, scenario.Sum(m, "kerf_agent_read_errors_total", nil))
	assert.Equal(t, 1.0, scenario.Sum(m, "kerf_agent_oom_source", map[string]string{"source": "bpf"}), "the BPF OOM source on the 6.1 kernel")
	assert.Equal(t, 1.0, scenario.Sum(m, "kerf_agent_discovery", map[string]string{"source": "kubelet"}), "pods from the kubelet's Pods API")
	assert.Equal(t, 1.0, scenario.Sum(m, "kerf_agent_stream_state", map[string]string{"state": "connected"}))
	assert.True(t, slices.ContainsFunc(agent.Status.Conditions, func(c corev1.PodCondition) bool {
		return c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue
	}), "the agent is Ready (its /readyz checks the layout)")
}
