package watch

import (
	"math"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// SignalKind says what kind of signal arrived for a pod (docs/design.md
// section 3).
type SignalKind int

// The kinds of signals.
const (
	// SignalOOMKill is an OOM kill.
	SignalOOMKill SignalKind = iota + 1
	// SignalCounters is a batch of counter samples.
	SignalCounters
)

// Signal says that something changed for a pod, so the leader evaluates its
// watch at once (docs/design.md section 3: a breach is acted on as soon as
// the signal arrives).
type Signal struct {
	// PodUID is the pod the signal is about.
	PodUID types.UID
	// Kind is what arrived.
	Kind SignalKind
}

// MemorySource keeps OOM kills and counter samples in memory and serves
// them as a KernelSource, a CounterSource and a ThrottlingSource (the same
// sums as Counters(m), computed in place). Tests feed it, and so does the ingest of the agents'
// stream (docs/design.md section 6). It is safe for concurrent use.
//
// It keeps every sample until Prune or ForgetPod drops it, which is
// simple but costs about 50 bytes per sample: the ingest should prune to
// the oldest running watch's window start.
type MemorySource struct {
	mu   sync.Mutex
	pods map[types.UID]*podSignals
	subs map[int]func(Signal)
	next int
}

// podSignals are one pod's signals.
type podSignals struct {
	// kills are the OOM kill times per container, oldest first.
	kills map[string][]time.Time
	// series are the samples per container instance, oldest first.
	series map[instance][]CounterSample
}

// instance is one run of a container: its name and start (startKey).
type instance struct {
	container string
	started   int64
}

// startKey makes a map key of a start time: time.Time values of the same
// instant may differ in location or monotonic reading.
func startKey(t time.Time) int64 {
	if t.IsZero() {
		return math.MinInt64
	}
	return t.UnixNano()
}

// NewMemorySource returns an empty MemorySource for the health watch's
// signals (docs/design.md section 3).
func NewMemorySource() *MemorySource {
	return &MemorySource{pods: map[types.UID]*podSignals{}, subs: map[int]func(Signal){}}
}

// OnSignal calls fn for every OOM kill added, and once per pod for every
// call that adds samples, after the data is stored, in the adding
// goroutine: fn must be quick and must not block (enqueue the pod's
// workload into a work queue). The returned func unsubscribes.
func (m *MemorySource) OnSignal(fn func(Signal)) (cancel func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	id := m.next
	m.next++
	m.subs[id] = fn
	return func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		delete(m.subs, id)
	}
}

// AddOOMKill records an OOM kill of a container of a pod at a kernel time,
// for the OOM rule (docs/design.md section 3), and signals the pod.
func (m *MemorySource) AddOOMKill(podUID types.UID, container string, at time.Time) {
	m.mu.Lock()
	p := m.pod(podUID)
	k := p.kills[container]
	i, _ := slices.BinarySearchFunc(k, at, time.Time.Compare)
	p.kills[container] = slices.Insert(k, i, at)
	subs := m.subscribers()
	m.mu.Unlock()
	notify(subs, Signal{PodUID: podUID, Kind: SignalOOMKill})
}

// AddSamples records counter samples for the throttling rule
// (docs/design.md section 3) and signals their pods. A second sample of an instance at the
// same time replaces the first (the newest counters win); samples may
// arrive out of order.
func (m *MemorySource) AddSamples(samples ...CounterSample) {
	var seen []types.UID
	m.mu.Lock()
	for _, s := range samples {
		p := m.pod(s.PodUID)
		key := instance{s.Container, startKey(s.Started)}
		series := p.series[key]
		if n := len(series); n == 0 || series[n-1].At.Before(s.At) {
			series = append(series, s)
		} else {
			i, found := slices.BinarySearchFunc(series, s.At, func(x CounterSample, t time.Time) int { return x.At.Compare(t) })
			if found {
				series[i] = s
			} else {
				series = slices.Insert(series, i, s)
			}
		}
		p.series[key] = series
		if !slices.Contains(seen, s.PodUID) {
			seen = append(seen, s.PodUID)
		}
	}
	subs := m.subscribers()
	m.mu.Unlock()
	for _, uid := range seen {
		notify(subs, Signal{PodUID: uid, Kind: SignalCounters})
	}
}

