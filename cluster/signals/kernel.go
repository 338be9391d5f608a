package signals

import (
	"cmp"
	"math"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/kerf-dev/kerf/cluster/healthwatch"
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
// watch at once. A breach is acted on as soon as the signal arrives
// (docs/design.md section 3).
type Signal struct {
	// PodUID is the pod the signal is about.
	PodUID types.UID
	// Kind is what arrived.
	Kind SignalKind
}

// Defaults of the Kernel's retention (see Kernel).
const (
	// DefaultRecent is the recent span of WithCompaction for the leader.
	// Every sample that new is kept, so a window that opens now finds its
	// exact start value. The health watch asks for a throttling window
	// when it opens, at its next check, and then at least every 30 s, well
	// within it.
	DefaultRecent = 30 * time.Second
	// DefaultPinTTL is how long a window start that was asked for is kept
	// exact without being asked for again.
	DefaultPinTTL = 10 * time.Minute
	// maxPins bounds the window starts kept per pod: one per watch that
	// covers the pod, and a pod is in few watches at once.
	maxPins = 8
	// MaxKillsPerPod bounds the OOM kill records kept per pod (one per
	// report, with its count); past it the oldest go. What an agent says
	// cannot grow the leader's memory past it.
	MaxKillsPerPod = 256
	// MaxInstancesPerPod bounds the container instances kept per pod:
	// containers times restarts still readable by a window. Past it the
	// instance with the oldest newest sample goes, gone ones first.
	MaxInstancesPerPod = 256
)

// KernelOption changes a Kernel's retention.
type KernelOption func(*Kernel)

// WithCompaction makes the Kernel compact each container instance's
// samples as they arrive. It keeps every sample of the last recent, by
// sample time, and before that only what a window can read (see Kernel).
// The leader's stream ingest uses it with DefaultRecent. Without it every
// sample is kept until Prune or ForgetPod, which suits tests that feed a
// history first and ask about it afterwards.
func WithCompaction(recent time.Duration) KernelOption {
	return func(m *Kernel) { m.recent, m.keepAll = int64(max(recent, 0)), false }
}

// WithPinTTL sets how long a window start that was asked for is kept exact
// without being asked for again (DefaultPinTTL).
func WithPinTTL(d time.Duration) KernelOption {
	return func(m *Kernel) { m.pinTTL = int64(d) }
}

// Kernel keeps OOM kills and counter samples in memory, serving them as a
// KernelSource, a CounterSource and a ThrottlingSource. It is safe for
// concurrent use.
//
// Its ThrottlingSource gives the same sums as healthwatch.Counters(m),
// computed in place. Tests feed it, and so does the ingest of the agents'
// stream (docs/design.md section 6).
//
// With WithCompaction its memory stays bounded by the containers, not by
// time. As samples arrive it compacts each container instance's series to
// what a window can read. So every window the health watch asks for gives
// the same sums as with every sample kept. It keeps, per instance:
//
//   - every sample of the last recent (by sample time, from the newest
//     sample seen) and the one before, so a window that opens now
//     finds its start value;
//   - around every pinned time of the pod, the sample at or before it and
//     the next. A window's start (from) is pinned whenever a window is
//     asked for, and so is an end older than the recent samples. A pin not
//     asked for again within DefaultPinTTL is dropped;
//   - both samples of every counter drop (a reset, handled as increase()
//     does), and the newest sample.
//
// Between two kept samples the counters only grow, so the increase over
// them is the sum of the increases of the samples dropped in between.
//
// An instance marked Gone is dropped once its newest sample is older than
// the recent samples and every pin. It is Gone when its cgroup is gone, or
// its node's agent no longer lists it. It then adds nothing to any window
// that can still be asked for. A pod is dropped with its last instance,
// with its OOM kills once they are older too.
//
// Samples are stored encoded, a few bytes each (see cursor). At one sample
// a second, the 30 s of recent samples of a container take about 200 B.
// The budget is 1 KiB per tracked container (docs/design.md section 10).
type Kernel struct {
	mu   sync.Mutex
	pods map[types.UID]*podSignals
	subs map[int]func(Signal)
	next int

	recent, pinTTL int64
	keepAll        bool
	// newest is the newest sample time seen, in Unix ns: the clock of the
	// retention, so that compaction follows the data, not a wall clock.
	newest int64
	// gone queues the instances marked gone, oldest mark first, each once;
	// droppedQueued counts those in it that their pod dropped since.
	gone          []goneRef
	droppedQueued int
	// scratch holds a series' decoded readings while m.mu is held, and
	// run their samples for ThrottleWindowsInto.
	scratch []reading
	run     []healthwatch.CounterSample
}

type goneRef struct {
	pod types.UID
	s   *series
}

// podSignals are one pod's signals.
type podSignals struct {
	// series are the pod's container instances.
	series []*series
	// rare holds what few pods have, nil until the pod has some: most
	// pods are in no watch and see no OOM kill.
	rare *podRare
}

// podRare are a pod's OOM kills and pins.
type podRare struct {
	// kills are the OOM kills, oldest first.
	kills []kill
	// retired are the absolute OOM kill counts above zero of the pod's
	// instances dropped since (gone, or past MaxInstancesPerPod), oldest
	// first, at most MaxInstancesPerPod: a restarted container's earlier
	// instance keeps counting its kills. They go with the pod, once its
	// last instance is gone, as its kills do.
	retired []retiredCount
	// pins are the times windows were asked from, with when they were
	// last asked for (sample time).
	pins []pin
}

func (p *podSignals) kills() []kill {
	if p.rare == nil {
		return nil
	}
	return p.rare.kills
}

func (p *podSignals) pins() []pin {
	if p.rare == nil {
		return nil
	}
	return p.rare.pins
}

// more returns p.rare, creating it.
func (p *podSignals) more() *podRare {
	if p.rare == nil {
		p.rare = &podRare{}
	}
	return p.rare
}

type kill struct {
	container string
	at        time.Time
	// n is how many kills the report counted at that time.
	n int
}

type pin struct{ at, asked int64 }

// retiredCount is a dropped instance's last absolute OOM kill count.
type retiredCount struct {
	container string
	started   int64
	count     oomCount
}

// retire keeps the absolute OOM kill count of an instance the pod drops,
// when above zero; m.mu is held.
func (p *podSignals) retire(sr *series) {
	if !sr.oom.known || sr.oom.kills == 0 {
		return
	}
	r := p.more()
	r.retired = append(r.retired, retiredCount{sr.container, sr.started, sr.oom})
	if over := len(r.retired) - MaxInstancesPerPod; over > 0 {
		r.retired = slices.Delete(r.retired, 0, over)
	}
}

// startKey makes a map key of a start time: time.Time values of the same
// instant may differ in location or monotonic reading.
func startKey(t time.Time) int64 {
	if t.IsZero() {
		return math.MinInt64
	}
	return t.UnixNano()
}

// NewKernel returns an empty Kernel for the health watch's
// signals (docs/design.md section 3).
func NewKernel(opts ...KernelOption) *Kernel {
	m := &Kernel{pods: map[types.UID]*podSignals{}, subs: map[int]func(Signal){},
		keepAll: true, pinTTL: int64(DefaultPinTTL), newest: math.MinInt64}
	for _, o := range opts {
		o(m)
	}
	return m
}

// Subscribe calls fn for every OOM kill added, and once per pod for every
// call that adds samples. It calls fn after the data is stored, in the
// adding goroutine. fn must be quick and must not block: it enqueues the
// pod's workload into a work queue. The returned func unsubscribes.
func (m *Kernel) Subscribe(fn func(Signal)) (cancel func()) {
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
// and signals the pod. The OOM rule reads it (docs/design.md section 3).
func (m *Kernel) AddOOMKill(podUID types.UID, container string, at time.Time) {
	m.AddOOMKills(podUID, container, at, 1)
}

// AddOOMKills records n OOM kills of a container of a pod at one time as
// one record, and signals the pod. A pod keeps MaxKillsPerPod records, the
// newest. n below 1 records nothing.
func (m *Kernel) AddOOMKills(podUID types.UID, container string, at time.Time, n int) {
	if n < 1 {
		return
	}
	m.mu.Lock()
	p := m.pod(podUID)
	r := p.more()
	i, _ := slices.BinarySearchFunc(r.kills, at, func(k kill, t time.Time) int { return k.at.Compare(t) })
	for i < len(r.kills) && r.kills[i].at.Equal(at) {
		i++
	}
	r.kills = slices.Insert(r.kills, i, kill{container, at, n})
	if over := len(r.kills) - MaxKillsPerPod; over > 0 {
		r.kills = slices.Delete(r.kills, 0, over)
	}
	subs := m.subscribers()
	m.mu.Unlock()
	notify(subs, Signal{PodUID: podUID, Kind: SignalOOMKill})
}

// AddSamples records counter samples for the throttling rule
// (docs/design.md section 3) and signals their pods. A second sample of an
// instance at the same time replaces the first (the newest counters win);
// samples may arrive out of order. A sample of an instance marked Gone
// brings it back.
func (m *Kernel) AddSamples(samples ...healthwatch.CounterSample) {
	// seen are the pods of the samples, each once; their signals pointers
	// are compared, not their UIDs.
	var seen []types.UID
	var seenPods []*podSignals
	m.mu.Lock()
	var last types.UID
	var p *podSignals
	for i := range samples {
		s := &samples[i]
		if p == nil || s.PodUID != last {
			p, last = m.pod(s.PodUID), s.PodUID
			if !slices.Contains(seenPods, p) {
				seen, seenPods = append(seen, s.PodUID), append(seenPods, p)
			}
		}
		sr := m.instance(p, s.Container, s.Started)
		sr.gone = false
		at := s.At.UnixNano()
		m.newest = max(m.newest, at)
		pt := reading{at: at, periods: s.Periods, throttled: s.Throttled}
		if s.HasOOMKills && (!sr.oom.known || at >= sr.oom.at) {
			sr.oom = oomCount{kills: s.OOMKills, at: at, known: true}
		}
		next := sr.kept + max(8, sr.kept/4) // the length that is compacted
		switch {
		case sr.n == 0 || sr.last.at < at:
			room := int(next - min(sr.n, next))
			if m.keepAll {
				room = int(sr.n/4 + 8)
			}
			sr.push(pt, room)
		case sr.last.at == at:
			sr.replaceLast(pt)
		default:
			pts := sr.readings(m.scratch[:0], math.MaxInt64)
			j, found := slices.BinarySearchFunc(pts, at, func(x reading, t int64) int { return cmp.Compare(x.at, t) })
			if found {
				pts[j] = pt
			} else {
				pts = slices.Insert(pts, j, pt)
			}
			sr.store(pts)
			m.scratch = pts
		}
		if !m.keepAll && sr.n >= next {
			m.compact(p, sr)
		}
	}
	m.sweepGone()
	subs := m.subscribers()
	m.mu.Unlock()
	for _, uid := range seen {
		notify(subs, Signal{PodUID: uid, Kind: SignalCounters})
	}
}

// Gone marks a container instance whose cgroup is gone, so it is dropped
// once no window can read it (see Kernel). An unknown instance is
// ignored.
func (m *Kernel) Gone(podUID types.UID, container string, started time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.pods[podUID]
	if p == nil {
		return
	}
	key := startKey(started)
	for _, sr := range p.series {
		if sr.container == container && sr.started == key && !sr.gone {
			sr.gone = true
			if !m.keepAll && !sr.queued {
				sr.queued = true
				m.gone = append(m.gone, goneRef{podUID, sr})
			}
		}
	}
}

// Len returns how many pods and container instances are kept, and their
// samples.
func (m *Kernel) Len() (pods, instances, samples int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, p := range m.pods {
		instances += len(p.series)
		for _, sr := range p.series {
			samples += int(sr.n)
		}
	}
	return len(m.pods), instances, samples
}

// OOMKills implements KernelSource: the kills in (from, to]. ok is true
// when anything was recorded for the container (a kill or a sample), since
// the agent that reports a container's counters also reports its kills.
func (m *Kernel) OOMKills(podUID types.UID, container string, from, to time.Time) (int, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.pods[podUID]
	if p == nil {
		return 0, false
	}
	n, ok := 0, false
	for _, k := range p.kills() {
		if k.container == container {
			ok = true
			if k.at.After(from) && !k.at.After(to) {
				n += k.n
			}
		}
	}
	if !ok {
		for _, sr := range p.series {
			if sr.container == container {
				ok = true
				break
			}
		}
	}
	return n, ok
}

// OOMKillCounts implements healthwatch.OOMCountSource. It returns the
// latest absolute OOM kill count of each instance of the container whose
// count an agent read, those of instances dropped since included.
func (m *Kernel) OOMKillCounts(podUID types.UID, container string) []healthwatch.InstanceOOMKills {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.pods[podUID]
	if p == nil {
		return nil
	}
	var out []healthwatch.InstanceOOMKills
	add := func(started int64, c oomCount) {
		var st time.Time
		if started != math.MinInt64 {
			st = time.Unix(0, started).UTC()
		}
		out = append(out, healthwatch.InstanceOOMKills{Started: st, Kills: c.kills, At: time.Unix(0, c.at).UTC()})
	}
	if p.rare != nil {
		for _, r := range p.rare.retired {
			if r.container == container {
				add(r.started, r.count)
			}
		}
	}
	for _, sr := range p.series {
		if sr.container == container && sr.oom.known {
			add(sr.started, sr.oom)
		}
	}
	return out
}

// ForgetPod drops everything recorded for a pod, once no watch counts it
// (docs/design.md section 3: only the watched workloads' pods matter).
func (m *Kernel) ForgetPod(podUID types.UID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.pods, podUID)
}

// pod returns the pod's signals, creating them; m.mu is held.
func (m *Kernel) pod(uid types.UID) *podSignals {
	p := m.pods[uid]
	if p == nil {
		p = &podSignals{}
		m.pods[uid] = p
	}
	return p
}

// instance returns the pod's series of a container instance, creating it;
// m.mu is held.
func (m *Kernel) instance(p *podSignals, container string, started time.Time) *series {
	key := startKey(started)
	for _, sr := range p.series {
		if sr.container == container && sr.started == key {
			return sr
		}
	}
	if len(p.series) >= MaxInstancesPerPod {
		m.dropOldestInstance(p)
	}
	sr := &series{container: container, started: key}
	p.series = append(p.series, sr)
	return sr
}

// lastAt is the time of the newest sample, math.MinInt64 when none.
func (sr *series) lastAt() int64 {
	if sr.n == 0 {
		return math.MinInt64
	}
	return sr.last.at
}

// subscribers returns the current subscribers; m.mu is held.
func (m *Kernel) subscribers() []func(Signal) {
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
