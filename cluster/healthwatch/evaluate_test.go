package healthwatch

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/test/watchtest"
)

var (
	cpuOnly   = []v1alpha1.ResourceName{v1alpha1.ResourceCPU}
	memOnly   = []v1alpha1.ResourceName{v1alpha1.ResourceMemory}
	cpuAndMem = []v1alpha1.ResourceName{v1alpha1.ResourceCPU, v1alpha1.ResourceMemory}
)

func TestThrottlingWindowStartsAtTwoMinutes(t *testing.T) {
	pod := watchtest.NewPod("web-1", watchtest.CPUDown)
	tests := []struct {
		name      string
		now       time.Duration
		points    []point
		state     State
		evaluated bool
		message   string
		nextCheck time.Time
	}{
		{
			name:      "at 1m59s the window is not open",
			now:       time.Minute + 59*time.Second,
			points:    []point{{0, 0, 0}, {time.Minute, 5000, 5000}},
			state:     StateWatching,
			message:   "throttling: the throttling window opens at T0+2m0s (2026-12-01T10:02:00Z)",
			nextCheck: watchtest.After(2 * time.Minute),
		},
		{
			name:      "at 2m the window is open but empty",
			now:       2 * time.Minute,
			points:    []point{{0, 0, 0}, {2 * time.Minute, 5000, 5000}},
			state:     StateWatching,
			message:   "throttling: container app only 0 of 300 periods since T0+2m0s",
			nextCheck: watchtest.After(30 * time.Minute),
		},
		{
			name: "throttling up to 2m does not count, the sample at 2m is the start",
			now:  10 * time.Minute,
			points: []point{
				{time.Minute + 59*time.Second, 10000, 5000},
				{2 * time.Minute, 10400, 5400},
				{10 * time.Minute, 11600, 5400},
			},
			state:     StateWatching,
			evaluated: true,
			message:   "throttlingRatio 0.00 < 0.25 (container app, 1200 periods)",
			nextCheck: watchtest.After(30 * time.Minute),
		},
		{
			name: "without a sample at 2m the one at 1m59s is the start",
			now:  10 * time.Minute,
			points: []point{
				{time.Minute + 59*time.Second, 10000, 5000},
				{2*time.Minute + time.Second, 10400, 5400},
				{10 * time.Minute, 11600, 5400},
			},
			state:     StateBreached,
			evaluated: true,
			message:   "throttlingRatio 0.25 ≥ 0.25 (container app, 1600 periods)",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newRecorded()
			feed(m, pod, "app", watchtest.Started, tt.points...)
			v := Evaluate(watchtest.After(tt.now), Input{
				Change:     watchtest.Change(v1alpha1.StrategyInPlace, watchtest.CPUDown),
				Pods:       []corev1.Pod{pod},
				Throttling: Counters(m),
			})
			assert.Equal(t, tt.state, v.State)
			assert.True(t, v.ThrottlingApplies)
			assert.Equal(t, tt.evaluated, v.ThrottlingEvaluated)
			assert.Contains(t, v.Message, tt.message)
			assert.Equal(t, tt.nextCheck, v.NextCheck)
		})
	}
}

func TestThrottlingNeeds300Periods(t *testing.T) {
	pod := watchtest.NewPod("web-1", watchtest.CPUDown)
	tests := []struct {
		name      string
		periods   uint64
		state     State
		evaluated bool
		message   string
	}{
		{"299 periods, all throttled, are not evaluated", 299, StateWatching, false,
			"throttling: container app only 299 of 300 periods since T0+2m0s"},
		{"300 periods are", 300, StateBreached, true,
			"Throttling breach since the change applied at 2026-12-01T10:00:00Z: roll back cpu; 1 of 1 pods adopted; restarts 0 < 3; throttlingRatio 1.00 ≥ 0.25 (container app, 300 periods)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newRecorded()
			feed(m, pod, "app", watchtest.Started, point{2 * time.Minute, 1000, 100}, point{5 * time.Minute, 1000 + tt.periods, 100 + tt.periods})
			v := Evaluate(watchtest.After(5*time.Minute), Input{
				Change:     watchtest.Change(v1alpha1.StrategyInPlace, watchtest.CPUDown),
				Pods:       []corev1.Pod{pod},
				Throttling: Counters(m),
			})
			assert.Equal(t, tt.state, v.State)
			assert.Equal(t, tt.evaluated, v.ThrottlingEvaluated)
			assert.Contains(t, v.Message, tt.message)
		})
	}
}

func TestThrottlingRatioAtThreshold(t *testing.T) {
	tests := []struct {
		name      string
		ratio     string
		throttled uint64
		state     State
		figure    string
	}{
		{"just below", "0.25", 299, StateWatching, "throttlingRatio 0.24 < 0.25 (container app, 1200 periods)"},
		{"exactly at", "0.25", 300, StateBreached, "throttlingRatio 0.25 ≥ 0.25 (container app, 1200 periods)"},
		{"exactly at a ratio a float cannot hold", "0.3", 360, StateBreached, "throttlingRatio 0.30 ≥ 0.3 (container app, 1200 periods)"},
		{"just below it", "0.3", 359, StateWatching, "throttlingRatio 0.29 < 0.3 (container app, 1200 periods)"},
		{"a finer threshold shows more decimals", "0.2505", 301, StateBreached, "throttlingRatio 0.2508 ≥ 0.2505 (container app, 1200 periods)"},
		{"just below a finer threshold", "0.2505", 300, StateWatching, "throttlingRatio 0.2500 < 0.2505 (container app, 1200 periods)"},
		{"a ratio of 1", "1", 1200, StateBreached, "throttlingRatio 1.00 ≥ 1 (container app, 1200 periods)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := watchtest.NewPod("web-1", watchtest.CPUDown)
			m := newRecorded()
			feed(m, pod, "app", watchtest.Started, point{2 * time.Minute, 0, 0}, point{10 * time.Minute, 1200, tt.throttled})
			v := Evaluate(watchtest.After(10*time.Minute), Input{
				Change:     watchtest.Change(v1alpha1.StrategyInPlace, watchtest.CPUDown),
				Guardrails: watchtest.Guardrails(func(g *v1alpha1.RollbackGuardrails) { g.ThrottlingRatio = tt.ratio }),
				Pods:       []corev1.Pod{pod},
				Throttling: Counters(m),
			})
			assert.Equal(t, tt.state, v.State)
			assert.Contains(t, v.Message, tt.figure)
			if tt.state == StateBreached {
				assert.Equal(t, v1alpha1.HealthWatchThrottling, v.Reason)
				assert.Equal(t, cpuOnly, v.Restore)
			}
		})
	}
}

