package recommend

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"time"
)

// Model is a validated Params with its bucket tables, shared by every
// container the recommender tracks so that no state carries a copy.
type Model struct {
	p           Params
	cpu, mem    decayShape
	interval    int64 // MemoryInterval in seconds
	fingerprint uint32
}

// NewModel validates p and builds the bucket tables.
func NewModel(p Params) (*Model, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("new recommender model: %w", err)
	}
	m := &Model{
		p: p,
		cpu: decayShape{
			scheme:   newScheme(p.CPUFirstBucket, p.CPUMaxValue, p.BucketGrowth),
			halfLife: int64(p.CPUHalfLife / time.Second),
			epsilon:  p.Epsilon,
		},
		mem: decayShape{
			scheme:   newScheme(p.MemoryFirstBucket, p.MemoryMaxValue, p.BucketGrowth),
			halfLife: int64(p.MemoryHalfLife / time.Second),
			epsilon:  p.Epsilon,
		},
		interval: int64(p.MemoryInterval / time.Second),
	}
	h := fnv.New32a()
	var buf [8]byte
	for _, v := range []float64{p.CPUFirstBucket, p.CPUMaxValue, p.MemoryFirstBucket, p.MemoryMaxValue, p.BucketGrowth,
		float64(m.cpu.halfLife), float64(m.mem.halfLife), float64(m.interval), float64(p.MemoryIntervals)} {
		binary.LittleEndian.PutUint64(buf[:], math.Float64bits(v))
		_, _ = h.Write(buf[:])
	}
	m.fingerprint = h.Sum32()
	return m, nil
}

// Params returns the parameters the model was built from.
func (m *Model) Params() Params { return m.p }

// Fingerprint is the hash of the parameters that shape a state, which
// checkpoints carry. They are the buckets, half-lives, interval and
// interval count. A checkpoint loads only into a model with the same one.
func (m *Model) Fingerprint() uint32 { return m.fingerprint }

// ContainerState is what the recommender keeps per workload and container
// name, aggregated over the workload's pods (VPA's AggregateContainerState).
// The zero value is an empty state. It holds:
//   - a decaying CPU usage histogram;
//   - a decaying histogram of memory peaks, one per container instance per
//     interval;
//   - the CPU history's span and sample count, for the minimum-history
//     guard and the confidence;
//   - the latest OOM kill in the window and the throttling ratio's maximum
//     per interval, for the latches.
type ContainerState struct {
	// CPU is the distribution of CPU usage samples, in cores.
	CPU Histogram
	// Memory is the distribution of memory peaks, in bytes.
	Memory Histogram

	first, last int64 // unix seconds of the first and last CPU sample
	oomAt       int64 // unix second of the latest OOM kill; 0 for none
	oomPeak     float64
	samples     uint32
	thrInterval int32     // index of the newest interval in thr
	thr         []float32 // throttling ratio maxima, ring of MemoryIntervals+1; nil until one is > 0
}

// PeakWindow tracks one running container instance's memory peak in its
// current interval, as VPA's ContainerState window. So each instance adds
// one peak per interval to its workload's ContainerState. A caller keeps one
// per pod and container; the zero value starts a window at the next sample.
type PeakWindow struct {
	end  int64 // unix second the window ends
	peak float64
}

// AddCPU adds one CPU usage sample, in cores, measured at t. Every sample
// has the same weight (docs/recommender.md: VPA's request weighting is not
// kept). VPA's confidence assumes one sample a minute per instance.
func (s *ContainerState) AddCPU(m *Model, cores float64, t time.Time) {
	if math.IsNaN(cores) {
		return
	}
	ts := t.Unix()
	s.CPU.add(&m.cpu, max(cores, 0), 1, ts)
	if s.samples == 0 || ts < s.first {
		s.first = ts
	}
	if s.samples == 0 || ts > s.last {
		s.last = ts
	}
	if s.samples < math.MaxUint32 {
		s.samples++
	}
}

