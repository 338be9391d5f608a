package healthwatch

import (
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kerf-dev/kerf/test/watchtest"
)

// point is a sample of a series at T0 + at.
type point struct {
	at                 time.Duration
	periods, throttled uint64
}

// feed adds a series of samples of one container instance to m.
func feed(m *recorded, pod corev1.Pod, container string, started time.Time, points ...point) {
	s := make([]CounterSample, len(points))
	for i, p := range points {
		s[i] = CounterSample{PodUID: pod.UID, Container: container, Started: started, At: watchtest.After(p.at), Periods: p.periods, Throttled: p.throttled}
	}
	m.AddSamples(s...)
}

// recorded is the tests' signal store: a KernelSource and a CounterSource
// that keep every OOM kill and sample as added (the leader's stores are in
// cluster/signals, which imports this package).
type recorded struct {
	kills   []CounterSample // PodUID, Container and At of each kill
	samples []CounterSample
}

func newRecorded() *recorded { return &recorded{} }

// AddOOMKill records an OOM kill of a container of a pod at a kernel time.
func (r *recorded) AddOOMKill(podUID types.UID, container string, at time.Time) {
	r.kills = append(r.kills, CounterSample{PodUID: podUID, Container: container, At: at})
}

// AddSamples records counter samples.
func (r *recorded) AddSamples(samples ...CounterSample) { r.samples = append(r.samples, samples...) }

// OOMKills counts the kills in (from, to]; ok when anything was recorded
// for the container, as the agents' store says.
func (r *recorded) OOMKills(podUID types.UID, container string, from, to time.Time) (n int, ok bool) {
	for _, k := range r.kills {
		if k.PodUID == podUID && k.Container == container {
			ok = true
			if k.At.After(from) && !k.At.After(to) {
				n++
			}
		}
	}
	for _, s := range r.samples {
		ok = ok || s.PodUID == podUID && s.Container == container
	}
	return n, ok
}

// Samples returns every recorded sample of the pods.
func (r *recorded) Samples(podUIDs []types.UID, _, _ time.Time) ([]CounterSample, error) {
	var out []CounterSample
	for _, s := range r.samples {
		if slices.Contains(podUIDs, s.PodUID) {
			out = append(out, s)
		}
	}
	return out, nil
}

// ThrottleWindows sums the samples as Counters does.
func (r *recorded) ThrottleWindows(pods []*corev1.Pod, containers []string, from, to time.Time) (map[string]ThrottleWindow, error) {
	return Counters(r).ThrottleWindows(pods, containers, from, to)
}