func TestOOMKillsIgnoredWhenTheChangeTouchedOnlyCPU(t *testing.T) {
	pod := watchtest.NewPod("web-1", watchtest.CPUDown, watchtest.LastTerminated("app", "OOMKilled", "c1", watchtest.After(time.Minute)))
	m := newRecorded()
	m.AddOOMKill(pod.UID, "app", watchtest.After(time.Minute))
	m.AddOOMKill(pod.UID, "app", watchtest.After(2*time.Minute))

	cpu := Evaluate(watchtest.After(3*time.Minute), Input{Change: watchtest.Change(v1alpha1.StrategyInPlace, watchtest.CPUDown), Pods: []corev1.Pod{pod}, Kernel: m})
	assert.Equal(t, StateWatching, cpu.State)
	assert.NotContains(t, cpu.Message, "oomKills")

	memPod := watchtest.NewPod("web-1", watchtest.MemDown, watchtest.LastTerminated("app", "OOMKilled", "c1", watchtest.After(time.Minute)))
	mem := Evaluate(watchtest.After(3*time.Minute), Input{Change: watchtest.Change(v1alpha1.StrategyInPlace, watchtest.MemDown), Pods: []corev1.Pod{memPod}, Kernel: m})
	assert.Equal(t, StateBreached, mem.State)
	assert.Equal(t, []string{"oomKills 2 ≥ 1"}, mem.Figures)
	assert.Equal(t, memOnly, mem.Restore)
}

func TestOOMKillsAreMaxOfKernelAndStatus(t *testing.T) {
	tests := []struct {
		name   string
		opts   []func(*corev1.Pod)
		kernel []time.Duration // kill times after T0; nil: no kernel data
		known  bool
		want   string
	}{
		{"kernel sees more kills than status", []func(*corev1.Pod){watchtest.LastTerminated("app", "OOMKilled", "c1", watchtest.After(5*time.Minute))},
			[]time.Duration{time.Minute, 3 * time.Minute, 5 * time.Minute}, true, "oomKills 3 ≥ 1 (pod web-1 container app: 3 (kernel 3, status 1))"},
		{"status sees a kill the kernel source missed", []func(*corev1.Pod){watchtest.LastTerminated("app", "OOMKilled", "c1", watchtest.After(5*time.Minute))},
			nil, true, "oomKills 1 ≥ 1 (pod web-1 container app: 1 (kernel 0, status 1))"},
		{"no kernel data: status alone", []func(*corev1.Pod){watchtest.LastTerminated("app", "OOMKilled", "c1", watchtest.After(5*time.Minute))},
			nil, false, "oomKills 1 ≥ 1 (pod web-1 container app: 1 (status; no kernel data))"},
		{"a kill the status shows twice counts once", []func(*corev1.Pod){
			watchtest.Terminated("app", "OOMKilled", "c1", watchtest.After(5*time.Minute)), watchtest.LastTerminated("app", "OOMKilled", "c1", watchtest.After(5*time.Minute))},
			nil, false, "oomKills 1 ≥ 1"},
		{"state and lastState are two kills", []func(*corev1.Pod){
			watchtest.Terminated("app", "OOMKilled", "c2", watchtest.After(6*time.Minute)), watchtest.LastTerminated("app", "OOMKilled", "c1", watchtest.After(5*time.Minute))},
			nil, false, "oomKills 2 ≥ 1"},
		{"a kill at or before T0 does not count", []func(*corev1.Pod){watchtest.LastTerminated("app", "OOMKilled", "c1", watchtest.T0)},
			[]time.Duration{0, -time.Minute}, true, "oomKills 0 < 1"},
		{"another reason is no OOM kill", []func(*corev1.Pod){watchtest.LastTerminated("app", "Error", "c1", watchtest.After(5*time.Minute))},
			nil, false, "oomKills 0 < 1"},
		{"an OOM kill of an unchanged container does not count", []func(*corev1.Pod){watchtest.LastTerminated("sidecar", "OOMKilled", "c1", watchtest.After(5*time.Minute))},
			nil, false, "oomKills 0 < 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := watchtest.NewPod("web-1", watchtest.MemDown, tt.opts...)
			m := newRecorded()
			for _, d := range tt.kernel {
				m.AddOOMKill(pod.UID, "app", watchtest.After(d))
			}
			if tt.known && len(tt.kernel) == 0 {
				feed(m, pod, "app", watchtest.Started, point{time.Minute, 0, 0})
			}
			v := Evaluate(watchtest.After(10*time.Minute), Input{Change: watchtest.Change(v1alpha1.StrategyInPlace, watchtest.MemDown), Pods: []corev1.Pod{pod}, Kernel: m})
			assert.Contains(t, v.Message, tt.want)
		})
	}
}

// Status times are whole seconds: a kill in T0's own second counts when the
// container restarted since its baseline at T0 (the run ended after the
// change was recorded), and not otherwise.
func TestOOMKillInTheSecondOfT0CountsOnceTheContainerRestarted(t *testing.T) {
	var base []v1alpha1.RestartBaseline
	for _, tt := range []struct {
		name     string
		restarts int32
		want     string
	}{
		{"restarted since T0", 1, "oomKills 1 ≥ 1"},
		{"no restart since T0: the run may have ended before the change", 0, "oomKills 0 < 1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pod := watchtest.NewPod("web-1", watchtest.MemDown, watchtest.LastTerminated("app", "OOMKilled", "c1", watchtest.T0.Add(400*time.Millisecond).Truncate(time.Second)), watchtest.Restarts("app", tt.restarts))
			base = append(base, v1alpha1.RestartBaseline{PodUID: string(pod.UID), Container: "app"})
			in := Input{Change: watchtest.Change(v1alpha1.StrategyInPlace, watchtest.MemDown), Pods: []corev1.Pod{pod}, RestartBaselines: base}
			// T0 as the leader holds it in memory, with its sub-second part.
			in.Change.AppliedAt = metav1.NewTime(watchtest.T0.Add(300 * time.Millisecond))
			v := Evaluate(watchtest.After(10*time.Second), in)
			assert.Contains(t, v.Message, tt.want)
		})
	}
}

