package signals

import (
	"math"
	"slices"
	"time"
)

// What the Kernel store keeps and for how long: the pinned windows of the
// health watches, compaction of old readings, gone instances swept, the
// bounds per pod, pruning.

// pinWindow pins from, and to when it is older than the recent samples,
// for the pod; m.mu is held.
func (m *Kernel) pinWindow(p *podSignals, from, to time.Time) {
	if m.keepAll {
		return
	}
	p.pin(from.UnixNano(), m.newest)
	if t := to.UnixNano(); t < m.horizon() {
		p.pin(t, m.newest)
	}
}

func (p *podSignals) pin(at, now int64) {
	r := p.more()
	for i := range r.pins {
		if r.pins[i].at == at {
			r.pins[i].asked = now
			return
		}
	}
	if len(r.pins) >= maxPins {
		oldest := 0
		for i := range r.pins {
			if r.pins[i].asked < r.pins[oldest].asked {
				oldest = i
			}
		}
		r.pins = slices.Delete(r.pins, oldest, oldest+1)
	}
	r.pins = append(r.pins, pin{at: at, asked: now})
}

// horizon is the time from which every sample is kept; m.mu is held.
func (m *Kernel) horizon() int64 {
	if m.newest == math.MinInt64 {
		return math.MinInt64
	}
	return m.newest - m.recent
}

// expirePins drops the pod's pins not asked for within the pin TTL; m.mu
// is held.
func (m *Kernel) expirePins(p *podSignals) {
	if p.rare != nil {
		p.rare.pins = slices.DeleteFunc(p.rare.pins, func(x pin) bool { return x.asked < m.newest-m.pinTTL })
	}
}

// compact drops the samples of sr that no window can read (see
// Kernel); m.mu is held.
func (m *Kernel) compact(p *podSignals, sr *series) {
	m.expirePins(p)
	if len(p.pins()) == 0 && sr.dropOld(m.horizon()) {
		sr.kept = sr.n
		return
	}
	pts := sr.readings(m.scratch[:0], math.MaxInt64)
	m.scratch = pts
	n := len(pts)
	keep := make([]bool, n)
	keep[n-1] = true
	h := firstAfter(pts, m.horizon()-1) // first at or after the horizon
	for i := max(h-1, 0); i < n; i++ {
		keep[i] = true
	}
	for _, pn := range p.pins() {
		i := firstAfter(pts, pn.at)
		if i > 0 {
			keep[i-1] = true
		}
		if i < n {
			keep[i] = true
		}
	}
	for i := 1; i < h; i++ {
		if pts[i].periods < pts[i-1].periods || pts[i].throttled < pts[i-1].throttled {
			keep[i-1], keep[i] = true, true
		}
	}
	out := pts[:0]
	for i, pt := range pts {
		if keep[i] {
			out = append(out, pt)
		}
	}
	sr.store(out)
	sr.kept = sr.n
}

// sweepGone drops the instances marked gone that no window can read any
// more, and pods left without instances; m.mu is held.
func (m *Kernel) sweepGone() {
	h := m.horizon()
	for range min(len(m.gone), 16) {
		g := m.gone[0]
		if g.s.n > 0 && g.s.last.at >= h {
			return // newer marks are no older
		}
		m.gone = m.gone[1:]
		g.s.queued = false
		if g.s.dropped {
			m.droppedQueued--
			continue
		}
		p := m.pods[g.pod]
		if p == nil || !g.s.gone {
			continue
		}
		m.expirePins(p)
		last := int64(math.MinInt64)
		if g.s.n > 0 {
			last = g.s.last.at
		}
		if slices.ContainsFunc(p.pins(), func(x pin) bool { return x.at < last }) {
			// A window that starts before its last sample reads it: look
			// again once the pin has expired.
			g.s.queued = true
			m.gone = append(m.gone, g)
			continue
		}
		p.series = slices.DeleteFunc(p.series, func(s *series) bool { return s == g.s })
		p.retire(g.s)
		if kills := p.kills(); len(p.series) == 0 && (len(kills) == 0 || kills[len(kills)-1].at.UnixNano() < h) {
			delete(m.pods, g.pod)
		}
	}
	if len(m.gone) == 0 && cap(m.gone) > 1024 {
		m.gone = nil
	}
}

// Prune drops what no watch that starts at or after before needs. It
// drops:
//   - OOM kills at or before it;
//   - the OOM kill counts of dropped instances read at or before it;
//   - samples older than each instance's latest sample at or before it.
//     That one stays: it is a window's start value.
func (m *Kernel) Prune(before time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b := before.UnixNano()
	for _, p := range m.pods {
		if r := p.rare; r != nil {
			i, _ := slices.BinarySearchFunc(r.kills, before, func(k kill, t time.Time) int { return cmpAfter(k.at, t) })
			if i > 0 {
				r.kills = slices.Clone(r.kills[i:])
			}
			r.pins = slices.DeleteFunc(r.pins, func(x pin) bool { return x.at < b })
			// A dropped instance adds no kill after its count's reading.
			r.retired = slices.DeleteFunc(r.retired, func(x retiredCount) bool { return x.count.at <= b })
		}
		for _, sr := range p.series {
			pts := sr.readings(m.scratch[:0], math.MaxInt64)
			m.scratch = pts
			if i := firstAfter(pts, b); i > 1 {
				sr.store(pts[i-1:])
				sr.kept = sr.n
			}
		}
	}
}

// cmpAfter orders t against x so that a binary search for x finds the first
// time after x.
func cmpAfter(t, x time.Time) int {
	if t.After(x) {
		return 1
	}
	return -1
}

// dropOldestInstance drops the pod's instance whose newest sample is
// oldest, among those marked gone when there are any; m.mu is held. The
// queue of gone instances may still name it: sweepGone skips it, and the
// queue is compacted once such entries are half of it.
func (m *Kernel) dropOldestInstance(p *podSignals) {
	oldest := -1
	for i, sr := range p.series {
		if oldest < 0 {
			oldest = i
			continue
		}
		o := p.series[oldest]
		if sr.gone != o.gone {
			if sr.gone {
				oldest = i
			}
			continue
		}
		if sr.lastAt() < o.lastAt() {
			oldest = i
		}
	}
	sr := p.series[oldest]
	p.series = slices.Delete(p.series, oldest, oldest+1)
	p.retire(sr)
	sr.dropped, sr.buf = true, nil
	if sr.queued {
		m.droppedQueued++
		if m.droppedQueued > 1024 && 2*m.droppedQueued > len(m.gone) {
			m.gone = slices.DeleteFunc(m.gone, func(g goneRef) bool {
				if g.s.dropped {
					g.s.queued = false
				}
				return g.s.dropped
			})
			m.droppedQueued = 0
		}
	}
}
