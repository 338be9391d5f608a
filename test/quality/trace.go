package quality

import (
	"fmt"
	"time"
)

// Sample is one step of a container's usage: its CPU demand as 100 ms CFS
// periods, and its memory working set.
//
// A sample's periods are of two kinds, so throttling comes from per-period
// demand, not from the mean. A Burst fraction of them demands BurstCPU
// cores; the rest demand whatever gives the sample's mean CPU.
type Sample struct {
	// CPU is the mean CPU demand over the sample, in cores.
	CPU float64
	// Burst is the fraction of the sample's periods that burst, in [0, 1).
	Burst float64
	// BurstCPU is the demand of a burst period, in cores.
	BurstCPU float64
	// Memory is the working set, in bytes, of a container that has run
	// since the trace's start (see Trace for restarts).
	Memory float64
}

// BaseCPU is the demand of the periods that do not burst, in cores.
func (s Sample) BaseCPU() float64 {
	if s.Burst <= 0 {
		return s.CPU
	}
	return max((s.CPU-s.Burst*s.BurstCPU)/(1-s.Burst), 0)
}

// Values are a container's requests and limits: millicores and bytes,
// zero for unset.
type Values struct {
	// CPURequest and CPULimit are in millicores.
	CPURequest, CPULimit int64
	// MemoryRequest and MemoryLimit are in bytes.
	MemoryRequest, MemoryLimit int64
}

// Guaranteed reports whether the values make a Guaranteed pod: every
// request set and equal to its limit.
func (v Values) Guaranteed() bool {
	return v.CPURequest > 0 && v.CPURequest == v.CPULimit && v.MemoryRequest > 0 && v.MemoryRequest == v.MemoryLimit
}

// String writes the values as a manifest would.
func (v Values) String() string {
	return fmt.Sprintf("cpu %dm/%s memory %s/%s", v.CPURequest, milliOrNone(v.CPULimit), mebi(v.MemoryRequest), mebi(v.MemoryLimit))
}

func milliOrNone(m int64) string {
	if m == 0 {
		return "none"
	}
	return fmt.Sprintf("%dm", m)
}

func mebi(b int64) string {
	if b == 0 {
		return "none"
	}
	return fmt.Sprintf("%dMi", (b+Mi-1)/Mi)
}

// Mi is one mebibyte.
const Mi = 1 << 20

// Trace is one container's usage over weeks, sample by sample, and the
// values its manifest sets.
//
// CPU follows the wall clock: it is load from outside and goes on as
// recorded after a kill. Memory follows the clock too, unless MemoryByAge:
// then it follows the container's age. After a kill at sample k the
// container restarts, and sample j uses the memory of sample j−k: a leak
// starts over, a start-up spike comes again.
type Trace struct {
	// Name is short and unique in a library, e.g. "steady".
	Name string
	// About is one sentence on what the trace models.
	About string
	// Seed is what the trace was generated from; 0 for a recorded one.
	Seed uint64
	// Step is the time between samples.
	Step time.Duration
	// Manifest is the values the workload's manifest sets.
	Manifest Values
	// MemoryByAge makes memory follow the container's age, not the clock.
	MemoryByAge bool
	// Samples are the usage, one per Step from the trace's start.
	Samples []Sample
}

// Duration is the simulated time the trace covers.
func (t *Trace) Duration() time.Duration { return time.Duration(len(t.Samples)) * t.Step }

// Repeated returns the trace played end to end until it covers at least
// d: a recording of minutes replayed as a load that keeps its pattern for
// weeks, as the library's traces last. It returns t when t covers d, and
// an error when the copies would hold more than MaxSamples samples.
func (t *Trace) Repeated(d time.Duration) (*Trace, error) {
	if t.Duration() >= d {
		return t, nil
	}
	n := int((d + t.Step - 1) / t.Step)
	if n > MaxSamples {
		return nil, fmt.Errorf("trace %s: repeated to %s: %d samples of %s, at most %d", t.Name, d, n, t.Step, MaxSamples)
	}
	r := *t
	r.About = fmt.Sprintf("%s (its %s, repeated to %s)", t.About, t.Duration(), d)
	r.Samples = make([]Sample, n)
	for i := range r.Samples {
		r.Samples[i] = t.Samples[i%len(t.Samples)]
	}
	return &r, nil
}

// Validate reports the first field that is out of range, naming it.
func (t *Trace) Validate() error {
	switch {
	case t.Name == "":
		return fmt.Errorf("trace: name: must not be empty")
	case t.Step < time.Second || t.Step%PeriodLength != 0:
		return fmt.Errorf("trace %s: step: must be a whole number of 100ms periods and at least 1s, got %s", t.Name, t.Step)
	case len(t.Samples) == 0:
		return fmt.Errorf("trace %s: samples: none", t.Name)
	case len(t.Samples) > MaxSamples:
		return fmt.Errorf("trace %s: samples: at most %d, got %d", t.Name, MaxSamples, len(t.Samples))
	case t.Manifest.CPURequest < 0 || t.Manifest.CPULimit < 0 || t.Manifest.MemoryRequest < 0 || t.Manifest.MemoryLimit < 0:
		return fmt.Errorf("trace %s: manifest: values must be >= 0, got %s", t.Name, t.Manifest)
	}
	for i, s := range t.Samples {
		if err := s.validate(); err != nil {
			return fmt.Errorf("trace %s: sample %d: %w", t.Name, i, err)
		}
	}
	return nil
}

func (s Sample) validate() error {
	switch {
	case !(s.CPU >= 0) || s.CPU > maxCores:
		return fmt.Errorf("cpu: must be in [0, %g] cores, got %g", float64(maxCores), s.CPU)
	case !(s.Burst >= 0 && s.Burst < 1):
		return fmt.Errorf("burst: must be in [0, 1), got %g", s.Burst)
	case !(s.BurstCPU >= 0) || s.BurstCPU > maxCores:
		return fmt.Errorf("burst_cpu: must be in [0, %g] cores, got %g", float64(maxCores), s.BurstCPU)
	case s.Burst*s.BurstCPU > s.CPU*(1+1e-9):
		return fmt.Errorf("burst_cpu: burst × burst_cpu (%g) must not exceed the mean cpu (%g)", s.Burst*s.BurstCPU, s.CPU)
	case !(s.Memory >= 0) || s.Memory > maxBytes:
		return fmt.Errorf("memory: must be in [0, %g] bytes, got %g", float64(maxBytes), s.Memory)
	}
	return nil
}

// Bounds of a trace, so a loaded file cannot make the replay unbounded.
const (
	// MaxSamples is the most samples a trace holds: 8 weeks at one a minute
	// is 80,640.
	MaxSamples = 1 << 20
	maxCores   = 1024
	maxBytes   = 1 << 42
)