// OOMKills implements KernelSource: the kills in (from, to]. ok is true
// when anything was recorded for the container (a kill or a sample), since
// the agent that reports a container's counters also reports its kills.
func (m *MemorySource) OOMKills(podUID types.UID, container string, from, to time.Time) (int, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.pods[podUID]
	if p == nil {
		return 0, false
	}
	k, ok := p.kills[container]
	if !ok {
		for key := range p.series {
			if key.container == container {
				ok = true
				break
			}
		}
	}
	lo, _ := slices.BinarySearchFunc(k, from, cmpAfter)
	hi, _ := slices.BinarySearchFunc(k, to, cmpAfter)
	return hi - lo, ok
}

// cmpAfter orders t against x so that a binary search for x finds the first
// time after x.
func cmpAfter(t, x time.Time) int {
	if t.After(x) {
		return 1
	}
	return -1
}

// Samples implements CounterSource (docs/design.md section 3).
func (m *MemorySource) Samples(podUIDs []types.UID, from, to time.Time) ([]CounterSample, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, uid := range podUIDs {
		if p := m.pods[uid]; p != nil {
			for _, series := range p.series {
				i, j := window(series, from, to)
				n += j - i
			}
		}
	}
	out := make([]CounterSample, 0, n)
	for _, uid := range podUIDs {
		if p := m.pods[uid]; p != nil {
			for _, series := range p.series {
				i, j := window(series, from, to)
				out = append(out, series[i:j]...)
			}
		}
	}
	return out, nil
}

// ThrottleWindows implements ThrottlingSource over the stored samples, as
// Counters(m) does, without copying them.
func (m *MemorySource) ThrottleWindows(pods []*corev1.Pod, containers []string, from, to time.Time) (map[string]ThrottleWindow, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]ThrottleWindow, len(containers))
	for _, pod := range pods {
		p := m.pods[pod.UID]
		if p == nil {
			continue
		}
		for key, series := range p.series {
			if slices.Contains(containers, key.container) {
				i, j := window(series, from, to)
				addIncrease(out, series[i:j], from, to)
			}
		}
	}
	return out, nil
}

// window returns the bounds of the samples of series (oldest first) that a
// window [from, to] reads: the latest at or before from, and those in
// (from, to].
func window(series []CounterSample, from, to time.Time) (i, j int) {
	i, _ = slices.BinarySearchFunc(series, from, func(x CounterSample, t time.Time) int { return cmpAfter(x.At, t) })
	j, _ = slices.BinarySearchFunc(series, to, func(x CounterSample, t time.Time) int { return cmpAfter(x.At, t) })
	return min(max(i-1, 0), j), j
}

// Prune drops what no watch that starts at or after before needs: OOM
// kills at or before it, and samples older than each instance's latest
// sample at or before it (that one stays: it is a window's start value).
func (m *MemorySource) Prune(before time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, p := range m.pods {
		for c, k := range p.kills {
			i, _ := slices.BinarySearchFunc(k, before, cmpAfter)
			if i == len(k) {
				delete(p.kills, c)
			} else if i > 0 {
				p.kills[c] = slices.Clone(k[i:])
			}
		}
		for key, series := range p.series {
			i, _ := slices.BinarySearchFunc(series, before, func(x CounterSample, t time.Time) int { return cmpAfter(x.At, t) })
			if i > 1 {
				p.series[key] = slices.Clone(series[i-1:])
			}
		}
	}
}

// ForgetPod drops everything recorded for a pod, once no watch counts it
// (docs/design.md section 3: only the watched workloads' pods matter).
func (m *MemorySource) ForgetPod(podUID types.UID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.pods, podUID)
}

// pod returns the pod's signals, creating them; m.mu is held.
func (m *MemorySource) pod(uid types.UID) *podSignals {
	p := m.pods[uid]
	if p == nil {
		p = &podSignals{kills: map[string][]time.Time{}, series: map[instance][]CounterSample{}}
		m.pods[uid] = p
	}
	return p
}

// subscribers returns the current subscribers; m.mu is held.
func (m *MemorySource) subscribers() []func(Signal) {
	if len(m.subs) == 0 {
		return nil
	}
	out := make([]func(Signal), 0, len(m.subs))
	for _, fn := range m.subs {
		out = append(out, fn)
	}
	return out
}

func notify(subs []func(Signal), s Signal) {
	for _, fn := range subs {
		fn(s)
	}
}
