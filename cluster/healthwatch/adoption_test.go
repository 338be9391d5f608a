package healthwatch

import (
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"

	"github.com/kerf-dev/kerf/api/v1alpha1"
)

func TestAdoptedInPlaceFollowsStatusResources(t *testing.T) {
	ch := change(v1alpha1.StrategyInPlace, cpuDown)
	sameAmount := values{reqCPU: "0.25", reqMem: "512Mi", limCPU: "0.5", limMem: "512Mi"}
	otherMemory := values{reqCPU: "250m", reqMem: "1Gi", limCPU: "500m", limMem: "1Gi"}
	tests := []struct {
		name string
		pod  corev1.Pod
		want bool
	}{
		{"status runs the applied values", newPod("a", cpuDown), true},
		{"the same amounts spelled otherwise", newPod("a", cpuDown, statusRuns(sameAmount)), true},
		{"resized spec, status still the old values", newPod("a", cpuDown, statusRuns(before)), false},
		{"only the request resized yet", newPod("a", cpuDown, statusRuns(values{reqCPU: "250m", reqMem: "512Mi", limCPU: "1", limMem: "512Mi"})), false},
		{"an untouched resource differs", newPod("a", otherMemory), true},
		{"no status resources reported", newPod("a", cpuDown, func(p *corev1.Pod) { containerStatus(p, "app").Resources = nil }), false},
		{"no status for the container", newPod("a", cpuDown, func(p *corev1.Pod) { p.Status.ContainerStatuses = p.Status.ContainerStatuses[1:] }), false},
		{"a pod of the old values", newPod("a", before), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, Adopted(&tt.pod, ch))
		})
	}
}

func TestAdoptedRolloutAndDeferredFollowSpec(t *testing.T) {
	for _, strategy := range []v1alpha1.Strategy{v1alpha1.StrategyRollout, v1alpha1.StrategyDeferred} {
		ch := change(strategy, memDown)
		tests := []struct {
			name string
			pod  corev1.Pod
			want bool
		}{
			{"a pod of the new template", newPod("a", memDown), true},
			{"spec applied, status not reported yet", newPod("a", memDown, statusRuns(values{})), true},
			{"a pod of the old template", newPod("a", before), false},
			{"old template, status somehow matching", newPod("a", before, statusRuns(memDown)), false},
			{"the container is missing", newPod("a", memDown, func(p *corev1.Pod) { p.Spec.Containers = p.Spec.Containers[1:] }), false},
		}
		for _, tt := range tests {
			t.Run(string(strategy)+"/"+tt.name, func(t *testing.T) {
				assert.Equal(t, tt.want, Adopted(&tt.pod, ch))
			})
		}
	}
}

func TestAdoptedNeedsAppliedValues(t *testing.T) {
	p := newPod("a", before)
	assert.False(t, Adopted(&p, nil))
	assert.False(t, Adopted(&p, &v1alpha1.Change{Strategy: v1alpha1.StrategyRollout}))
	assert.False(t, Adopted(nil, change(v1alpha1.StrategyRollout, cpuDown)))
}
