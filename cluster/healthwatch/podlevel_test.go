package healthwatch

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/test/watchtest"
)

// podLevelChange lowers the pod-level values (the (pod) entry) from
// watchtest.Before to applied, in place.
func podLevelChange(applied watchtest.Values) *v1alpha1.Change {
	ch := watchtest.Change(v1alpha1.StrategyInPlace, applied)
	ch.Containers[0].Name = v1alpha1.PodLevel
	return ch
}

// podLevelPod is a pod of NewPod whose spec and status set the pod-level
// values v.
func podLevelPod(v watchtest.Values, opts ...func(*corev1.Pod)) corev1.Pod {
	p := watchtest.NewPod("web-1", watchtest.Before, opts...)
	p.Spec.Resources = ptr.To(v.Requirements())
	p.Status.Resources = ptr.To(v.Requirements())
	return p
}

// A pod runs a pod-level change once status.resources holds it; its
// containers' values do not matter.
func TestPodLevelChangeAdoptedFromStatusResources(t *testing.T) {
	ch := podLevelChange(watchtest.MemDown)
	assert.True(t, Adopted(ptr.To(podLevelPod(watchtest.MemDown)), ch))
	pending := podLevelPod(watchtest.MemDown)
	pending.Status.Resources = ptr.To(watchtest.Before.Requirements())
	assert.False(t, Adopted(&pending, ch), "the kubelet does not run the values yet")
}

// Under a lowered pod-level memory limit, an OOM kill of any container of
// the pod is the change's, here the sidecar's that no entry names.
func TestPodLevelMemoryCountsEveryContainersOOMKills(t *testing.T) {
	pod := podLevelPod(watchtest.MemDown, watchtest.LastTerminated("sidecar", "OOMKilled", "c1", watchtest.After(time.Minute)))
	v := Evaluate(watchtest.After(3*time.Minute), Input{Change: podLevelChange(watchtest.MemDown), Pods: []corev1.Pod{pod}})
	assert.Equal(t, StateBreached, v.State)
	assert.Equal(t, v1alpha1.HealthWatchOOMKills, v.Reason)
	assert.Contains(t, v.Message, "container sidecar")
}

// A lowered pod-level cpu limit throttles the pod cgroup: the rule reads
// the (pod) entry's counters, which the agent samples, not the
// containers'.
func TestPodLevelCPUReadsThePodCgroupsThrottling(t *testing.T) {
	pod := podLevelPod(watchtest.CPUDown)
	m := newRecorded()
	feed(m, pod, "app", watchtest.Started, point{2 * time.Minute, 0, 0}, point{10 * time.Minute, 1200, 0})
	feed(m, pod, v1alpha1.PodLevel, watchtest.Started, point{2 * time.Minute, 0, 0}, point{10 * time.Minute, 1200, 600})
	v := Evaluate(watchtest.After(10*time.Minute), Input{Change: podLevelChange(watchtest.CPUDown), Pods: []corev1.Pod{pod}, Throttling: Counters(m)})
	assert.Equal(t, StateBreached, v.State)
	assert.Equal(t, v1alpha1.HealthWatchThrottling, v.Reason)
	assert.Contains(t, v.Message, "throttlingRatio 0.50 ≥ 0.25 (container (pod), 1200 periods)")
}
