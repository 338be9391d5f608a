package signals

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/healthwatch"
	"github.com/kerf-dev/kerf/test/watchtest"
)

// agentSaw is an agent's container event about app of pod, seen at T0+at.
func agentSaw(pod corev1.Pod, restarts int32, term *healthwatch.Termination, at time.Duration) ContainerEvent {
	return ContainerEvent{PodUID: pod.UID, Container: "app", RestartCount: restarts, Terminated: term, At: watchtest.After(at)}
}

// run is a termination of run id, finished at T0+at.
func run(id, reason string, at time.Duration) *healthwatch.Termination {
	return &healthwatch.Termination{ContainerID: id, Reason: reason, ExitCode: 137, FinishedAt: watchtest.After(at)}
}

func TestAgentStatusesApplyingAnEventTwiceChangesNothing(t *testing.T) {
	pod := watchtest.NewPod("web-1", watchtest.MemDown)
	s := NewAgentStatuses(0)
	var signals []Signal
	s.Subscribe(func(sig Signal) { signals = append(signals, sig) })

	assert.True(t, s.Add(agentSaw(pod, 1, run("c1", "OOMKilled", time.Minute), time.Minute)))
	assert.False(t, s.Add(agentSaw(pod, 1, run("c1", "OOMKilled", time.Minute), time.Minute)), "a resent event")
	assert.False(t, s.Add(agentSaw(pod, 0, nil, 2*time.Minute)), "a lower restart count never lowers the view")
	got, ok := s.AgentStatus(pod.UID, "app")
	require.True(t, ok)
	assert.Equal(t, int32(1), got.RestartCount)
	assert.Len(t, got.Terminations, 1)
	assert.Equal(t, []Signal{{PodUID: pod.UID, Kind: SignalContainerEvent}}, signals, "only the event that changed something signals")

	// The same run seen with a finer finish time (the Pods API) and
	// without a container id counts once.
	finer := &healthwatch.Termination{Reason: "OOMKilled", FinishedAt: watchtest.After(time.Minute).Add(300 * time.Millisecond)}
	assert.False(t, s.Add(agentSaw(pod, 1, finer, 3*time.Minute)))

	_, ok = s.AgentStatus(pod.UID, "sidecar")
	assert.False(t, ok)
}

func TestAgentStatusesBoundTerminationsAndForgetIdleContainers(t *testing.T) {
	pod := watchtest.NewPod("web-1", watchtest.MemDown)
	other := watchtest.NewPod("web-2", watchtest.MemDown)
	s := NewAgentStatuses(time.Hour)
	for i := range MaxAgentTerminations + 4 {
		s.Add(agentSaw(pod, int32(i+1), run(string(rune('a'+i)), "Error", time.Duration(i)*time.Second), time.Minute))
	}
	got, _ := s.AgentStatus(pod.UID, "app")
	require.Len(t, got.Terminations, MaxAgentTerminations)
	assert.Equal(t, watchtest.After(4*time.Second), got.Terminations[0].FinishedAt, "the newest are kept, oldest first")

	s.Add(agentSaw(other, 1, nil, 2*time.Hour))
	_, ok := s.AgentStatus(pod.UID, "app")
	assert.False(t, ok, "no event for more than the retention: forgotten")
	assert.Equal(t, 1, s.Len())
}

