package e2e

// The child OOM scenario on both nodes: a container whose child process,
// not its PID 1, outgrows a lowered memory limit. What the kernel kills
// differs with the cgroup version, and the kubelet with it; Kerf must roll
// back either way (docs/kernel.md, "A child process's OOM kill").

import (
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/internal/scenario"
)

// TestChildOOMKillRollsBackWithoutARestart runs the child OOM scenario on
// the host node (cgroup v1). The kernel kills the child alone: the
// container keeps running, is not restarted, and the kubelet never
// reports OOMKilled. Only the agent's OOM sources see the kill
// (container_oom_events_total), and the leader rolls back on that alone.
func TestChildOOMKillRollsBackWithoutARestart(t *testing.T) {
	t.Parallel()
	in := cluster(t)
	e := env(t, in)
	e.Node = in.Cluster.NodeName
	ctx := t.Context()
	kills, err := scenario.NewKillLog()
	require.NoError(t, err, "a BPF tracer times the kernel's kill")
	defer kills.Close()
	e.Kills = kills
	r, err := e.ChildOOM(ctx, scenario.Options{})
	require.NoError(t, err)

	rolledBack(t, in, e, r, v1alpha1.HealthWatchOOMKills, v1alpha1.ResourceMemory)
	assert.Equal(t, 1, r.Before.Version, "read from cgroup v1 on the host node")
	assert.False(t, r.Child.OOMGroup, "v1 has no memory.oom.group")
	assert.True(t, slices.ContainsFunc(r.Timeline, func(m scenario.Mark) bool {
		return m.Who == "kernel" && strings.HasPrefix(m.What, "OOM kill of pid") && strings.Contains(m.What, "(kerf-child)")
	}), "the kernel killed the child process")
	assert.Equal(t, "signal: killed", r.Child.ChildExit, "the workload outlived its child and said how it ended")
	assert.False(t, r.Child.Restarted(), "the container did not restart: restartCount %d → %d", r.Child.RestartsBefore, r.Child.Restarts)
	assert.False(t, r.Child.OOMKilled, "the kubelet never reported OOMKilled")
	assert.GreaterOrEqual(t, r.Child.AgentOOMKills, 1.0, "the agent counted the kill: the leader's only signal")
	assert.EqualValues(t, 256*scenario.Mi, r.Before.MemoryBytes, "memory.limit_in_bytes before the change")
	assert.EqualValues(t, 96*scenario.Mi, r.Applied.MemoryBytes, "memory.limit_in_bytes once applied in place")
	assert.EqualValues(t, 256*scenario.Mi, r.Restored.MemoryBytes, "memory.limit_in_bytes after the rollback")
	assert.Contains(t, strings.Join(scenario.History(r.RSR, v1alpha1.ActionRolledBack)[0].Figures, ","), "oomKills")

	pods, err := e.RunningPods(ctx, r.Workload.Selector())
	require.NoError(t, err)
	require.Len(t, pods, 1)
	assert.Equal(t, r.Pod, pods[0].Name, "resized back in place, not recreated")
	for _, cs := range pods[0].Status.ContainerStatuses {
		assert.Zero(t, cs.RestartCount, "container %s", cs.Name)
		assert.Nil(t, cs.LastTerminationState.Terminated, "container %s never terminated", cs.Name)
	}
}

// TestV2NodeChildOOMKillsTheContainerGroup runs the child OOM scenario on
// the VM node (cgroup v2), whose kubelet runs with its defaults. There the
// kernel kills the whole container: kubelet 1.37 leaves
// singleProcessOOMKill unset, which means false on v2 (pkg/kubelet/
// kubelet.go; v1 forces true), and then asks the runtime for
// memory.oom.group=1 in every container's cgroup
// (kuberuntime_container_linux.go). The OOM killer picks the child, and
// memory.oom.group takes its parent, PID 1, with it: the container
// restarts, the kubelet reports OOMKilled, and the rollback is the same
// one as for a killed PID 1.
func TestV2NodeChildOOMKillsTheContainerGroup(t *testing.T) {
	t.Parallel()
	in := vmCluster(t)
	e := env(t, in)
	e.Node = in.Cluster.VMNode
	ctx := t.Context()
	r, err := e.ChildOOM(ctx, scenario.Options{})
	require.NoError(t, err)

	rolledBack(t, in, e, r, v1alpha1.HealthWatchOOMKills, v1alpha1.ResourceMemory)
	assert.Equal(t, 2, r.Before.Version, "read from cgroup v2 on the VM node")
	assert.True(t, r.Child.OOMGroup, "memory.oom.group 1, the kubelet's default on v2")
	assert.True(t, r.Child.Restarted(), "the container restarted: restartCount %d → %d", r.Child.RestartsBefore, r.Child.Restarts)
	assert.True(t, r.Child.OOMKilled, "the kubelet reported OOMKilled")
	assert.Empty(t, r.Child.ChildExit, "the workload died with its child: it never said how the child ended")
	assert.EqualValues(t, 256*scenario.Mi, r.Before.MemoryBytes, "memory.max before the change")
	assert.EqualValues(t, 96*scenario.Mi, r.Applied.MemoryBytes, "memory.max once applied in place")
	assert.EqualValues(t, 256*scenario.Mi, r.Restored.MemoryBytes, "memory.max after the rollback")
	assert.Contains(t, strings.Join(scenario.History(r.RSR, v1alpha1.ActionRolledBack)[0].Figures, ","), "oomKills")

	pods, err := e.RunningPods(ctx, r.Workload.Selector())
	require.NoError(t, err)
	require.Len(t, pods, 1)
	assert.Equal(t, in.Cluster.VMNode, pods[0].Spec.NodeName)
	assert.Equal(t, r.Pod, pods[0].Name, "the container restarted in its pod, not recreated")
	assert.Equal(t, "256Mi", pods[0].Spec.Containers[0].Resources.Limits.Memory().String())
}
