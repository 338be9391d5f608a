package healthwatch

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/test/watchtest"
)

// counted is a KernelSource that is an OOMCountSource: the OOM events of
// recorded, and the instances' absolute counts as set.
type counted struct {
	*recorded
	counts map[types.UID][]InstanceOOMKills
}

func (c *counted) OOMKillCounts(podUID types.UID, _ string) []InstanceOOMKills {
	return c.counts[podUID]
}

// TestOOMKillsCountFromTheKernelCountsSinceT0: the first evaluation takes
// each instance's absolute count as its baseline; a leader that took over
// with none of the OOM events (they happened while no leader ran) counts
// the kills from the recorded baseline; a restarted instance counts in
// full; the events' count and the absolute count are one kill each, the
// larger kept.
func TestOOMKillsCountFromTheKernelCountsSinceT0(t *testing.T) {
	pod := watchtest.NewPod("web-1", watchtest.MemDown)
	change := watchtest.Change(v1alpha1.StrategyInPlace, watchtest.MemDown)
	run := func(kills uint64, at time.Time) InstanceOOMKills {
		return InstanceOOMKills{Started: watchtest.Started, Kills: kills, At: at}
	}

	// Leader a starts the watch: two kills before the change.
	a := &counted{newRecorded(), map[types.UID][]InstanceOOMKills{pod.UID: {run(2, watchtest.After(-5*time.Second))}}}
	v := Evaluate(watchtest.After(time.Second), Input{Change: change, Pods: []corev1.Pod{pod}, Kernel: a})
	assert.Equal(t, StateWatching, v.State)
	assert.Contains(t, v.Message, "oomKills 0 < 1")
	require.Len(t, v.OOMBaselines, 1)
	started := metav1.NewTime(watchtest.Started)
	assert.Equal(t, v1alpha1.OOMBaseline{Pod: "web-1", PodUID: string(pod.UID), Container: "app", StartedAt: &started,
		OOMKills: 2, At: metav1.NewTime(watchtest.After(-5 * time.Second))}, v.OOMBaselines[0])
	recorded := v.OOMBaselines
	again := Evaluate(watchtest.After(2*time.Second), Input{Change: change, Pods: []corev1.Pod{pod}, Kernel: a, OOMBaselines: recorded})
	assert.Nil(t, again.OOMBaselines, "nothing new to record")

	// Leader b takes over at T0+10m; three child-process kills happened
	// while no leader ran: no event, no restart, only the kernel's count.
	b := &counted{newRecorded(), map[types.UID][]InstanceOOMKills{pod.UID: {run(5, watchtest.After(10*time.Minute))}}}
	v = Evaluate(watchtest.After(10*time.Minute), Input{Change: change, Pods: []corev1.Pod{pod}, Kernel: b, OOMBaselines: recorded})
	assert.Equal(t, StateBreached, v.State)
	assert.Equal(t, []string{"oomKills 3 ≥ 1"}, v.Figures)
	assert.Contains(t, v.Message, "pod web-1 container app: 3 (kernel 0, kernel count 3 since T0, status 0)")
	assert.Nil(t, v.OOMBaselines)

	// Without the recorded baseline, b's first sight is the baseline:
	// those kills are lost (what recording it at the watch's start is for).
	v = Evaluate(watchtest.After(10*time.Minute), Input{Change: change, Pods: []corev1.Pod{pod}, Kernel: b})
	assert.Contains(t, v.Message, "oomKills 0 < 1")

	// A restarted container is a new cgroup, its count from zero: in full.
	b.counts[pod.UID] = append(b.counts[pod.UID], InstanceOOMKills{Started: watchtest.After(5 * time.Minute), Kills: 1, At: watchtest.After(10 * time.Minute)})
	v = Evaluate(watchtest.After(10*time.Minute), Input{Change: change, Pods: []corev1.Pod{pod}, Kernel: b, OOMBaselines: recorded})
	assert.Equal(t, []string{"oomKills 4 ≥ 1"}, v.Figures)
	assert.Nil(t, v.OOMBaselines, "an instance started after T0 needs no baseline")

	// The events saw more (the counter was not read since): the larger.
	for _, d := range []time.Duration{time.Minute, 2 * time.Minute, 3 * time.Minute, 4 * time.Minute, 6 * time.Minute} {
		b.AddOOMKill(pod.UID, "app", watchtest.After(d))
	}
	v = Evaluate(watchtest.After(10*time.Minute), Input{Change: change, Pods: []corev1.Pod{pod}, Kernel: b, OOMBaselines: recorded})
	assert.Equal(t, []string{"oomKills 5 ≥ 1"}, v.Figures)

	// A pod created after T0 counts every kill of its instances.
	late := watchtest.NewPod("web-2", watchtest.MemDown, watchtest.CreatedAt(watchtest.After(time.Minute)))
	c := &counted{newRecorded(), map[types.UID][]InstanceOOMKills{late.UID: {run(2, watchtest.After(3*time.Minute))}}}
	v = Evaluate(watchtest.After(3*time.Minute), Input{Change: change, Pods: []corev1.Pod{late}, Kernel: c})
	assert.Equal(t, []string{"oomKills 2 ≥ 1"}, v.Figures)
}
