package rightsizing

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestPodHarmedIsARestartOrANewTermination: a pod update goes first when
// a container restarted or shows a termination it did not show before,
// not for anything else a kubelet writes.
func TestPodHarmedIsARestartOrANewTermination(t *testing.T) {
	finished := metav1.NewTime(time.Unix(1700000000, 0))
	running := corev1.ContainerStatus{Name: "app", ContainerID: "c://1",
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}
	withStatus := func(mutate func(cs *corev1.ContainerStatus)) *corev1.Pod {
		cs := *running.DeepCopy()
		if mutate != nil {
			mutate(&cs)
		}
		return &corev1.Pod{Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{cs}}}
	}
	killed := func(cs *corev1.ContainerStatus) {
		cs.RestartCount = 1
		cs.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{Reason: "OOMKilled", ExitCode: 137, ContainerID: "c://1", FinishedAt: finished}
	}
	cases := []struct {
		name     string
		old, cur *corev1.Pod
		want     bool
	}{
		{"nothing changed", withStatus(nil), withStatus(nil), false},
		{"readiness changed", withStatus(nil), withStatus(func(cs *corev1.ContainerStatus) { cs.Ready = true }), false},
		{"resources resized", withStatus(nil), withStatus(func(cs *corev1.ContainerStatus) {
			cs.Resources = &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}}
		}), false},
		{"an OOM kill and restart", withStatus(nil), withStatus(killed), true},
		{"the same kill again", withStatus(killed), withStatus(killed), false},
		{"a restart alone", withStatus(nil), withStatus(func(cs *corev1.ContainerStatus) { cs.RestartCount = 1 }), true},
		{"terminated now", withStatus(nil), withStatus(func(cs *corev1.ContainerStatus) {
			cs.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Error", ExitCode: 1, FinishedAt: finished}}
		}), true},
		{"a container first seen restarted", &corev1.Pod{}, withStatus(func(cs *corev1.ContainerStatus) { cs.RestartCount = 3 }), true},
		{"a container first seen running", &corev1.Pod{}, withStatus(nil), false},
		{"an init container restarted", &corev1.Pod{Status: corev1.PodStatus{InitContainerStatuses: []corev1.ContainerStatus{running}}},
			&corev1.Pod{Status: corev1.PodStatus{InitContainerStatuses: []corev1.ContainerStatus{{Name: "app", RestartCount: 1}}}}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, podHarmed(&tc.old.Status, &tc.cur.Status))
		})
	}
}