func TestOOMKillsAfterTheWatchEndDoNotCount(t *testing.T) {
	pod := watchtest.NewPod("web-1", watchtest.MemDown, watchtest.LastTerminated("app", "OOMKilled", "c1", watchtest.After(30*time.Minute+time.Second)))
	m := newRecorded()
	m.AddOOMKill(pod.UID, "app", watchtest.After(30*time.Minute+time.Second))
	v := Evaluate(watchtest.After(31*time.Minute), Input{Change: watchtest.Change(v1alpha1.StrategyInPlace, watchtest.MemDown), Pods: []corev1.Pod{pod}, Kernel: m})
	assert.Equal(t, StateHealthy, v.State)

	m.AddOOMKill(pod.UID, "app", watchtest.After(30*time.Minute))
	v = Evaluate(watchtest.After(31*time.Minute), Input{Change: watchtest.Change(v1alpha1.StrategyInPlace, watchtest.MemDown), Pods: []corev1.Pod{pod}, Kernel: m})
	assert.Equal(t, StateBreached, v.State, "a kill at the end still counts when evaluated late")
}

func TestRestartsCountIncreasesSinceT0(t *testing.T) {
	ch := watchtest.Change(v1alpha1.StrategyInPlace, watchtest.CPUDown)
	old := watchtest.NewPod("web-1", watchtest.CPUDown, watchtest.Restarts("app", 5))
	baselines := []v1alpha1.RestartBaseline{{PodUID: string(old.UID), Container: "app", RestartCount: 3}, {PodUID: string(old.UID), Container: "sidecar"}}
	tests := []struct {
		name  string
		pods  []corev1.Pod
		state State
		want  string
	}{
		{"restarts before T0 do not count", []corev1.Pod{old}, StateWatching, "restarts 2 < 3 (pod web-1 container app: 2)"},
		{"a pod created after T0 counts in full", []corev1.Pod{old, watchtest.NewPod("web-2", watchtest.CPUDown, watchtest.CreatedAt(watchtest.After(time.Minute)), watchtest.Restarts("app", 1))},
			StateBreached, "restarts 3 ≥ 3 (pod web-1 container app: 2, pod web-2 container app: 1)"},
		{"in full even when a baseline was captured for it", []corev1.Pod{watchtest.NewPod("web-1", watchtest.CPUDown, watchtest.CreatedAt(watchtest.After(time.Second)), watchtest.Restarts("app", 5))},
			StateBreached, "restarts 5 ≥ 3"},
		{"a pod without a baseline counts in full", []corev1.Pod{old, watchtest.NewPod("web-3", watchtest.CPUDown, watchtest.Restarts("app", 1))},
			StateBreached, "restarts 3 ≥ 3"},
		{"a restartCount below its baseline counts 0", []corev1.Pod{watchtest.NewPod("web-1", watchtest.CPUDown, watchtest.Restarts("app", 1))},
			StateWatching, "restarts 0 < 3"},
		{"restarts of an unchanged container do not count", []corev1.Pod{watchtest.NewPod("web-1", watchtest.CPUDown, watchtest.Restarts("app", 3), watchtest.Restarts("sidecar", 9))},
			StateWatching, "restarts 0 < 3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := Evaluate(watchtest.After(5*time.Minute), Input{Change: ch, Pods: tt.pods, RestartBaselines: baselines})
			assert.Equal(t, tt.state, v.State)
			assert.Contains(t, v.Message, tt.want)
			if tt.state == StateBreached {
				assert.Equal(t, v1alpha1.HealthWatchRestarts, v.Reason)
				assert.Equal(t, cpuOnly, v.Restore)
			}
		})
	}
}

func TestThrottlingCounterResetMidWindow(t *testing.T) {
	pod := watchtest.NewPod("web-1", watchtest.CPUDown)
	restarted := watchtest.After(5*time.Minute + 30*time.Second)
	tests := []struct {
		name string
		feed func(m *recorded)
	}{
		{"a drop in one series is a reset", func(m *recorded) {
			feed(m, pod, "app", time.Time{},
				point{2 * time.Minute, 10000, 0}, point{5 * time.Minute, 10600, 100},
				point{6 * time.Minute, 200, 200}, point{10 * time.Minute, 800, 400})
		}},
		{"a new container instance starts from zero", func(m *recorded) {
			feed(m, pod, "app", watchtest.Started, point{2 * time.Minute, 10000, 0}, point{5 * time.Minute, 10600, 100})
			feed(m, pod, "app", restarted, point{6 * time.Minute, 200, 200}, point{10 * time.Minute, 800, 400})
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newRecorded()
			tt.feed(m)
			v := Evaluate(watchtest.After(10*time.Minute), Input{Change: watchtest.Change(v1alpha1.StrategyInPlace, watchtest.CPUDown), Pods: []corev1.Pod{pod}, Throttling: Counters(m)})
			assert.Equal(t, StateBreached, v.State)
			// 600 + 200 + 600 periods, 100 + 200 + 200 throttled.
			assert.Equal(t, []string{"throttlingRatio 0.35 ≥ 0.25 (container app, 1400 periods)"}, v.Figures)
		})
	}
}

func TestThrottlingContainerBornAfterWindowStart(t *testing.T) {
	tests := []struct {
		name    string
		started time.Time
		state   State
		message string
	}{
		{"started after the window start: counts from zero", watchtest.After(5 * time.Minute), StateBreached,
			"throttlingRatio 0.50 ≥ 0.25 (container app, 400 periods)"},
		{"started at the window start: counts from zero", watchtest.After(2 * time.Minute), StateBreached,
			"throttlingRatio 0.50 ≥ 0.25 (container app, 400 periods)"},
		{"started before it, first seen after: the first sample is the baseline", watchtest.After(time.Minute), StateWatching,
			"container app only 0 of 300 periods"},
		{"start unknown: the first sample is the baseline", time.Time{}, StateWatching,
			"container app only 0 of 300 periods"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := watchtest.NewPod("web-2", watchtest.CPUDown, watchtest.CreatedAt(watchtest.After(time.Minute)))
			m := newRecorded()
			feed(m, pod, "app", tt.started, point{6 * time.Minute, 400, 200})
			v := Evaluate(watchtest.After(6*time.Minute), Input{Change: watchtest.Change(v1alpha1.StrategyInPlace, watchtest.CPUDown), Pods: []corev1.Pod{pod}, Throttling: Counters(m)})
			assert.Equal(t, tt.state, v.State)
			assert.Contains(t, v.Message, tt.message)
		})
	}
}

