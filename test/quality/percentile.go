package quality

import (
	"math"
	"slices"
	"time"
)

// KRR's simple strategy's defaults (robusta-dev/krr, strategies/simple.py).
const (
	krrHistory       = 14 * 24 * time.Hour
	krrCPUPercentile = 0.95
	krrMemoryBuffer  = 0.15
	// krrEvery is how often its report is taken and applied: once a day,
	// as a person or a CronJob would; the first after krrFirst of history.
	krrEvery = 24 * time.Hour
	krrFirst = 24 * time.Hour
)

// Percentile is KRR's simple strategy, applied once a day: the CPU
// request at the 95th percentile of the CPU that ran over 14 days and no
// CPU limit; the memory request and limit at the highest working set
// plus 15 %.
type Percentile struct {
	cur        Values
	start      time.Time
	last       time.Time
	cpu        []float64 // a ring of the history's CPU samples
	mem        []float64
	next       int
	full       bool
	step       time.Duration
	scratchCPU []float64
}

// NewPercentile returns the percentile strategy.
func NewPercentile() *Percentile { return &Percentile{} }

// Name is "KRR p95".
func (p *Percentile) Name() string { return "KRR p95" }

// Start forgets the history: a new workload.
func (p *Percentile) Start(manifest Values, start time.Time) {
	*p = Percentile{cur: manifest, start: start, last: start, scratchCPU: p.scratchCPU}
}

// Step keeps the sample in the 14-day history and applies the report
// once a day.
func (p *Percentile) Step(o Observation) (Values, Action) {
	if p.step == 0 {
		p.step = o.At.Sub(p.start)
		n := int(krrHistory / max(p.step, time.Second))
		p.cpu, p.mem = make([]float64, n), make([]float64, n)
	}
	if o.Running {
		p.cpu[p.next], p.mem[p.next] = o.CPU, o.Memory
		p.next++
		if p.next == len(p.cpu) {
			p.next, p.full = 0, true
		}
	}
	if o.At.Sub(p.start) < krrFirst || o.At.Sub(p.last) < krrEvery {
		return p.cur, Kept
	}
	p.last = o.At
	n := p.next
	if p.full {
		n = len(p.cpu)
	}
	if n == 0 {
		return p.cur, Kept
	}
	p.scratchCPU = append(p.scratchCPU[:0], p.cpu[:n]...)
	slices.Sort(p.scratchCPU)
	cpu := p.scratchCPU[min(int(math.Ceil(krrCPUPercentile*float64(n)))-1, n-1)]
	mem := slices.Max(p.mem[:n]) * (1 + krrMemoryBuffer)
	memB := roundMi(int64(math.Ceil(mem)))
	next := Values{CPURequest: max(int64(math.Ceil(cpu*1000)), 1), MemoryRequest: memB, MemoryLimit: memB}
	if next == p.cur {
		return p.cur, Kept
	}
	p.cur = next
	return next, Changed
}

// Manual is the manifest's values, never changed: the baseline.
type Manual struct{ cur Values }

// Name is "manual".
func (m *Manual) Name() string { return "manual" }

// Start takes the manifest's values.
func (m *Manual) Start(manifest Values, _ time.Time) { m.cur = manifest }

// Step keeps them.
func (m *Manual) Step(Observation) (Values, Action) { return m.cur, Kept }
