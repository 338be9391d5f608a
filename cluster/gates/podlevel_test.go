package gates_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/gates"
	"github.com/kerf-dev/kerf/test/kubetest"
)

// withPodLevel gives dep's pod template pod-level resources: 1 cpu and
// 512Mi, requests and limits.
func withPodLevel(dep *appsv1.Deployment) *appsv1.Deployment {
	pod := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("512Mi")}
	dep.Spec.Template.Spec.Resources = &corev1.ResourceRequirements{Requests: pod, Limits: pod.DeepCopy()}
	return dep
}

// TestPodLevelResourcesRefusesValuesAboveThePods: a container limit above
// the pod's, or requests summing above the pod's, are refused naming the
// figures; values within them pass, and so does any value where the pods
// set no pod-level resources.
func TestPodLevelResourcesRefusesValuesAboveThePods(t *testing.T) {
	ctx := context.Background()
	dep := withPodLevel(kubetest.Deployment("shop", "web", "500m", "256Mi"))
	for _, tc := range []struct {
		name     string
		strategy v1alpha1.Strategy
		applied  values
		want     string
	}{
		{"limit above the pod's", v1alpha1.StrategyRollout, values{limMem: "600Mi"}, "container app limit memory 600Mi, above the pod's 512Mi"},
		{"requests above the pod's", v1alpha1.StrategyDeferred, values{reqCPU: "1500m"}, "containers request 1500m cpu, above the pod's 1"},
		{"within", v1alpha1.StrategyRollout, values{reqMem: "400Mi", limMem: "400Mi"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := gates.PodLevelResources{}.Check(ctx, changeOf(t, dep, tc.strategy, tc.applied))
			require.NoError(t, err)
			if tc.want == "" {
				assert.Nil(t, b)
				return
			}
			require.NotNil(t, b)
			assert.Equal(t, v1alpha1.ReasonPodLevelResources, b.Reason)
			assert.Contains(t, b.Message, "the pod template of Deployment shop/web sets pod-level resources (spec.resources)")
			assert.Contains(t, b.Message, tc.want)
		})
	}

	// In place, each pod is judged as it runs.
	ch := changeOf(t, dep, v1alpha1.StrategyInPlace, values{reqMem: "600Mi", limMem: "600Mi"})
	ch.Pods = []corev1.Pod{{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-1"}, Spec: *dep.Spec.Template.Spec.DeepCopy()}}
	b, err := gates.PodLevelResources{}.Check(ctx, ch)
	require.NoError(t, err)
	require.NotNil(t, b)
	assert.Contains(t, b.Message, "pod web-1 sets pod-level resources")

	plain := kubetest.Deployment("shop", "web", "500m", "256Mi")
	b, err = gates.PodLevelResources{}.Check(ctx, changeOf(t, plain, v1alpha1.StrategyRollout, values{reqMem: "600Mi", limMem: "600Mi"}))
	require.NoError(t, err)
	assert.Nil(t, b, "no pod-level resources, nothing to fit")
}