func TestThrottlingSumsContainerNameOverPodsAndReportsTheWorst(t *testing.T) {
	ch := watchtest.Change(v1alpha1.StrategyInPlace, watchtest.CPUDown)
	ch.Containers = append(ch.Containers, v1alpha1.ContainerChange{
		Name:     "sidecar",
		Previous: watchtest.Values{ReqCPU: "100m", LimCPU: "1"}.Resources(),
		Applied:  watchtest.Values{ReqCPU: "100m", LimCPU: "200m"}.Resources(),
	})
	side := func(p *corev1.Pod) {
		rr := watchtest.Values{ReqCPU: "100m", ReqMem: "64Mi", LimCPU: "200m"}.Requirements()
		p.Spec.Containers[1].Resources = rr
		containerStatus(p, "sidecar").Resources = ptr.To(rr)
	}
	a, b := watchtest.NewPod("web-1", watchtest.CPUDown, side), watchtest.NewPod("web-2", watchtest.CPUDown, side)
	m := newRecorded()
	// app: 200/1000 in one pod, 100/1000 in the other: 0.15 overall, although
	// one pod alone is at 0.2.
	feed(m, a, "app", watchtest.Started, point{2 * time.Minute, 0, 0}, point{10 * time.Minute, 1000, 200})
	feed(m, b, "app", watchtest.Started, point{2 * time.Minute, 0, 0}, point{10 * time.Minute, 1000, 100})
	// sidecar: 0.3 and 0.4 over 500 periods each.
	feed(m, a, "sidecar", watchtest.Started, point{2 * time.Minute, 0, 0}, point{10 * time.Minute, 500, 150})
	feed(m, b, "sidecar", watchtest.Started, point{2 * time.Minute, 0, 0}, point{10 * time.Minute, 500, 200})

	v := Evaluate(watchtest.After(10*time.Minute), Input{Change: ch, Pods: []corev1.Pod{a, b}, Throttling: Counters(m)})
	require.Equal(t, StateBreached, v.State)
	assert.Equal(t, []string{"throttlingRatio 0.35 ≥ 0.25 (container sidecar, 1000 periods)"}, v.Figures)
	assert.Contains(t, v.Message, "throttlingRatio 0.15 < 0.25 (container app, 2000 periods)")
	assert.True(t, v.ThrottlingEvaluated)
}

func TestNonAdoptedPodsAreIgnored(t *testing.T) {
	ch := watchtest.Change(v1alpha1.StrategyRollout, watchtest.BothDown)
	harmful := func(app watchtest.Values) corev1.Pod {
		return watchtest.NewPod("web-1", app, watchtest.Restarts("app", 7), watchtest.LastTerminated("app", "OOMKilled", "c1", watchtest.After(4*time.Minute)))
	}
	for _, tt := range []struct {
		name  string
		pod   corev1.Pod
		state State
	}{
		{"a pod of the old template", harmful(watchtest.Before), StateWatching},
		{"the same pod adopted", harmful(watchtest.BothDown), StateBreached},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := newRecorded()
			m.AddOOMKill(tt.pod.UID, "app", watchtest.After(4*time.Minute))
			feed(m, tt.pod, "app", watchtest.Started, point{2 * time.Minute, 0, 0}, point{5 * time.Minute, 1000, 900})
			v := Evaluate(watchtest.After(5*time.Minute), Input{Change: ch, Pods: []corev1.Pod{tt.pod}, Kernel: m, Throttling: Counters(m),
				RestartBaselines: []v1alpha1.RestartBaseline{{PodUID: string(tt.pod.UID), Container: "app"}}})
			assert.Equal(t, tt.state, v.State)
			if tt.state == StateWatching {
				assert.Contains(t, v.Message, "restarts 0 < 3; oomKills 0 < 1")
				assert.Contains(t, v.Message, "0 of 1 pods adopted")
			}
		})
	}
}

func TestAdoptionDecidesNotAdoptedAtTheEnd(t *testing.T) {
	ch := watchtest.Change(v1alpha1.StrategyRollout, watchtest.CPUDown)
	pods := []corev1.Pod{watchtest.NewPod("a", watchtest.CPUDown), watchtest.NewPod("b", watchtest.CPUDown), watchtest.NewPod("c", watchtest.Before), watchtest.NewPod("d", watchtest.Before),
		watchtest.NewPod("gone", watchtest.Before, func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed }),
		watchtest.NewPod("leaving", watchtest.Before, func(p *corev1.Pod) { p.DeletionTimestamp = ptr.To(metav1.NewTime(watchtest.T0)) })}
	tests := []struct {
		name      string
		threshold int32
		pods      []corev1.Pod
		now       time.Duration
		state     State
		message   string
	}{
		{"0 requires no share", 0, pods[1:4], 30 * time.Minute, StateHealthy, "1 of 3 pods adopted"},
		{"0 does not accept none", 0, pods[2:4], 30 * time.Minute, StateBreached,
			"NotAdopted by the watch's end (2026-12-01T10:30:00Z) since the change applied at 2026-12-01T10:00:00Z: adopted 0 of 2 pods (0%): none runs the applied values; roll back cpu"},
		{"half adopted meets 50%", 50, pods, 30 * time.Minute, StateHealthy, "2 of 4 pods adopted"},
		{"half adopted misses 51%", 51, pods, 30 * time.Minute, StateBreached,
			"adopted 2 of 4 pods (50%), below adoptionThresholdPercent 51; roll back cpu"},
		{"no pods at all", 0, nil, 30 * time.Minute, StateBreached, "adopted 0 pods (there are none): none runs the applied values"},
		{"not decided before the end", 100, pods, 29*time.Minute + 59*time.Second, StateWatching, "watching until 2026-12-01T10:30:00Z"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := Evaluate(watchtest.After(tt.now), Input{Change: ch, Pods: tt.pods,
				Guardrails: watchtest.Guardrails(func(g *v1alpha1.RollbackGuardrails) { g.AdoptionThresholdPercent = tt.threshold })})
			assert.Equal(t, tt.state, v.State)
			assert.Contains(t, v.Message, tt.message)
			if tt.state == StateBreached {
				assert.Equal(t, v1alpha1.HealthWatchNotAdopted, v.Reason)
				assert.Equal(t, cpuOnly, v.Restore, "every touched resource")
				require.Len(t, v.Figures, 1)
				assert.Contains(t, v.Figures[0], "adopted ")
			} else {
				assert.Empty(t, v.Restore)
			}
		})
	}
}