// AddMemory adds a memory sample (working set or peak since the last
// report, in bytes) of the instance w at t. Within an interval only a higher
// value changes the histogram: the instance's old peak is taken out and the
// new one put in, so each instance contributes one peak per interval.
func (s *ContainerState) AddMemory(m *Model, w *PeakWindow, bytes float64, t time.Time) {
	if !(bytes >= 0) {
		return
	}
	ts := t.Unix()
	if w.end == 0 {
		w.end = ts
	}
	if ts < w.end {
		if bytes <= w.peak {
			return
		}
		if w.peak > 0 {
			s.Memory.subtract(&m.mem, w.peak, 1, w.end)
		}
	} else {
		w.end += (ts-w.end)/m.interval*m.interval + m.interval
	}
	w.peak = bytes
	s.Memory.add(&m.mem, bytes, 1, w.end)
}

// RecordOOM records an OOM kill at t of a container whose memory was peak
// bytes when it was killed (its usage or its limit). The latch holds for the
// window after the latest kill, from the highest peak of the kills in it.
func (s *ContainerState) RecordOOM(m *Model, peak float64, t time.Time) {
	ts := t.Unix()
	window := int64(m.p.Window() / time.Second)
	switch {
	case s.oomAt == 0 || ts-s.oomAt >= window:
		s.oomAt, s.oomPeak = ts, peak
	case ts > s.oomAt:
		s.oomAt, s.oomPeak = ts, max(peak, s.oomPeak)
	case s.oomAt-ts < window:
		s.oomPeak = max(peak, s.oomPeak)
	}
}

// AddThrottling records a CFS throttling ratio (throttled periods over
// periods) measured at t, keeping the maximum per memory interval.
func (s *ContainerState) AddThrottling(m *Model, ratio float64, t time.Time) {
	if !(ratio > 0) {
		return
	}
	n := int64(m.p.MemoryIntervals + 1)
	idx := t.Unix() / m.interval
	if s.thr == nil {
		s.thr = make([]float32, n)
		s.thrInterval = int32(idx)
	}
	newest := int64(s.thrInterval)
	switch {
	case idx > newest:
		for k := newest + 1; k <= idx && k <= newest+n; k++ {
			s.thr[k%n] = 0
		}
		s.thrInterval = int32(idx)
	case idx <= newest-n:
		return // older than the ring
	}
	if slot := &s.thr[idx%n]; float32(ratio) > *slot {
		*slot = float32(ratio)
	}
}

// Signals are the latch inputs a state holds, as of one moment.
type Signals struct {
	// OOMAt is the latest OOM kill in the window; zero for none.
	OOMAt time.Time
	// OOMPeakBytes is the highest memory peak at an OOM kill in the window.
	OOMPeakBytes float64
	// ThrottlingRatio is the highest throttling ratio in the window, by
	// whole intervals: the window is rounded out to interval boundaries, so
	// a throttle may latch up to one interval longer, never shorter.
	ThrottlingRatio float64
}

// Signals returns the latch inputs as of now.
func (s *ContainerState) Signals(m *Model, now time.Time) Signals {
	var sig Signals
	ts := now.Unix()
	if s.oomAt != 0 && ts-s.oomAt < int64(m.p.Window()/time.Second) {
		sig.OOMAt = time.Unix(s.oomAt, 0).UTC()
		sig.OOMPeakBytes = s.oomPeak
	}
	if s.thr != nil {
		n := int64(len(s.thr))
		oldest := ts/m.interval - n + 1
		for k := int64(0); k < n; k++ {
			idx := int64(s.thrInterval) - k
			if idx < oldest {
				break
			}
			sig.ThrottlingRatio = max(sig.ThrottlingRatio, float64(s.thr[((idx%n)+n)%n]))
		}
	}
	return sig
}

// History is the time between the first and the last CPU sample.
func (s *ContainerState) History() time.Duration {
	return time.Duration(s.last-s.first) * time.Second
}

// Samples is the count of CPU samples added.
func (s *ContainerState) Samples() uint32 { return s.samples }
