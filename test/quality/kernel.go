package quality

import (
	"math"
	"time"
)

// PeriodLength is the CFS period: the kernel's default cpu.cfs_period_us,
// which the kubelet keeps.
const PeriodLength = 100 * time.Millisecond

// The kubelet's CrashLoopBackOff: a container killed again soon waits
// 10 s, doubled per kill, up to 5 minutes; 10 minutes of running resets it.
const (
	crashBackoffFirst = 10 * time.Second
	crashBackoffMax   = 5 * time.Minute
	crashBackoffReset = 10 * time.Minute
)

// Outcome is what one sample did under the values in force.
type Outcome struct {
	// Running is false while the container waits out a crash-loop back-off.
	Running bool
	// CPU is the CPU that ran, in cores: the demand, capped by the quota in
	// each period.
	CPU float64
	// Memory is the working set in bytes; at an OOM kill, the limit.
	Memory float64
	// Wanted is the memory the container asked for, in bytes: the
	// working set, or more at an OOM kill.
	Wanted float64
	// OOMKilled is true when the working set exceeded the memory limit.
	OOMKilled bool
	// Periods is the sample's CFS periods with a quota, 0 without a CPU limit.
	Periods int
	// Throttled is how many of them were throttled: the demand exceeded
	// the quota.
	Throttled int
}

// Throttling is the CFS outcome of one sample's demand under a CPU limit
// in millicores (0: no quota): the CPU that ran in cores, the periods
// with a quota and the throttled ones.
//
// A period is throttled when its demand exceeds the quota. Work a
// throttled period could not do is dropped, not carried over, so a
// sustained overload throttles every period but a short one is not
// spread into the next.
func Throttling(s Sample, step time.Duration, limitMilli int64) (cpu float64, periods, throttled int) {
	n := int(step / PeriodLength)
	bursts := int(math.Round(s.Burst * float64(n)))
	base := s.BaseCPU()
	if limitMilli <= 0 {
		return s.CPU, 0, 0
	}
	q := float64(limitMilli) / 1000
	if base > q {
		throttled += n - bursts
	}
	if bursts > 0 && s.BurstCPU > q {
		throttled += bursts
	}
	cpu = (float64(n-bursts)*math.Min(base, q) + float64(bursts)*math.Min(s.BurstCPU, q)) / float64(n)
	return cpu, n, throttled
}

// OOMKill reports whether a working set of memory bytes is killed under a
// memory limit in bytes (0: none): only above the limit, as the kernel
// charges up to it and kills when a charge cannot be reclaimed.
func OOMKill(memory float64, limit int64) bool {
	return limit > 0 && memory > float64(limit)
}

// Kernel runs one container through a trace: which sample of its memory
// it is at (its age), and its crash-loop back-off.
type Kernel struct {
	trace *Trace
	// born is the sample the running container started at.
	born int
	// down is how many more samples the container waits before it restarts.
	down int
	// kills counts the kills since the container last ran crashBackoffReset.
	kills int
}

// NewKernel starts the trace's container at its first sample.
func NewKernel(t *Trace) *Kernel { return &Kernel{trace: t} }

// Run runs sample i under v.
func (k *Kernel) Run(i int, v Values) Outcome {
	t := k.trace
	if k.down > 0 {
		k.down--
		if k.down == 0 {
			k.born = i + 1
		}
		return Outcome{}
	}
	if time.Duration(i-k.born)*t.Step >= crashBackoffReset {
		k.kills = 0
	}
	s := t.Samples[i]
	if t.MemoryByAge {
		s.Memory = t.Samples[i-k.born].Memory
	}
	o := Outcome{Running: true, Memory: s.Memory, Wanted: s.Memory}
	o.CPU, o.Periods, o.Throttled = Throttling(s, t.Step, v.CPULimit)
	if OOMKill(s.Memory, v.MemoryLimit) {
		o.OOMKilled, o.Memory = true, float64(v.MemoryLimit)
		k.kills++
		wait := crashBackoffFirst << min(k.kills-1, 10)
		wait = min(wait, crashBackoffMax)
		// The restart's wait, rounded up to whole samples; the container
		// starts over (age 0) at the sample after it.
		k.down = int((wait + t.Step - 1) / t.Step)
	}
	return o
}