// TestNotAdoptedAsSoonAsTheThresholdCannotBeMet: before the end, NotAdopted
// is decided once the unschedulableGrace has passed and every current pod
// adopted or never will.
func TestNotAdoptedAsSoonAsTheThresholdCannotBeMet(t *testing.T) {
	settled := func(p *corev1.Pod) { p.Generation, p.Status.ObservedGeneration = 2, 2 }
	// An InPlace pod resized (its spec holds the values) whose kubelet is
	// done and runs the old ones.
	ranOld := watchtest.NewPod("ran-old", watchtest.CPUDown, watchtest.StatusRuns(watchtest.Before), settled)
	resizing := watchtest.NewPod("resizing", watchtest.CPUDown, watchtest.StatusRuns(watchtest.Before), func(p *corev1.Pod) { p.Generation, p.Status.ObservedGeneration = 2, 1 })
	adopted := watchtest.NewPod("adopted", watchtest.CPUDown, settled)
	skipped := watchtest.NewPod("skipped", watchtest.Before, settled) // the apply left it out
	tests := []struct {
		name      string
		strategy  v1alpha1.Strategy
		threshold int32
		pods      []corev1.Pod
		now       time.Duration
		state     State
		nextCheck time.Time
	}{
		{"InPlace, none adopted, at 59s: within the grace", v1alpha1.StrategyInPlace, 0, []corev1.Pod{ranOld, skipped}, 59 * time.Second, StateWatching, watchtest.After(time.Minute)},
		{"InPlace, none adopted, at 60s: NotAdopted", v1alpha1.StrategyInPlace, 0, []corev1.Pod{ranOld, skipped}, time.Minute, StateBreached, time.Time{}},
		{"InPlace, a pod still resizing: not decided", v1alpha1.StrategyInPlace, 0, []corev1.Pod{ranOld, resizing}, 5 * time.Minute, StateWatching, watchtest.After(30 * time.Minute)},
		{"InPlace, 1 of 2 adopted meets 50%", v1alpha1.StrategyInPlace, 50, []corev1.Pod{ranOld, adopted}, 5 * time.Minute, StateWatching, watchtest.After(30 * time.Minute)},
		{"InPlace, 1 of 2 adopted misses 51%", v1alpha1.StrategyInPlace, 51, []corev1.Pod{ranOld, adopted}, 5 * time.Minute, StateBreached, time.Time{}},
		{"Rollout, old pods may still be replaced", v1alpha1.StrategyRollout, 0, []corev1.Pod{watchtest.NewPod("old", watchtest.Before)}, 5 * time.Minute, StateWatching, watchtest.After(30 * time.Minute)},
		{"Rollout, new pods without the values never get them", v1alpha1.StrategyRollout, 0,
			[]corev1.Pod{watchtest.NewPod("new", watchtest.Before, watchtest.CreatedAt(watchtest.After(time.Second)))}, 5 * time.Minute, StateBreached, time.Time{}},
		{"no pods: not decided before the end", v1alpha1.StrategyInPlace, 0, nil, 5 * time.Minute, StateWatching, watchtest.After(30 * time.Minute)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := Evaluate(watchtest.After(tt.now), Input{Change: watchtest.Change(tt.strategy, watchtest.CPUDown), Pods: tt.pods,
				Guardrails: watchtest.Guardrails(func(g *v1alpha1.RollbackGuardrails) { g.AdoptionThresholdPercent = tt.threshold })})
			assert.Equal(t, tt.state, v.State, v.Message)
			assert.Equal(t, tt.nextCheck, v.NextCheck)
			if tt.state == StateBreached {
				assert.Equal(t, v1alpha1.HealthWatchNotAdopted, v.Reason)
				assert.Contains(t, v.Message, "no other pod will adopt it before the watch's end")
			}
		})
	}
}

// TestUnschedulableAndInfeasibleFailAfterTheGrace: a pod of the change
// Pending Unschedulable, or resized Infeasible, for unschedulableGrace (≥,
// counted from the condition's lastTransitionTime but not before T0) rolls
// back every touched resource.
func TestUnschedulableAndInfeasibleFailAfterTheGrace(t *testing.T) {
	unschedulable := func(since time.Time) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.CreationTimestamp = metav1.NewTime(watchtest.T0.Add(time.Second))
			p.Status = corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled,
				Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: "0/1 nodes are available: 1 Insufficient cpu.",
				LastTransitionTime: metav1.NewTime(since)}}}
		}
	}
	infeasible := func(since time.Time, observed int64) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Generation = 2
			p.Status.ObservedGeneration = 2
			containerStatus(p, "app").Resources = ptr.To(watchtest.Before.Requirements())
			p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodResizePending, Status: corev1.ConditionTrue,
				Reason: corev1.PodReasonInfeasible, Message: "Node didn't have enough capacity", ObservedGeneration: observed,
				LastTransitionTime: metav1.NewTime(since)})
		}
	}
	ninety := watchtest.Guardrails(func(g *v1alpha1.RollbackGuardrails) {
		g.UnschedulableGrace = &metav1.Duration{Duration: 90 * time.Second}
	})
	tests := []struct {
		name      string
		strategy  v1alpha1.Strategy
		g         v1alpha1.RollbackGuardrails
		pod       corev1.Pod
		now       time.Duration
		reason    string
		nextCheck time.Time
	}{
		{"Unschedulable for 59s", v1alpha1.StrategyRollout, v1alpha1.RollbackGuardrails{}, watchtest.NewPod("new", watchtest.BothDown, unschedulable(watchtest.After(time.Second))),
			time.Minute, v1alpha1.HealthWatchWatching, watchtest.After(61 * time.Second)},
		{"Unschedulable for 60s", v1alpha1.StrategyRollout, v1alpha1.RollbackGuardrails{}, watchtest.NewPod("new", watchtest.BothDown, unschedulable(watchtest.After(time.Second))),
			61 * time.Second, v1alpha1.HealthWatchUnschedulable, time.Time{}},
		{"Unschedulable counts from T0, not an older condition", v1alpha1.StrategyRollout, v1alpha1.RollbackGuardrails{},
			watchtest.NewPod("new", watchtest.BothDown, unschedulable(watchtest.T0.Add(-time.Hour))), 59 * time.Second, v1alpha1.HealthWatchWatching, watchtest.After(time.Minute)},
		{"a longer grace is honoured", v1alpha1.StrategyRollout, ninety, watchtest.NewPod("new", watchtest.BothDown, unschedulable(watchtest.T0)),
			89 * time.Second, v1alpha1.HealthWatchWatching, watchtest.After(90 * time.Second)},
		{"an old pod Unschedulable is not the change's", v1alpha1.StrategyRollout, v1alpha1.RollbackGuardrails{},
			watchtest.NewPod("old", watchtest.Before, unschedulable(watchtest.T0), watchtest.CreatedAt(watchtest.T0.Add(-time.Hour))), 5 * time.Minute, v1alpha1.HealthWatchWatching, watchtest.After(30 * time.Minute)},
		{"Infeasible for 59s", v1alpha1.StrategyInPlace, v1alpha1.RollbackGuardrails{}, watchtest.NewPod("web-1", watchtest.BothDown, infeasible(watchtest.After(time.Second), 2)),
			time.Minute, v1alpha1.HealthWatchWatching, watchtest.After(61 * time.Second)},
		{"Infeasible for 60s", v1alpha1.StrategyInPlace, v1alpha1.RollbackGuardrails{}, watchtest.NewPod("web-1", watchtest.BothDown, infeasible(watchtest.After(time.Second), 2)),
			61 * time.Second, v1alpha1.HealthWatchInfeasible, time.Time{}},
		{"Infeasible observed for an older generation is not this resize's", v1alpha1.StrategyInPlace, v1alpha1.RollbackGuardrails{},
			watchtest.NewPod("web-1", watchtest.BothDown, infeasible(watchtest.T0, 1)), 5 * time.Minute, v1alpha1.HealthWatchWatching, watchtest.After(30 * time.Minute)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := Evaluate(watchtest.After(tt.now), Input{Change: watchtest.Change(tt.strategy, watchtest.BothDown), Guardrails: tt.g, Pods: []corev1.Pod{tt.pod}})
			assert.Equal(t, tt.reason, v.Reason, v.Message)
			assert.Equal(t, tt.nextCheck, v.NextCheck)
			if tt.reason == v1alpha1.HealthWatchWatching {
				return
			}
			assert.Equal(t, StateBreached, v.State)
			assert.Equal(t, cpuAndMem, v.Restore, "every touched resource")
			require.Len(t, v.Figures, 1)
			assert.Contains(t, v.Figures[0], "pods 1, for unschedulableGrace 1m0s or longer (pod "+tt.pod.Name+" "+tt.reason+" for 1m0s: ")
		})
	}
}

