package healthwatch

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/test/watchtest"
)

var (
	cpuOnly   = []v1alpha1.ResourceName{v1alpha1.ResourceCPU}
	memOnly   = []v1alpha1.ResourceName{v1alpha1.ResourceMemory}
	cpuAndMem = []v1alpha1.ResourceName{v1alpha1.ResourceCPU, v1alpha1.ResourceMemory}
)

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
