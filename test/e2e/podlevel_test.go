package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/internal/scenario"
)

// TestPodLevelMemoryLimitRolledBackInPlace: a pod whose memory limit is
// set at the pod level (spec.resources, 256 MiB; its container sets
// none) gets a recommendation whose (pod) entry lowers it to 96 MiB in
// place. The kubelet resizes the pod's cgroup, the workload allocates
// 160 MiB, the kernel OOM-kills it under the pod's limit, and Kerf puts
// 256 MiB back on the pod's cgroup. The container never had a memory
// limit of its own.
func TestPodLevelMemoryLimitRolledBackInPlace(t *testing.T) {
	t.Parallel()
	in := cluster(t)
	e := env(t, in)
	ctx := t.Context()
	require.NoError(t, e.EnsurePolicy(ctx, scenario.WatchDuration))
	w := scenario.Workload{Name: "podlevel-demo", CPURequest: "50m", CPULimit: "500m", MemoryRequest: "64Mi", MemoryLimit: "256Mi"}
	dep := w.Deployment(e.Namespace)
	spec := &dep.Spec.Template.Spec
	delete(spec.Containers[0].Resources.Limits, corev1.ResourceMemory)
	spec.Resources = &corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")},
	}
	require.NoError(t, e.Client.Create(ctx, dep))
	pod, err := e.WaitPod(ctx, w, 2*time.Minute)
	require.NoError(t, err)
	podMemory(t, e, pod, 256*scenario.Mi)

	rsr := &v1alpha1.RightsizingRecommendation{
		ObjectMeta: metav1.ObjectMeta{Namespace: e.Namespace, Name: w.Name},
		Spec: v1alpha1.RightsizingRecommendationSpec{
			TargetRef: v1alpha1.TargetRef{APIVersion: "apps/v1", Kind: v1alpha1.KindDeployment, Name: w.Name},
			Strategy:  v1alpha1.StrategyInPlace,
			Containers: []v1alpha1.ContainerResources{{Name: v1alpha1.PodLevel,
				Limits: &v1alpha1.ResourceValues{Memory: resource.NewQuantity(96*scenario.Mi, resource.BinarySI)}}},
		},
	}
	require.NoError(t, e.Client.Create(ctx, rsr))
	podMemory(t, e, pod, 96*scenario.Mi)
	_, _, err = e.WaitPhase(ctx, w.Name, v1alpha1.PhaseWatching, "", time.Minute)
	require.NoError(t, err, "the kubelet reports the pod-level values in status.resources")

	require.NoError(t, e.Control(ctx, pod, "alloc", "mib=160"))
	got, _, err := e.WaitPhase(ctx, w.Name, v1alpha1.PhaseRolledBack, v1alpha1.HealthWatchOOMKills, 2*time.Minute)
	require.NoError(t, err)
	assert.Equal(t, []v1alpha1.ResourceName{v1alpha1.ResourceMemory}, got.Status.Breach.Resources)
	podMemory(t, e, pod, 256*scenario.Mi)

	var now corev1.Pod
	require.NoError(t, e.Client.Get(ctx, client.ObjectKeyFromObject(pod), &now))
	assert.Equal(t, "256Mi", now.Spec.Resources.Limits.Memory().String(), "the pod-level limit is back in the pod's spec")
	_, limited := now.Spec.Containers[0].Resources.Limits[corev1.ResourceMemory]
	assert.False(t, limited, "the container never got a memory limit of its own")
	// The agent saw the kill first; the kubelet's status follows.
	err = scenario.Poll(ctx, time.Minute, 100*time.Millisecond, "the kubelet to report the container OOM-killed", func(ctx context.Context) (bool, error) {
		if err := e.Client.Get(ctx, client.ObjectKeyFromObject(pod), &now); err != nil {
			return false, err
		}
		for _, cs := range now.Status.ContainerStatuses {
			if t := cs.LastTerminationState.Terminated; t != nil && t.Reason == "OOMKilled" && cs.RestartCount >= 1 {
				return true, nil
			}
		}
		return false, nil
	})
	require.NoError(t, err, "the kernel killed the container under the pod's limit")
}

// podMemory waits until the kernel enforces bytes as the pod cgroup's
// memory limit.
func podMemory(t *testing.T, e *scenario.Env, pod *corev1.Pod, bytes int64) {
	t.Helper()
	var last int64
	err := scenario.Poll(t.Context(), 90*time.Second, 50*time.Millisecond, fmt.Sprintf("the pod cgroup's memory limit to be %d", bytes), func(context.Context) (bool, error) {
		var err error
		last, err = e.PodMemoryLimit(pod)
		return err == nil && last == bytes, nil
	})
	require.NoError(t, err, "pod %s: the pod cgroup's memory limit is %d", pod.Name, last)
}