// TestAgentViewMakesCountsArriveSoonerNeverTwice evaluates the restart and
// OOM rules with the agents' view of the container beside pod status: the
// agents' view alone breaches, and pod status catching up with the same
// restarts and runs leaves the counts where they were.
func TestAgentViewMakesCountsArriveSoonerNeverTwice(t *testing.T) {
	oom1 := run("containerd://c1", "OOMKilled", 5*time.Minute)
	oom2 := run("containerd://c2", "OOMKilled", 7*time.Minute)
	tests := []struct {
		name   string
		status []func(*corev1.Pod)
		agent  []ContainerEvent
		kernel []time.Duration
		want   []string
	}{
		{name: "restarts seen by the agent alone",
			agent: []ContainerEvent{{RestartCount: 3, At: watchtest.After(5 * time.Minute)}},
			want:  []string{"restarts 3 ≥ 3 (pod web-1 container app: 3 (agent, ahead of pod status))"}},
		{name: "pod status catching up counts the restarts once",
			status: []func(*corev1.Pod){watchtest.Restarts("app", 3)},
			agent:  []ContainerEvent{{RestartCount: 3, At: watchtest.After(5 * time.Minute)}},
			want:   []string{"restarts 3 ≥ 3 (pod web-1 container app: 3)"}},
		{name: "pod status behind the agent",
			status: []func(*corev1.Pod){watchtest.Restarts("app", 1)},
			agent:  []ContainerEvent{{RestartCount: 2, At: watchtest.After(5 * time.Minute)}},
			want:   []string{"restarts 2 < 3"}},
		{name: "pod status ahead of the agent",
			status: []func(*corev1.Pod){watchtest.Restarts("app", 3)},
			agent:  []ContainerEvent{{RestartCount: 1, At: watchtest.After(5 * time.Minute)}},
			want:   []string{"restarts 3 ≥ 3"}},
		{name: "an OOMKilled run seen by the agent alone",
			agent: []ContainerEvent{{RestartCount: 1, Terminated: oom1, At: watchtest.After(5 * time.Minute)}},
			want:  []string{"oomKills 1 ≥ 1 (pod web-1 container app: 1 (status, 1 seen by the agent ahead of pod status; no kernel data))"}},
		{name: "pod status showing the same run counts it once",
			status: []func(*corev1.Pod){watchtest.Restarts("app", 1), watchtest.LastTerminated("app", "OOMKilled", "containerd://c1", watchtest.After(5*time.Minute))},
			agent:  []ContainerEvent{{RestartCount: 1, Terminated: oom1, At: watchtest.After(5 * time.Minute)}},
			want:   []string{"oomKills 1 ≥ 1 (pod web-1 container app: 1 (status; no kernel data))", "restarts 1 < 3"}},
		{name: "runs pod status folded away still count",
			status: []func(*corev1.Pod){watchtest.Restarts("app", 2), watchtest.LastTerminated("app", "OOMKilled", "containerd://c2", watchtest.After(7*time.Minute))},
			agent: []ContainerEvent{{RestartCount: 1, Terminated: oom1, At: watchtest.After(5 * time.Minute)},
				{RestartCount: 2, Terminated: oom2, At: watchtest.After(7 * time.Minute)}},
			want: []string{"oomKills 2 ≥ 1"}},
		{name: "the kernel count and the agent's runs are not added",
			agent:  []ContainerEvent{{RestartCount: 1, Terminated: oom1, At: watchtest.After(5 * time.Minute)}},
			kernel: []time.Duration{5 * time.Minute},
			want:   []string{"oomKills 1 ≥ 1 (pod web-1 container app: 1 (kernel 1, status 1, 1 seen by the agent ahead of pod status))"}},
		{name: "a run that ended before T0 does not count",
			agent: []ContainerEvent{{RestartCount: 1, Terminated: run("containerd://c0", "OOMKilled", -time.Second), At: watchtest.After(time.Second)}},
			want:  []string{"oomKills 0 < 1"}},
		{name: "another reason is a restart, not an OOM kill",
			agent: []ContainerEvent{{RestartCount: 1, Terminated: run("containerd://c1", "Error", 5*time.Minute), At: watchtest.After(5 * time.Minute)}},
			want:  []string{"oomKills 0 < 1", "restarts 1 < 3"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := watchtest.NewPod("web-1", watchtest.BothDown, tt.status...)
			s := NewAgentStatuses(0)
			for _, ev := range tt.agent {
				ev.PodUID, ev.Container = pod.UID, "app"
				s.Add(ev)
			}
			in := healthwatch.Input{Change: watchtest.Change(v1alpha1.StrategyInPlace, watchtest.BothDown), Pods: []corev1.Pod{pod},
				RestartBaselines: healthwatch.RestartBaselines([]corev1.Pod{watchtest.NewPod("web-1", watchtest.Before)}), Statuses: s}
			if tt.kernel != nil {
				m := NewKernel()
				for _, d := range tt.kernel {
					m.AddOOMKill(pod.UID, "app", watchtest.After(d))
				}
				in.Kernel = m
			}
			v := healthwatch.Evaluate(watchtest.After(10*time.Minute), in)
			for _, w := range tt.want {
				assert.Contains(t, v.Message, w)
			}
		})
	}
}

// TestAgentRestartsOfANewPodCountInFull checks that a pod created after T0,
// which pod status does not list yet, counts the restarts the agent saw.
func TestAgentRestartsOfANewPodCountInFull(t *testing.T) {
	pod := watchtest.NewPod("web-2", watchtest.BothDown, watchtest.CreatedAt(watchtest.After(time.Minute)))
	pod.Status.ContainerStatuses = nil
	s := NewAgentStatuses(0)
	s.Add(agentSaw(pod, 3, run("containerd://c3", "Error", 4*time.Minute), 4*time.Minute))
	v := healthwatch.Evaluate(watchtest.After(5*time.Minute), healthwatch.Input{Change: watchtest.Change(v1alpha1.StrategyRollout, watchtest.BothDown), Pods: []corev1.Pod{pod}, Statuses: s})
	assert.Equal(t, healthwatch.StateBreached, v.State)
	assert.Equal(t, v1alpha1.HealthWatchRestarts, v.Reason)
	assert.Equal(t, []string{"restarts 3 ≥ 3"}, v.Figures)
}
