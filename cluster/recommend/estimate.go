package recommend

import (
	"math"
	"time"
)

// Resources is a CPU and a memory amount: millicores and bytes. Zero means
// unset (no request, no limit, no bound).
type Resources struct {
	// CPUMilli is CPU in millicores.
	CPUMilli int64
	// MemoryBytes is memory in bytes.
	MemoryBytes int64
}

// Estimate is what the estimators make of a state, before latches and
// guards: the figures a recommendation records it was made from.
type Estimate struct {
	// Target is percentile × (1 + safety margin), at least the minimum.
	Target Resources
	// Lower is the lower-bound percentile with the margin, scaled down by
	// VPA's confidence factor (1 + 0.001/confidence)^-2.
	Lower Resources
	// Upper is the upper-bound percentile with the margin, scaled up by
	// VPA's confidence factor (1 + 1/confidence), capped at the largest bucket.
	Upper Resources
	// Confidence is VPA's: the smaller of the history in confidence
	// intervals and the samples in confidence intervals at one a minute.
	Confidence float64
	// History is the time between the first and the last CPU sample.
	History time.Duration
	// Samples is the count of CPU samples.
	Samples uint32
}

// Estimate computes the estimate for one container of a pod of
// containers containers. The pod minimum is shared among them, as VPA
// does; 0 counts as 1.
func (m *Model) Estimate(s *ContainerState, containers int) Estimate {
	p := &m.p
	e := Estimate{History: s.History(), Samples: s.samples}
	ci := p.ConfidenceInterval
	e.Confidence = math.Min(float64(e.History)/float64(ci), float64(s.samples)/ci.Minutes())
	containers = max(containers, 1)
	minCPU := float64(p.MinCPUMilli) / 1000 / float64(containers)
	minMem := float64(p.MinMemoryBytes) / float64(containers)
	margin := 1 + p.SafetyMargin
	lowerScale := 1 / ((1 + 0.001/e.Confidence) * (1 + 0.001/e.Confidence)) // VPA: (1 + 0.001/c)^-2
	upperScale := 1 + 1/e.Confidence

	if !s.CPU.Empty() {
		total := s.CPU.total()
		cpu := func(pct, scale float64) int64 {
			v := math.Min(s.CPU.percentileOf(&m.cpu, pct, total)*margin*scale, p.CPUMaxValue)
			return milli(math.Max(v, minCPU))
		}
		e.Target.CPUMilli = cpu(p.CPUPercentile, 1)
		e.Lower.CPUMilli = cpu(p.LowerPercentile, lowerScale)
		e.Upper.CPUMilli = cpu(p.UpperPercentile, upperScale)
	}
	if !s.Memory.Empty() {
		total := s.Memory.total()
		mem := func(pct, scale float64) int64 {
			v := math.Min(s.Memory.percentileOf(&m.mem, pct, total)*margin*scale, p.MemoryMaxValue)
			return ceil(math.Max(v, minMem))
		}
		e.Target.MemoryBytes = mem(p.MemoryPercentile, 1)
		e.Lower.MemoryBytes = mem(p.LowerPercentile, lowerScale)
		e.Upper.MemoryBytes = mem(p.UpperPercentile, upperScale)
	}
	return e
}

// milli converts cores to millicores, rounding up.
func milli(cores float64) int64 { return ceil(cores * 1000) }

// ceil rounds up, forgiving the last bits of float error so that 0.23 cores
// (229.99999999999997 millicores) is 230, not 231 or 229.
func ceil(v float64) int64 {
	return int64(math.Ceil(v * (1 - 1e-12)))
}
