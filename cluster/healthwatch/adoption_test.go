package healthwatch

import (
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