// TestResizeRestartsDoNotCount: with resizePolicy RestartContainer the
// kubelet restarts a container to resize it in place; one restart per such
// container of a pod the change resized is not harm.
func TestResizeRestartsDoNotCount(t *testing.T) {
	restartOnResize := func(res corev1.ResourceName) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Spec.Containers[0].ResizePolicy = []corev1.ContainerResizePolicy{{ResourceName: res, RestartPolicy: corev1.RestartContainer}}
		}
	}
	pods := func(n int32, opts ...func(*corev1.Pod)) []corev1.Pod {
		var out []corev1.Pod
		for _, name := range []string{"web-1", "web-2", "web-3"} {
			out = append(out, watchtest.NewPod(name, watchtest.MemDown, append([]func(*corev1.Pod){watchtest.Restarts("app", n)}, opts...)...))
		}
		return out
	}
	tests := []struct {
		name     string
		strategy v1alpha1.Strategy
		pods     []corev1.Pod
		reason   string
		figure   string
	}{
		{"three resized with a restart each", v1alpha1.StrategyInPlace, pods(1, restartOnResize(corev1.ResourceMemory)), v1alpha1.HealthWatchWatching, "restarts 0 < 3"},
		{"one more restart each counts", v1alpha1.StrategyInPlace, pods(2, restartOnResize(corev1.ResourceMemory)), v1alpha1.HealthWatchRestarts, "restarts 3 ≥ 3"},
		{"RestartContainer for a resource the change did not move", v1alpha1.StrategyInPlace, pods(1, restartOnResize(corev1.ResourceCPU)), v1alpha1.HealthWatchRestarts, "restarts 3 ≥ 3"},
		{"a Rollout resizes nothing", v1alpha1.StrategyRollout, pods(1, restartOnResize(corev1.ResourceMemory)), v1alpha1.HealthWatchRestarts, "restarts 3 ≥ 3"},
		{"pods created after T0 were not resized", v1alpha1.StrategyInPlace,
			pods(1, restartOnResize(corev1.ResourceMemory), watchtest.CreatedAt(watchtest.After(time.Second))), v1alpha1.HealthWatchRestarts, "restarts 3 ≥ 3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := RestartBaselines(pods(0))
			v := Evaluate(watchtest.After(5*time.Minute), Input{Change: watchtest.Change(tt.strategy, watchtest.MemDown), Pods: tt.pods, RestartBaselines: base})
			assert.Equal(t, tt.reason, v.Reason, v.Message)
			assert.Contains(t, v.Message, tt.figure)
			if tt.name == "three resized with a restart each" {
				assert.Contains(t, v.Message, "pod web-1 container app: 0, 1 more caused by the resize (resizePolicy RestartContainer) not counted")
			}
		})
	}
}

// TestWatchingSaysWhatIsNotEvaluatedYet: the reason stays Watching while
// throttling is not evaluated; the message says why, and a watch that
// ends with it never evaluated says so in its Healthy message.
func TestWatchingSaysWhatIsNotEvaluatedYet(t *testing.T) {
	ch := watchtest.Change(v1alpha1.StrategyInPlace, watchtest.CPUDown)
	pods := []corev1.Pod{watchtest.NewPod("web-1", watchtest.CPUDown)}
	early := Evaluate(watchtest.After(time.Minute), Input{Change: ch, Pods: pods, Throttling: Counters(newRecorded())})
	assert.Equal(t, v1alpha1.HealthWatchWatching, early.Reason)
	assert.Equal(t, "throttling: the throttling window opens at T0+2m0s (2026-12-01T10:02:00Z)", early.NotEvaluated)
	assert.Contains(t, early.Message, "watching until 2026-12-01T10:30:00Z; not evaluated yet: throttling: the throttling window opens at T0+2m0s")

	end := Evaluate(watchtest.After(30*time.Minute), Input{Change: ch, Pods: pods})
	assert.Equal(t, v1alpha1.HealthWatchHealthy, end.Reason)
	assert.Contains(t, end.Message, "no breach in 30m0s since 2026-12-01T10:00:00Z; never evaluated: throttling: no throttling source is configured")
}

