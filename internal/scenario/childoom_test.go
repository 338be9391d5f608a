package scenario

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestObserveKubeletRecordsRestartsAndOOMKilledAfterTheChange(t *testing.T) {
	changed := time.Date(2025, 1, 1, 12, 0, 0, 500e6, time.UTC)
	terminated := func(reason string, at time.Time) *corev1.ContainerStateTerminated {
		return &corev1.ContainerStateTerminated{Reason: reason, ExitCode: 137, FinishedAt: metav1.NewTime(at)}
	}
	tests := []struct {
		name      string
		status    corev1.ContainerStatus
		restarted bool
		oomKilled bool
	}{
		{"running, never restarted (v1: the child died alone)",
			corev1.ContainerStatus{Name: Container, RestartCount: 0}, false, false},
		{"restarted after an OOM kill (v2: the group died)",
			corev1.ContainerStatus{Name: Container, RestartCount: 1, LastTerminationState: corev1.ContainerState{Terminated: terminated("OOMKilled", changed.Add(time.Minute))}}, true, true},
		{"terminated OOMKilled, not restarted yet",
			corev1.ContainerStatus{Name: Container, State: corev1.ContainerState{Terminated: terminated("OOMKilled", changed.Add(time.Minute))}}, false, true},
		{"OOMKilled in the change's own second (status times are whole seconds)",
			corev1.ContainerStatus{Name: Container, RestartCount: 1, LastTerminationState: corev1.ContainerState{Terminated: terminated("OOMKilled", changed.Truncate(time.Second))}}, true, true},
		{"OOMKilled before the change",
			corev1.ContainerStatus{Name: Container, RestartCount: 1, LastTerminationState: corev1.ContainerState{Terminated: terminated("OOMKilled", changed.Add(-time.Minute))}}, true, false},
		{"restarted for another reason",
			corev1.ContainerStatus{Name: Container, RestartCount: 1, LastTerminationState: corev1.ContainerState{Terminated: terminated("Error", changed.Add(time.Minute))}}, true, false},
		{"another container",
			corev1.ContainerStatus{Name: "sidecar", RestartCount: 3, LastTerminationState: corev1.ContainerState{Terminated: terminated("OOMKilled", changed.Add(time.Minute))}}, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cw := &childWatch{changed: changed}
			p := &corev1.Pod{Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{tt.status}}}
			cw.observeKubelet(p)
			cw.observeKubelet(p)
			r := &Result{}
			cw.into(r)
			assert.Equal(t, tt.restarted, r.Child.Restarted())
			assert.Equal(t, tt.oomKilled, r.Child.OOMKilled)
			want := 0
			if tt.restarted {
				want++
			}
			if tt.oomKilled {
				want++
			}
			assert.Len(t, r.Timeline, want, "one mark for each, the first time: %+v", r.Timeline)
			assert.Equal(t, want > 0, !r.Signal.IsZero(), "the first mark is the signal")
		})
	}
}

func TestOOMGroupFileSaysHowTheKernelKills(t *testing.T) {
	assert.Contains(t, oomGroupFile(Limits{Version: 1}), "one process")
	assert.Contains(t, oomGroupFile(Limits{Version: 2, MemoryOOMGroup: true}), "memory.oom.group 1")
	assert.Contains(t, oomGroupFile(Limits{Version: 2}), "memory.oom.group 0")
}
