package healthwatch

import (
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/test/watchtest"
)

func TestAdoptedInPlaceFollowsStatusResources(t *testing.T) {
	ch := watchtest.Change(v1alpha1.StrategyInPlace, watchtest.CPUDown)
	sameAmount := watchtest.Values{ReqCPU: "0.25", ReqMem: "512Mi", LimCPU: "0.5", LimMem: "512Mi"}
	otherMemory := watchtest.Values{ReqCPU: "250m", ReqMem: "1Gi", LimCPU: "500m", LimMem: "1Gi"}
	tests := []struct {
		name string
		pod  corev1.Pod
		want bool
	}{
		{"status runs the applied values", watchtest.NewPod("a", watchtest.CPUDown), true},
		{"the same amounts spelled otherwise", watchtest.NewPod("a", watchtest.CPUDown, watchtest.StatusRuns(sameAmount)), true},
		{"resized spec, status still the old values", watchtest.NewPod("a", watchtest.CPUDown, watchtest.StatusRuns(watchtest.Before)), false},
		{"only the request resized yet", watchtest.NewPod("a", watchtest.CPUDown, watchtest.StatusRuns(watchtest.Values{ReqCPU: "250m", ReqMem: "512Mi", LimCPU: "1", LimMem: "512Mi"})), false},
		{"an untouched resource differs", watchtest.NewPod("a", otherMemory), true},
		{"no status resources reported", watchtest.NewPod("a", watchtest.CPUDown, func(p *corev1.Pod) { containerStatus(p, "app").Resources = nil }), false},
		{"no status for the container", watchtest.NewPod("a", watchtest.CPUDown, func(p *corev1.Pod) { p.Status.ContainerStatuses = p.Status.ContainerStatuses[1:] }), false},
		{"a pod of the old values", watchtest.NewPod("a", watchtest.Before), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, Adopted(&tt.pod, ch))
		})
	}
}

func TestAdoptedRolloutAndDeferredFollowSpec(t *testing.T) {
	for _, strategy := range []v1alpha1.Strategy{v1alpha1.StrategyRollout, v1alpha1.StrategyDeferred} {
		ch := watchtest.Change(strategy, watchtest.MemDown)
		tests := []struct {
			name string
			pod  corev1.Pod
			want bool
		}{
			{"a pod of the new template", watchtest.NewPod("a", watchtest.MemDown), true},
			{"spec applied, status not reported yet", watchtest.NewPod("a", watchtest.MemDown, watchtest.StatusRuns(watchtest.Values{})), true},
			{"a pod of the old template", watchtest.NewPod("a", watchtest.Before), false},
			{"old template, status somehow matching", watchtest.NewPod("a", watchtest.Before, watchtest.StatusRuns(watchtest.MemDown)), false},
			{"the container is missing", watchtest.NewPod("a", watchtest.MemDown, func(p *corev1.Pod) { p.Spec.Containers = p.Spec.Containers[1:] }), false},
		}
		for _, tt := range tests {
			t.Run(string(strategy)+"/"+tt.name, func(t *testing.T) {
				assert.Equal(t, tt.want, Adopted(&tt.pod, ch))
			})
		}
	}
}

func TestAdoptedNeedsAppliedValues(t *testing.T) {
	p := watchtest.NewPod("a", watchtest.Before)
	assert.False(t, Adopted(&p, nil))
	assert.False(t, Adopted(&p, &v1alpha1.Change{Strategy: v1alpha1.StrategyRollout}))
	assert.False(t, Adopted(nil, watchtest.Change(v1alpha1.StrategyRollout, watchtest.CPUDown)))
}