func TestWatchDurationEndIsHealthy(t *testing.T) {
	pod := watchtest.NewPod("web-1", watchtest.CPUDown)
	ten := watchtest.Guardrails(func(g *v1alpha1.RollbackGuardrails) { g.WatchDuration = &metav1.Duration{Duration: 10 * time.Minute} })
	tests := []struct {
		name      string
		g         v1alpha1.RollbackGuardrails
		now       time.Duration
		state     State
		nextCheck time.Time
	}{
		{"default 30m: watching at 29m59s", v1alpha1.RollbackGuardrails{}, 29*time.Minute + 59*time.Second, StateWatching, watchtest.After(30 * time.Minute)},
		{"default 30m: healthy at 30m", v1alpha1.RollbackGuardrails{}, 30 * time.Minute, StateHealthy, time.Time{}},
		{"10m: watching at 9m59s", ten, 9*time.Minute + 59*time.Second, StateWatching, watchtest.After(10 * time.Minute)},
		{"10m: healthy at 10m", ten, 10 * time.Minute, StateHealthy, time.Time{}},
		{"10m: healthy when evaluated late", ten, 2 * time.Hour, StateHealthy, time.Time{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := Evaluate(watchtest.After(tt.now), Input{Change: watchtest.Change(v1alpha1.StrategyInPlace, watchtest.CPUDown), Guardrails: tt.g, Pods: []corev1.Pod{pod}})
			assert.Equal(t, tt.state, v.State)
			assert.Equal(t, tt.nextCheck, v.NextCheck)
			assert.Empty(t, v.Figures)
		})
	}
}

func TestNoThrottlingSourceStillRunsOtherRules(t *testing.T) {
	ch := watchtest.Change(v1alpha1.StrategyInPlace, watchtest.BothDown)
	quiet := Evaluate(watchtest.After(10*time.Minute), Input{Change: ch, Pods: []corev1.Pod{watchtest.NewPod("web-1", watchtest.BothDown)}})
	assert.Equal(t, StateWatching, quiet.State)
	assert.True(t, quiet.ThrottlingApplies)
	assert.False(t, quiet.ThrottlingEvaluated)
	assert.Contains(t, quiet.Message, "throttling: no throttling source is configured")
	assert.Equal(t, watchtest.After(30*time.Minute), quiet.NextCheck, "without a source T0+2m changes nothing")

	end := Evaluate(watchtest.After(30*time.Minute), Input{Change: ch, Pods: []corev1.Pod{watchtest.NewPod("web-1", watchtest.BothDown)}})
	assert.Equal(t, StateHealthy, end.State)
	assert.Contains(t, end.Message, "throttling: no throttling source is configured")

	oom := Evaluate(watchtest.After(10*time.Minute), Input{Change: ch,
		Pods: []corev1.Pod{watchtest.NewPod("web-1", watchtest.BothDown, watchtest.LastTerminated("app", "OOMKilled", "c1", watchtest.After(3*time.Minute)))}})
	assert.Equal(t, StateBreached, oom.State)
	assert.Equal(t, v1alpha1.HealthWatchOOMKills, oom.Reason)
	assert.Equal(t, memOnly, oom.Restore)
	assert.False(t, oom.ThrottlingEvaluated)
}

func TestThrottlingNotEvaluatedSaysWhy(t *testing.T) {
	pod := watchtest.NewPod("web-1", watchtest.CPUDown)
	tests := []struct {
		name    string
		g       v1alpha1.RollbackGuardrails
		src     ThrottlingSource
		now     time.Duration
		message string
	}{
		{"a source error", v1alpha1.RollbackGuardrails{}, failing{}, 5 * time.Minute,
			"throttling: read the throttling window: prometheus unreachable"},
		{"a ratio outside the schema", watchtest.Guardrails(func(g *v1alpha1.RollbackGuardrails) { g.ThrottlingRatio = "1.5" }), Counters(newRecorded()), 5 * time.Minute,
			`throttling: spec.guardrails.rollback.throttlingRatio "1.5" is not a decimal string in (0, 1] such as "0.25"`},
		{"a watch shorter than 2m", watchtest.Guardrails(func(g *v1alpha1.RollbackGuardrails) { g.WatchDuration = &metav1.Duration{Duration: time.Minute} }),
			Counters(newRecorded()), 5 * time.Minute, "throttling: the watch ends before the throttling window opens at T0+2m0s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := Evaluate(watchtest.After(tt.now), Input{Change: watchtest.Change(v1alpha1.StrategyInPlace, watchtest.CPUDown), Guardrails: tt.g, Pods: []corev1.Pod{pod}, Throttling: tt.src})
			assert.NotEqual(t, StateBreached, v.State)
			assert.True(t, v.ThrottlingApplies)
			assert.False(t, v.ThrottlingEvaluated)
			assert.Contains(t, v.Message, tt.message)
		})
	}
}

type failing struct{}

func (failing) ThrottleWindows([]*corev1.Pod, []string, time.Time, time.Time) (map[string]ThrottleWindow, error) {
	return nil, errors.New("prometheus unreachable")
}

