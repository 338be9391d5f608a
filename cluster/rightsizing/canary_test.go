package rightsizing

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/healthwatch"
)

// canaryPod is a Running pod, ready or not.
func canaryPod(name string, ready bool) corev1.Pod {
	return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.PodStatus{Phase: corev1.PodRunning,
		ContainerStatuses: []corev1.ContainerStatus{{Name: "app", Ready: ready}}}}
}

// TestChooseCanaryIsDeterministic: ready pods first, then by name; percent
// rounds up; at least one pod; no canary when it would be every pod, or
// with a strategy other than InPlace.
func TestChooseCanaryIsDeterministic(t *testing.T) {
	at := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	inPlace := &v1alpha1.Change{Strategy: v1alpha1.StrategyInPlace, AppliedAt: at}
	five := []corev1.Pod{canaryPod("e", true), canaryPod("a", false), canaryPod("d", true), canaryPod("b", true), canaryPod("c", true)}
	for _, tc := range []struct {
		name     string
		g        v1alpha1.CanaryGuardrails
		change   *v1alpha1.Change
		pods     []corev1.Pod
		want     []string
		wantNote string
	}{
		{"one pod: the first ready by name", v1alpha1.CanaryGuardrails{Pods: ptr.To[int32](1)}, inPlace, five, []string{"b"}, ""},
		{"two pods", v1alpha1.CanaryGuardrails{Pods: ptr.To[int32](2)}, inPlace, five, []string{"b", "c"}, ""},
		{"a not ready pod comes last", v1alpha1.CanaryGuardrails{Pods: ptr.To[int32](4)}, inPlace, five, []string{"b", "c", "d", "e"}, ""},
		{"percent rounds up", v1alpha1.CanaryGuardrails{Percent: ptr.To[int32](30)}, inPlace, five, []string{"b", "c"}, ""},
		{"at least one pod", v1alpha1.CanaryGuardrails{Percent: ptr.To[int32](1)}, inPlace, five, []string{"b"}, ""},
		{"every pod is no canary", v1alpha1.CanaryGuardrails{Pods: ptr.To[int32](5)}, inPlace, five, nil, "no canary: its 5 pods would be all 5 running pods"},
		{"100 percent is no canary", v1alpha1.CanaryGuardrails{Percent: ptr.To[int32](100)}, inPlace, five, nil, "no canary: its 5 pods would be all 5 running pods"},
		{"no pod runs", v1alpha1.CanaryGuardrails{Pods: ptr.To[int32](1)}, inPlace, nil, nil, "no canary: no pod runs"},
		{"Rollout applies whole", v1alpha1.CanaryGuardrails{Pods: ptr.To[int32](1)}, &v1alpha1.Change{Strategy: v1alpha1.StrategyRollout}, five, nil,
			"no canary with strategy Rollout: the change applies whole"},
		{"Deferred applies whole", v1alpha1.CanaryGuardrails{Pods: ptr.To[int32](1)}, &v1alpha1.Change{Strategy: v1alpha1.StrategyDeferred}, five, nil,
			"no canary with strategy Deferred: the change applies whole"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, note := chooseCanary(&tc.g, tc.change, tc.pods)
			if tc.want == nil {
				assert.Nil(t, got)
				assert.Contains(t, note, tc.wantNote)
				return
			}
			require.NotNil(t, got)
			assert.Empty(t, note)
			assert.Equal(t, tc.want, got.Pods)
			assert.Equal(t, int32(len(tc.pods)), got.Of)
			assert.Equal(t, at, got.StartedAt)
			assert.Equal(t, at.Add(v1alpha1.DefaultCanaryDuration), got.Until.Time, "duration defaults to 10m")
		})
	}
}

// TestChooseCanaryKeepsAtMostMaxCanaryPods: a canary of 50% of 4000 pods
// is cut to v1alpha1.MaxCanaryPods, the CRD's bound.
func TestChooseCanaryKeepsAtMostMaxCanaryPods(t *testing.T) {
	pods := make([]corev1.Pod, 4000)
	for i := range pods {
		pods[i] = canaryPod(fmt.Sprintf("web-%04d", i), true)
	}
	got, _ := chooseCanary(&v1alpha1.CanaryGuardrails{Percent: ptr.To[int32](50)}, &v1alpha1.Change{Strategy: v1alpha1.StrategyInPlace}, pods)
	require.NotNil(t, got)
	assert.Len(t, got.Pods, v1alpha1.MaxCanaryPods)
	assert.Equal(t, "web-0000", got.Pods[0])
}

// TestCanaryWatchSeesOnlyTheCanaryUntilItsEnd: an unpromoted canary is
// evaluated on its pods alone, until canary.until; a promoted one is
// evaluated as any change.
func TestCanaryWatchSeesOnlyTheCanaryUntilItsEnd(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	ch := &v1alpha1.Change{AppliedAt: metav1.NewTime(t0), Strategy: v1alpha1.StrategyInPlace,
		Canary: &v1alpha1.CanaryState{Pods: []string{"b"}, Of: 3, StartedAt: metav1.NewTime(t0), Until: metav1.NewTime(t0.Add(7 * time.Minute))}}
	in := healthwatch.Input{Change: ch, Pods: []corev1.Pod{canaryPod("a", true), canaryPod("b", true), canaryPod("c", true)},
		Guardrails: v1alpha1.RollbackGuardrails{WatchDuration: &metav1.Duration{Duration: time.Hour}}}
	got := canaryWatch(in)
	require.Len(t, got.Pods, 1)
	assert.Equal(t, "b", got.Pods[0].Name)
	assert.Equal(t, 7*time.Minute, got.Guardrails.WatchDuration.Duration)
	assert.Equal(t, time.Hour, in.Guardrails.WatchDuration.Duration, "the policy's guardrails are left alone")
	assert.Len(t, in.Pods, 3, "the pass's pods are left alone")

	promoted := metav1.NewTime(t0.Add(8 * time.Minute))
	ch.Canary.PromotedAt = &promoted
	got = canaryWatch(in)
	assert.Len(t, got.Pods, 3)
	assert.Equal(t, time.Hour, got.Guardrails.WatchDuration.Duration)
}
