package recommender_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/cluster/healthwatch"
	"github.com/kerf-dev/kerf/cluster/recommend"
	"github.com/kerf-dev/kerf/cluster/signals"
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/kubetest"
)

// TestRecommenderHoldsTheCPULatchAgainstWhatThePodsRun checks that the
// recommender's "current" is what the running pods run with, not the pod
// template: web's template says 500m, its pod was resized in place to
// 800m (through pods/resize, or only as the kubelet reports it), and with
// the CPU latch holding (throttled at 0.6 against 0.25) no CPU below 800m
// is recommended. With the template as current it recommended 500m.
func TestRecommenderHoldsTheCPULatchAgainstWhatThePodsRun(t *testing.T) {
	for _, tc := range []struct {
		name string
		// spec resizes the pod's spec (pods/resize); the status always
		// reports 800m.
		spec bool
	}{
		{"resized through pods/resize", true},
		{"reported by the kubelet only", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, ns := recommendedWeb(t, func(sig *signals.Stores, pod *corev1.Pod) {
				resizedTo800m(t, controlplane.Get(t).Client, pod, tc.spec)
				now := time.Now()
				sig.Kernel.AddSamples(
					healthwatch.CounterSample{PodUID: pod.UID, Container: "app", Started: now.Add(-time.Minute), At: now.Add(-2 * time.Second), Periods: 100},
					healthwatch.CounterSample{PodUID: pod.UID, Container: "app", Started: now.Add(-time.Minute), At: now, Periods: 200, Throttled: 60})
			})
			rsr, basis := kubetest.WaitRecommended(t, c, ns)
			got := rsr.Spec.Containers[0]
			assert.Equal(t, int64(800), got.Requests.CPU.MilliValue(), "CPU request %s of a throttled container running 800m", got.Requests.CPU)
			assert.Equal(t, int64(800), got.Limits.CPU.MilliValue(), "CPU limit %s of a throttled container running 800m", got.Limits.CPU)
			assert.Negative(t, got.Requests.Memory.Cmp(resource.MustParse("256Mi")), "memory is still lowered: %s", got.Requests.Memory)
			var held int64
			for _, f := range basis.Containers[0].Refusals {
				if recommend.Reason(f.Reason) == recommend.ReasonThrottled && recommend.Resource(f.Resource) == recommend.CPU && recommend.Field(f.Field) == recommend.Request {
					held = f.Held
				}
			}
			assert.Equal(t, int64(800), held, "the refusal holds the running 800m: %+v", basis.Containers[0].Refusals)
		})
	}
}

// resizedTo800m makes the pod's container app run 800m of CPU (request and
// limit): through the pods/resize subresource when spec is set, and in
// the status the kubelet reports.
func resizedTo800m(t *testing.T, c client.Client, pod *corev1.Pod, spec bool) {
	t.Helper()
	ctx := context.Background()
	cpu := resource.MustParse("800m")
	if spec {
		require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(pod), pod))
		pod.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = cpu
		pod.Spec.Containers[0].Resources.Limits[corev1.ResourceCPU] = cpu
		require.NoError(t, c.SubResource("resize").Update(ctx, pod))
	}
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(pod), pod))
	rr := pod.Spec.Containers[0].Resources.DeepCopy()
	rr.Requests[corev1.ResourceCPU], rr.Limits[corev1.ResourceCPU] = cpu, cpu
	pod.Status.ContainerStatuses[0].Resources = rr
	pod.Status.ObservedGeneration = pod.Generation
	require.NoError(t, c.Status().Update(ctx, pod))
}
