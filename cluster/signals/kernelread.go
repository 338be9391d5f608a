package signals

import (
	"math"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kerf-dev/kerf/cluster/healthwatch"
)

// Samples implements CounterSource (docs/design.md section 3). It pins
// from for the pods (see Kernel).
func (m *Kernel) Samples(podUIDs []types.UID, from, to time.Time) ([]healthwatch.CounterSample, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	// Decode every window first, so that out is made at its size.
	type span struct {
		uid  types.UID
		sr   *series
		i, j int
	}
	var spans []span
	pts := m.scratch[:0]
	n := 0
	for _, uid := range podUIDs {
		if p := m.pods[uid]; p != nil {
			m.pinWindow(p, from, to)
			for _, sr := range p.series {
				k := len(pts)
				pts = sr.readings(pts, to.UnixNano())
				i := max(k+firstAfter(pts[k:], from.UnixNano())-1, k)
				spans = append(spans, span{uid, sr, i, len(pts)})
				n += len(pts) - i
			}
		}
	}
	m.scratch = pts
	out := make([]healthwatch.CounterSample, 0, n)
	for _, sp := range spans {
		for _, pt := range pts[sp.i:sp.j] {
			out = append(out, sp.sr.sample(sp.uid, pt))
		}
	}
	return out, nil
}

// ThrottleWindows implements ThrottlingSource over the stored samples, as
// healthwatch.Counters(m) does. It pins from for the pods (see Kernel).
func (m *Kernel) ThrottleWindows(pods []*corev1.Pod, containers []string, from, to time.Time) (map[string]healthwatch.ThrottleWindow, error) {
	out := make(map[string]healthwatch.ThrottleWindow, len(containers))
	m.ThrottleWindowsInto(out, pods, containers, from, to)
	return out, nil
}

// ThrottleWindowsInto is ThrottleWindows written into out, cleared first.
// A caller that reads one workload after another (the recommender's
// pass) makes one map, not one a workload.
func (m *Kernel) ThrottleWindowsInto(out map[string]healthwatch.ThrottleWindow, pods []*corev1.Pod, containers []string, from, to time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	clear(out)
	run := m.run[:0]
	for _, pod := range pods {
		p := m.pods[pod.UID]
		if p == nil {
			continue
		}
		m.pinWindow(p, from, to)
		for _, sr := range p.series {
			if slices.Contains(containers, sr.container) {
				run = run[:0]
				for _, pt := range m.window(sr, from, to) {
					run = append(run, sr.sample(pod.UID, pt))
				}
				healthwatch.AddIncrease(out, run, from, to)
			}
		}
	}
	m.run = keptRun(run)
}

// maxKeptRun bounds the samples Kernel.run keeps as room between calls. A
// series holds a sample per reading, a few dozen in a recommender pass's
// window; one far longer is read into room of its own.
const maxKeptRun = 1024

// keptRun is run cleared, as room for the next call, or nil past
// maxKeptRun.
func keptRun(run []healthwatch.CounterSample) []healthwatch.CounterSample {
	if cap(run) > maxKeptRun {
		return nil
	}
	clear(run)
	return run[:0]
}

func (sr *series) sample(uid types.UID, pt reading) healthwatch.CounterSample {
	var started time.Time
	if sr.started != math.MinInt64 {
		started = time.Unix(0, sr.started).UTC()
	}
	return healthwatch.CounterSample{PodUID: uid, Container: sr.container, Started: started,
		At: time.Unix(0, pt.at).UTC(), Periods: pt.periods, Throttled: pt.throttled}
}

// window returns the readings of a series that a window [from, to] reads,
// oldest first. They are the latest at or before from, and those in
// (from, to]. They stay valid until m.scratch is used again; m.mu is held.
func (m *Kernel) window(sr *series, from, to time.Time) []reading {
	m.scratch = sr.readings(m.scratch[:0], to.UnixNano())
	i := firstAfter(m.scratch, from.UnixNano())
	return m.scratch[max(i-1, 0):]
}

// firstAfter returns the index of the first reading after t.
func firstAfter(points []reading, t int64) int {
	i, _ := slices.BinarySearchFunc(points, t, func(x reading, t int64) int {
		if x.at > t {
			return 1
		}
		return -1
	})
	return i
}
