package signals

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/healthwatch"
	"github.com/kerf-dev/kerf/test/watchtest"
)

// TestKernelKeepsTheLatestAbsoluteOOMKillCountPerInstance: the newest
// reading of each instance wins (an older sample arriving late does not
// take it back); a sample without a count read changes nothing; the count
// of an instance dropped since (a restarted container's earlier run, gone)
// is kept while its pod lives, and the health watch counts it.
func TestKernelKeepsTheLatestAbsoluteOOMKillCountPerInstance(t *testing.T) {
	m := NewKernel(WithCompaction(DefaultRecent))
	pod := watchtest.NewPod("web-1", watchtest.MemDown)
	sample := func(started time.Time, at time.Duration, kills uint64, has bool) healthwatch.CounterSample {
		return healthwatch.CounterSample{PodUID: pod.UID, Container: "app", Started: started, At: watchtest.After(at),
			Periods: uint64(at / time.Second), OOMKills: kills, HasOOMKills: has}
	}
	m.AddSamples(sample(watchtest.Started, 0, 0, false))
	assert.Empty(t, m.OOMKillCounts(pod.UID, "app"), "no count read: none known")

	m.AddSamples(sample(watchtest.Started, time.Second, 2, true), sample(watchtest.Started, 3*time.Second, 3, true))
	m.AddSamples(sample(watchtest.Started, 2*time.Second, 2, true), sample(watchtest.Started, 4*time.Second, 0, false))
	got := m.OOMKillCounts(pod.UID, "app")
	require.Len(t, got, 1)
	assert.Equal(t, healthwatch.InstanceOOMKills{Started: watchtest.Started, Kills: 3, At: watchtest.After(3 * time.Second)}, got[0])

	// The container restarts: a new instance; the old one's cgroup goes
	// and, once no window reads it, the instance is dropped, its count
	// kept.
	restarted := watchtest.After(10 * time.Second)
	m.Gone(pod.UID, "app", watchtest.Started)
	for i := range 60 {
		m.AddSamples(sample(restarted, 10*time.Second+time.Duration(i)*time.Second, 1, true))
	}
	_, instances, _ := m.Len()
	assert.Equal(t, 1, instances, "the gone instance is dropped")
	got = m.OOMKillCounts(pod.UID, "app")
	require.Len(t, got, 2)
	assert.Equal(t, []uint64{3, 1}, []uint64{got[0].Kills, got[1].Kills})

	// The health watch over it: a baseline of 1 at T0 for the first run,
	// the second run started after T0.
	in := healthwatch.Input{Change: watchtest.Change(v1alpha1.StrategyInPlace, watchtest.MemDown), Pods: []corev1.Pod{pod}, Kernel: m,
		OOMBaselines: []v1alpha1.OOMBaseline{{Pod: "web-1", PodUID: string(pod.UID), Container: "app", StartedAt: metaTime(watchtest.Started), OOMKills: 1}}}
	v := healthwatch.Evaluate(watchtest.After(2*time.Minute), in)
	assert.Equal(t, []string{"oomKills 3 ≥ 1"}, v.Figures, "2 in the first run since its baseline, 1 in the second")

	// Bounded: a pod keeps the counts of at most MaxInstancesPerPod
	// dropped instances.
	for i := range MaxInstancesPerPod + 20 {
		m.AddSamples(sample(watchtest.After(time.Hour+time.Duration(i)*time.Second), time.Hour+time.Duration(i)*time.Second, 1, true))
	}
	assert.LessOrEqual(t, len(m.OOMKillCounts(pod.UID, "app")), 2*MaxInstancesPerPod)
	m.mu.Lock()
	assert.LessOrEqual(t, len(m.pods[pod.UID].rare.retired), MaxInstancesPerPod)
	m.mu.Unlock()
}

func metaTime(t time.Time) *metav1.Time {
	mt := metav1.NewTime(t)
	return &mt
}
