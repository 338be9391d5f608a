package quality

import (
	"fmt"
	"time"
)

// Observation is what a strategy sees after a sample: what ran, under
// which values, and what the kernel did.
type Observation struct {
	// At is the end of the sample.
	At time.Time
	// Values are the values in force during the sample.
	Values Values
	// Outcome is what the sample did.
	Outcome
}

// Action is what a strategy did after a sample.
type Action int

// The actions a replay counts.
const (
	// Kept: the values stay.
	Kept Action = iota
	// Changed: new values, from a recommendation.
	Changed
	// RolledBack: values restored after harm.
	RolledBack
)

// Strategy sets a container's values, fed sample by sample.
type Strategy interface {
	// Name is the strategy's name in the table.
	Name() string
	// Start begins a trace: the manifest's values are in force at start.
	Start(manifest Values, start time.Time)
	// Step sees a sample's observation and returns the values for the
	// next sample and what it did.
	Step(o Observation) (Values, Action)
}

// Result is one strategy's figures on one trace.
type Result struct {
	// Strategy and Trace name what was replayed; Trace is "all" in a sum.
	Strategy, Trace string
	// Hours is the simulated time.
	Hours float64
	// CPUUsage and CPUSlack are core-hours; MemoryUsage and MemorySlack
	// GiB-hours. Usage is the demand; slack is request − demand where the
	// request is above it (Autopilot's slack, with Kubernetes' request for
	// Borg's limit).
	CPUUsage, CPUSlack, MemoryUsage, MemorySlack float64
	// OOMKills counts the kernel's kills.
	OOMKills int
	// Throttled counts throttled periods; Periods every 100 ms period of
	// the trace, with a quota or not.
	Throttled, Periods int64
	// Changes counts changed values, Rollbacks restored ones.
	Changes, Rollbacks int
	// Values are the values in force at each sample, for the plot.
	Values []Values
}

// ThrottledRatio is throttled periods over all periods.
func (r *Result) ThrottledRatio() float64 { return ratio(float64(r.Throttled), float64(r.Periods)) }

// CPUSlackRatio is CPU slack relative to CPU usage.
func (r *Result) CPUSlackRatio() float64 { return ratio(r.CPUSlack, r.CPUUsage) }

// MemorySlackRatio is memory slack relative to memory usage.
func (r *Result) MemorySlackRatio() float64 { return ratio(r.MemorySlack, r.MemoryUsage) }

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// Add sums o into r: the figures, not the values.
func (r *Result) Add(o *Result) {
	r.Hours += o.Hours
	r.CPUUsage += o.CPUUsage
	r.CPUSlack += o.CPUSlack
	r.MemoryUsage += o.MemoryUsage
	r.MemorySlack += o.MemorySlack
	r.OOMKills += o.OOMKills
	r.Throttled += o.Throttled
	r.Periods += o.Periods
	r.Changes += o.Changes
	r.Rollbacks += o.Rollbacks
}

// Epoch is when every replay starts: a Monday at midnight UTC, so the
// weekly traces' weekdays fall where they say.
var Epoch = time.Date(2026, time.January, 5, 0, 0, 0, 0, time.UTC)

// gib is one gibibyte in bytes.
const gib = 1 << 30

// Replay feeds the trace through the strategy, sample by sample, and
// returns its figures. keep records the values in force per sample, for
// the plot.
func Replay(t *Trace, s Strategy, keep bool) (*Result, error) {
	if err := t.Validate(); err != nil {
		return nil, fmt.Errorf("replay %s: %w", s.Name(), err)
	}
	r := &Result{Strategy: s.Name(), Trace: t.Name, Hours: t.Duration().Hours()}
	h := t.Step.Hours()
	periods := int64(t.Step / PeriodLength)
	k := NewKernel(t)
	v := t.Manifest
	s.Start(v, Epoch)
	for i, smp := range t.Samples {
		o := k.Run(i, v)
		cpu, mem := 0.0, 0.0
		if o.Running {
			cpu, mem = smp.CPU, o.Wanted
		}
		r.CPUUsage += cpu * h
		r.CPUSlack += max(float64(v.CPURequest)/1000-cpu, 0) * h
		r.MemoryUsage += mem / gib * h
		r.MemorySlack += max(float64(v.MemoryRequest)-mem, 0) / gib * h
		r.Periods += periods
		r.Throttled += int64(o.Throttled)
		if o.OOMKilled {
			r.OOMKills++
		}
		if keep {
			r.Values = append(r.Values, v)
		}
		next, a := s.Step(Observation{At: Epoch.Add(time.Duration(i+1) * t.Step), Values: v, Outcome: o})
		switch a {
		case Changed:
			r.Changes++
		case RolledBack:
			r.Rollbacks++
		}
		v = next
	}
	return r, nil
}