func TestZeroThresholdsDisableSignals(t *testing.T) {
	harmful := watchtest.NewPod("web-1", watchtest.BothDown, watchtest.Restarts("app", 9), watchtest.LastTerminated("app", "OOMKilled", "c1", watchtest.After(4*time.Minute)))
	m := newRecorded()
	m.AddOOMKill(harmful.UID, "app", watchtest.After(4*time.Minute))
	feed(m, harmful, "app", watchtest.Started, point{2 * time.Minute, 0, 0}, point{5 * time.Minute, 1000, 1000})
	off := int32(0)
	tests := []struct {
		name    string
		g       func(*v1alpha1.RollbackGuardrails)
		reason  string
		figures []string
	}{
		{"all on", nil, v1alpha1.HealthWatchRestarts, []string{"restarts 9 ≥ 3", "oomKills 1 ≥ 1", "throttlingRatio 1.00 ≥ 0.25 (container app, 1000 periods)"}},
		{"restarts 0", func(g *v1alpha1.RollbackGuardrails) { g.Restarts = &off }, v1alpha1.HealthWatchOOMKills,
			[]string{"oomKills 1 ≥ 1", "throttlingRatio 1.00 ≥ 0.25 (container app, 1000 periods)"}},
		{"restarts and oomKills 0", func(g *v1alpha1.RollbackGuardrails) { g.Restarts, g.OOMKills = &off, &off }, v1alpha1.HealthWatchThrottling,
			[]string{"throttlingRatio 1.00 ≥ 0.25 (container app, 1000 periods)"}},
		{"all 0", func(g *v1alpha1.RollbackGuardrails) { g.Restarts, g.OOMKills, g.ThrottlingRatio = &off, &off, "0" }, v1alpha1.HealthWatchWatching, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := Evaluate(watchtest.After(5*time.Minute), Input{Change: watchtest.Change(v1alpha1.StrategyInPlace, watchtest.BothDown), Guardrails: watchtest.Guardrails(tt.g),
				Pods: []corev1.Pod{harmful}, Kernel: m, Throttling: Counters(m)})
			assert.Equal(t, tt.reason, v.Reason)
			assert.Equal(t, tt.figures, v.Figures)
			if tt.reason == v1alpha1.HealthWatchWatching {
				assert.False(t, v.ThrottlingApplies)
				assert.NotContains(t, v.Message, "not evaluated")
				assert.NotContains(t, v.Message, "restarts")
				assert.NotContains(t, v.Message, "oomKills")
			}
		})
	}
}

func TestSeveralBreachesAtOnce(t *testing.T) {
	tests := []struct {
		name     string
		applied  watchtest.Values
		restarts int32
		reason   string
		restore  []v1alpha1.ResourceName
		figures  []string
	}{
		{"restarts win and restore everything touched", watchtest.BothDown, 3, v1alpha1.HealthWatchRestarts, cpuAndMem,
			[]string{"restarts 3 ≥ 3", "oomKills 1 ≥ 1", "throttlingRatio 0.90 ≥ 0.25 (container app, 1000 periods)"}},
		{"OOM before throttling, both restored", watchtest.BothDown, 1, v1alpha1.HealthWatchOOMKills, cpuAndMem,
			[]string{"oomKills 1 ≥ 1", "throttlingRatio 0.90 ≥ 0.25 (container app, 1000 periods)"}},
		{"restarts of a memory change restore memory only", watchtest.MemDown, 3, v1alpha1.HealthWatchRestarts, memOnly,
			[]string{"restarts 3 ≥ 3", "oomKills 1 ≥ 1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := watchtest.NewPod("web-1", tt.applied, watchtest.Restarts("app", tt.restarts), watchtest.LastTerminated("app", "OOMKilled", "c1", watchtest.After(4*time.Minute)))
			m := newRecorded()
			feed(m, pod, "app", watchtest.Started, point{2 * time.Minute, 0, 0}, point{5 * time.Minute, 1000, 900})
			v := Evaluate(watchtest.After(5*time.Minute), Input{Change: watchtest.Change(v1alpha1.StrategyInPlace, tt.applied), Pods: []corev1.Pod{pod},
				RestartBaselines: []v1alpha1.RestartBaseline{{PodUID: string(pod.UID), Container: "app"}}, Throttling: Counters(m)})
			assert.Equal(t, StateBreached, v.State)
			assert.Equal(t, tt.reason, v.Reason)
			assert.Equal(t, tt.restore, v.Restore)
			assert.Equal(t, tt.figures, v.Figures)
			assert.True(t, v.NextCheck.IsZero())
		})
	}
}

func TestBreachAtTheEndWinsOverHealthy(t *testing.T) {
	pod := watchtest.NewPod("web-1", watchtest.MemDown, watchtest.LastTerminated("app", "OOMKilled", "c1", watchtest.After(29*time.Minute)))
	v := Evaluate(watchtest.After(30*time.Minute), Input{Change: watchtest.Change(v1alpha1.StrategyInPlace, watchtest.MemDown), Pods: []corev1.Pod{pod},
		Guardrails: watchtest.Guardrails(func(g *v1alpha1.RollbackGuardrails) { g.AdoptionThresholdPercent = 100 })})
	assert.Equal(t, StateBreached, v.State)
	assert.Equal(t, "OOMKills breach since the change applied at 2026-12-01T10:00:00Z: roll back memory; 1 of 1 pods adopted; restarts 0 < 3; oomKills 1 ≥ 1 (pod web-1 container app: 1 (status; no kernel data))", v.Message)
}

func TestEvaluateWithoutChange(t *testing.T) {
	v := Evaluate(watchtest.T0, Input{})
	assert.Equal(t, StateWatching, v.State)
	assert.Contains(t, v.Message, "nothing to watch")
}

func TestRestoreFor(t *testing.T) {
	tests := []struct {
		reason  string
		touched []v1alpha1.ResourceName
		want    []v1alpha1.ResourceName
	}{
		{v1alpha1.HealthWatchOOMKills, cpuAndMem, memOnly},
		{v1alpha1.HealthWatchOOMKills, cpuOnly, nil},
		{v1alpha1.HealthWatchThrottling, cpuAndMem, cpuOnly},
		{v1alpha1.HealthWatchThrottling, memOnly, nil},
		{v1alpha1.HealthWatchRestarts, []v1alpha1.ResourceName{v1alpha1.ResourceMemory, v1alpha1.ResourceCPU}, cpuAndMem},
		{v1alpha1.HealthWatchRestarts, memOnly, memOnly},
		{v1alpha1.HealthWatchHealthy, cpuAndMem, nil},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, RestoreFor(tt.reason, tt.touched), "%s of %v", tt.reason, tt.touched)
	}
}

func TestRestartBaselinesRecordEveryContainer(t *testing.T) {
	pending := watchtest.NewPod("web-2", watchtest.CPUDown, func(p *corev1.Pod) { p.Status = corev1.PodStatus{Phase: corev1.PodPending} })
	got := RestartBaselines([]corev1.Pod{watchtest.NewPod("web-1", watchtest.CPUDown, watchtest.Restarts("app", 4), watchtest.Restarts("sidecar", 1)), pending})
	assert.Equal(t, []v1alpha1.RestartBaseline{
		{Pod: "web-1", PodUID: "uid-web-1", Container: "app", RestartCount: 4}, {Pod: "web-1", PodUID: "uid-web-1", Container: "sidecar", RestartCount: 1},
		{Pod: "web-2", PodUID: "uid-web-2", Container: "app"}, {Pod: "web-2", PodUID: "uid-web-2", Container: "sidecar"},
	}, got)
}
