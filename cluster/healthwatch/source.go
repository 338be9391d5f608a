package healthwatch

import (
	"cmp"
	"math"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// KernelSource gives the OOM kills the node agents saw in the kernel
// (docs/design.md sections 3 and 5). They include kills that do not
// restart a container, and several kills that pod status folds into one
// lastState.
type KernelSource interface {
	// OOMKills returns the kills of the container in the pod at times in
	// (from, to]; ok is false when the source has no data for the
	// container, and the status count alone is used.
	OOMKills(podUID types.UID, container string, from, to time.Time) (n int, ok bool)
}

// OOMCountSource gives the kernel's absolute OOM kill counts of a
// container's instances, as the node agents last read them. A count is
// the memory cgroup's cumulative oom_kill counter. Kills that no OOM
// event brought are in it: made while the agent or the leader was down,
// or dropped. A KernelSource that is one too is asked for them.
type OOMCountSource interface {
	// OOMKillCounts returns the latest count of each instance of the
	// container in the pod whose count an agent read; none when no agent
	// did.
	OOMKillCounts(podUID types.UID, container string) []InstanceOOMKills
}

// InstanceOOMKills is one container instance's absolute OOM kill count.
type InstanceOOMKills struct {
	// Started is when the instance started (zero when unknown); a
	// restarted container is a new instance, a new cgroup whose count
	// starts at zero.
	Started time.Time
	// Kills is the kernel's count of OOM kills in the instance's cgroup
	// since it was created.
	Kills uint64
	// At is when the agent read it.
	At time.Time
}

// ThrottleWindow is one container name's CFS counters over the throttling
// window (docs/design.md section 3): Σ Δnr_throttled and Σ Δnr_periods over
// the adopted pods. Float, so that a PromQL source fits; counters from the
// agents are whole numbers, exact in a float64 up to 2^53.
type ThrottleWindow struct {
	// Throttled is Σ Δnr_throttled: periods in which the container was
	// throttled.
	Throttled float64
	// Periods is Σ Δnr_periods: CFS enforcement periods that elapsed.
	Periods float64
}

// ThrottlingSource gives the throttling window per container name
// (docs/design.md section 3). For each of containers, it sums over the
// given pods the increase of nr_throttled and nr_periods over [from, to].
// A name without data may be left out.
//
// Over the agents' stream it is Counters of a CounterSource. A PromQL
// source (container_cpu_cfs_periods_total and
// container_cpu_cfs_throttled_periods_total) implements it directly. It
// must give the same numbers for the same counters. Evaluate calls it
// synchronously, so a source that queries over the network bounds its own
// calls.
type ThrottlingSource interface {
	// ThrottleWindows returns the windows of containers over pods in
	// [from, to], keyed by container name.
	ThrottleWindows(pods []*corev1.Pod, containers []string, from, to time.Time) (map[string]ThrottleWindow, error)
}

// CounterSample is one reading of a container's cpu.stat counters
// (docs/design.md section 5): nr_periods and nr_throttled of one container
// instance. An instance is one cgroup, whose counters start at 0 when it
// is created.
type CounterSample struct {
	// PodUID is the pod's UID.
	PodUID types.UID
	// Container is the container's name.
	Container string
	// Started is when the container instance started (its cgroup
	// appeared); a restarted container is a new instance. Zero when
	// unknown.
	Started time.Time
	// At is when the counters were read.
	At time.Time
	// Periods is cpu.stat nr_periods.
	Periods uint64
	// Throttled is cpu.stat nr_throttled.
	Throttled uint64
	// OOMKills is the kernel's absolute count of OOM kills in the
	// instance's memory cgroup, when HasOOMKills (the agent read it).
	OOMKills uint64
	// HasOOMKills is true when OOMKills was read.
	HasOOMKills bool
}

// CounterSource gives raw counter samples, such as the agents stream
// (docs/design.md sections 3 and 6); the health watch computes the increases
// itself (see Counters).
type CounterSource interface {
	// Samples returns the samples of the pods' containers: for each
	// container instance the latest sample at or before from, if any, and
	// every sample in (from, to]. Extra samples are harmless.
	Samples(podUIDs []types.UID, from, to time.Time) ([]CounterSample, error)
}

// Counters makes a ThrottlingSource of raw samples (docs/design.md section
// 3). An instance is a pod UID, container and Started. Per instance the
// window's start value is the sample at or just before from.
//   - An instance that started at or after from counts from zero: its
//     counters were 0 when its cgroup appeared, so its first sample is its
//     increase.
//   - An instance that started before from, or whose start is unknown,
//     with no sample at or before from has an unknown value at from. Its
//     first sample in the window is the baseline, so the increase before
//     that sample is not counted: throttling from before the window is
//     never counted.
//   - Within an instance, a drop of either counter is a reset, handled as
//     Prometheus increase() does: the new value is the increase since the
//     reset. It applies to both counters together, since a new cgroup
//     resets both.
//
// Samples after to are ignored. Counters(nil) is nil.
func Counters(src CounterSource) ThrottlingSource {
	if src == nil {
		return nil
	}
	return counterThrottling{src}
}

type counterThrottling struct{ src CounterSource }

func (c counterThrottling) ThrottleWindows(pods []*corev1.Pod, containers []string, from, to time.Time) (map[string]ThrottleWindow, error) {
	uids := make([]types.UID, len(pods))
	for i, p := range pods {
		uids[i] = p.UID
	}
	samples, err := c.src.Samples(uids, from, to)
	if err != nil {
		return nil, err
	}
	return sumWindows(samples, uids, containers, from, to), nil
}

// sumWindows sums the increases of the samples of the given pods and
// containers per container name over [from, to], as Counters describes.
// Samples that come as one run per container instance, oldest first (as
// the agents' store gives them), are summed where they lie; others are copied
// and sorted first.
func sumWindows(samples []CounterSample, uids []types.UID, containers []string, from, to time.Time) map[string]ThrottleWindow {
	pods := make(map[types.UID]struct{}, len(uids))
	for _, u := range uids {
		pods[u] = struct{}{}
	}
	wanted := func(x *CounterSample) bool {
		_, ok := pods[x.PodUID]
		return ok && slices.Contains(containers, x.Container)
	}
	out := make(map[string]ThrottleWindow, len(containers))
	if runs, ok := orderedRuns(samples); ok {
		for _, run := range runs {
			if wanted(&run[0]) {
				AddIncrease(out, run, from, to)
			}
		}
		return out
	}
	s := make([]CounterSample, 0, len(samples))
	for i := range samples {
		if wanted(&samples[i]) {
			s = append(s, samples[i])
		}
	}
	slices.SortFunc(s, func(a, b CounterSample) int {
		return cmp.Or(
			cmp.Compare(a.PodUID, b.PodUID),
			cmp.Compare(a.Container, b.Container),
			a.Started.Compare(b.Started),
			a.At.Compare(b.At),
		)
	})
	for len(s) > 0 {
		n := 1
		for n < len(s) && sameInstance(&s[n], &s[0]) {
			n++
		}
		AddIncrease(out, s[:n], from, to)
		s = s[n:]
	}
	return out
}

// orderedRuns splits samples into runs of one container instance each; ok
// is false unless every instance has exactly one run, oldest sample first.
func orderedRuns(samples []CounterSample) (runs [][]CounterSample, ok bool) {
	type key struct {
		pod       types.UID
		container string
		started   int64
	}
	seen := map[key]struct{}{}
	for len(samples) > 0 {
		n := 1
		for n < len(samples) && sameInstance(&samples[n], &samples[0]) {
			if samples[n].At.Before(samples[n-1].At) {
				return nil, false
			}
			n++
		}
		k := key{samples[0].PodUID, samples[0].Container, instantKey(samples[0].Started)}
		if _, dup := seen[k]; dup {
			return nil, false
		}
		seen[k] = struct{}{}
		runs = append(runs, samples[:n])
		samples = samples[n:]
	}
	return runs, true
}

func sameInstance(a, b *CounterSample) bool {
	return a.PodUID == b.PodUID && a.Container == b.Container && a.Started.Equal(b.Started)
}

// AddIncrease adds the increase of one container instance's counters over
// [from, to] to its container name's window in out, as Counters describes.
// run is the instance's samples, oldest first. A store that keeps samples
// per instance (cluster/signals) sums its windows in place with it, so
// its sums are the rules' own.
func AddIncrease(out map[string]ThrottleWindow, run []CounterSample, from, to time.Time) {
	if len(run) == 0 {
		return
	}
	// i is the first sample after from; the baseline comes before it.
	i := 0
	for i < len(run) && !run[i].At.After(from) {
		i++
	}
	var prevP, prevT uint64
	switch {
	case i > 0:
		prevP, prevT = run[i-1].Periods, run[i-1].Throttled
	case !run[0].Started.IsZero() && !run[0].Started.Before(from):
		// Born in the window: counters from zero.
	default:
		prevP, prevT = run[0].Periods, run[0].Throttled
		i = 1
	}
	var dP, dT uint64
	for _, x := range run[i:] {
		if x.At.After(to) {
			break
		}
		if x.Periods < prevP || x.Throttled < prevT {
			dP += x.Periods
			dT += x.Throttled
		} else {
			dP += x.Periods - prevP
			dT += x.Throttled - prevT
		}
		prevP, prevT = x.Periods, x.Throttled
	}
	w := out[run[0].Container]
	w.Periods += float64(dP)
	w.Throttled += float64(dT)
	out[run[0].Container] = w
}

// instantKey makes a map key of a start time: time.Time values of the same
// instant may differ in location or monotonic reading.
func instantKey(t time.Time) int64 {
	if t.IsZero() {
		return math.MinInt64
	}
	return t.UnixNano()
}
