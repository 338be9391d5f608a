package healthwatch

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/test/watchtest"
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
