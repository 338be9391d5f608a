package quality

import (
	"fmt"
	"time"

	"github.com/kerf-dev/kerf/cluster/signals"
)

// RecordedDir is where make record-traces writes the traces it records
// on the sandbox, relative to this package's directory; make
// bench-quality replays every trace in it.
const RecordedDir = "testdata/recorded"

// Recorder makes a trace of one container from what its agent reports:
// the usage readings of cluster/signals and, where it has a CPU limit,
// its CFS counters. A test that runs a real workload records one with it,
// and WriteTrace stores it for make bench-quality.
//
// What the readings cannot say is approximated, so a recorded trace is a
// lower bound of the demand:
//   - CPU is the rate between two readings, the CPU that ran;
//   - per-period demand is known only where periods were throttled: a
//     throttled fraction f under a limit L becomes bursts of f of the
//     periods at L;
//   - memory is the highest working set of the step.
type Recorder struct {
	t       Trace
	start   time.Time
	prev    signals.UsageSample
	have    bool
	cpu     float64 // core-seconds in the current step
	memory  float64
	periods int64
	thr     int64
	limit   float64 // cores
	cur     int     // the current step's index
	dropped int
}

// NewRecorder starts a trace named name from start, one sample per step.
func NewRecorder(name, about string, start time.Time, step time.Duration, manifest Values) *Recorder {
	return &Recorder{t: Trace{Name: name, About: about, Step: step, Manifest: manifest}, start: start}
}

// AddUsage adds one of the agent's usage readings; readings must come in
// time order. A CPU counter that goes back means the container restarted.
func (r *Recorder) AddUsage(s signals.UsageSample) {
	r.advance(s.At)
	if r.have && s.At.After(r.prev.At) && s.CPU >= r.prev.CPU {
		r.cpu += (s.CPU - r.prev.CPU).Seconds()
	}
	r.prev, r.have = s, true
	r.memory = max(r.memory, float64(s.WorkingSet))
}

// AddCFS adds the CFS periods and throttled periods counted since the
// previous call, at at, under a CPU limit of limitMilli millicores.
func (r *Recorder) AddCFS(at time.Time, periods, throttled, limitMilli int64) {
	r.advance(at)
	r.periods += periods
	r.thr += throttled
	r.limit = float64(limitMilli) / 1000
}

// advance closes the steps before the one at falls in. A reading at a
// step's end covers the time before it, so it is the step's.
func (r *Recorder) advance(at time.Time) {
	i := max(int((at.Sub(r.start)-1)/r.t.Step), 0)
	for r.cur < i {
		r.flush()
		r.cur++
	}
}

// flush closes the current step into a sample.
func (r *Recorder) flush() {
	if len(r.t.Samples) >= MaxSamples {
		r.dropped++
		return
	}
	s := Sample{CPU: r.cpu / r.t.Step.Seconds(), Memory: r.memory}
	if r.periods > 0 && r.thr > 0 {
		s.Burst = min(float64(r.thr)/float64(r.periods), 0.99)
		s.BurstCPU = r.limit
		s.CPU = max(s.CPU, s.Burst*s.BurstCPU)
	}
	r.t.Samples = append(r.t.Samples, s)
	r.cpu, r.periods, r.thr = 0, 0, 0
	if r.have {
		r.memory = float64(r.prev.WorkingSet)
	}
}

// Trace closes the current step and returns the trace. It is an error to
// have recorded more than MaxSamples steps: none is dropped silently.
func (r *Recorder) Trace() (*Trace, error) {
	r.flush()
	r.cur++
	if r.dropped > 0 {
		return nil, fmt.Errorf("record trace %s: samples: at most %d, %d more dropped", r.t.Name, MaxSamples, r.dropped)
	}
	t := r.t
	t.Samples = append([]Sample(nil), r.t.Samples...)
	return &t, t.Validate()
}
