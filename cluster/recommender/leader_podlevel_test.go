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

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster"
	"github.com/kerf-dev/kerf/cluster/recommender"
	"github.com/kerf-dev/kerf/cluster/signals"
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/kubetest"
	"github.com/kerf-dev/kerf/test/leadertest"
)

// TestRecommenderSizesThePodLevelResources: pods that set pod-level
// resources (500m and 256Mi asked, 1 cpu and 512Mi at most) get the entry
// (pod) beside their container's, made from the pod cgroup's readings as
// the agent reports them (the entry (pod)): 80m and 60Mi used lower the
// pod's requests, and the pod's request still holds its container's
// request (the apiserver's rule). An OOM kill of the container holds the
// pod's memory too. Before, the recommender wrote the container's values
// only, and the pod-level ones stayed the manifest's.
func TestRecommenderSizesThePodLevelResources(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	ctx := context.Background()
	dep := kubetest.Deployment(ns, "web", "500m", "256Mi")
	dep.Spec.Template.Spec.Resources = &corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("256Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("512Mi")},
	}
	require.NoError(t, c.Create(ctx, dep))
	require.NoError(t, c.Create(ctx, kubetest.RecommendingPolicy(ns)))
	pod := kubetest.AdoptedPod(t, c, dep, "web-1")

	sig := signals.New()
	now := time.Now()
	for i := range 4 {
		at := now.Add(time.Duration(i-3) * time.Second)
		sig.Usage.Add(
			signals.UsageSample{PodUID: pod.UID, Container: "app", At: at, CPU: time.Duration(i) * 50 * time.Millisecond, WorkingSet: 40 << 20, Peak: 40 << 20},
			signals.UsageSample{PodUID: pod.UID, Container: v1alpha1.PodLevel, At: at, CPU: time.Duration(i) * 80 * time.Millisecond, WorkingSet: 60 << 20, Peak: 60 << 20})
	}
	leadertest.StartReplica(t, ns, "a", cluster.Config{Signals: sig, Recommender: recommender.Config{Period: 200 * time.Millisecond}})

	var rsr v1alpha1.RightsizingRecommendation
	entry := func(name string) *v1alpha1.ContainerResources {
		for i := range rsr.Spec.Containers {
			if rsr.Spec.Containers[i].Name == name {
				return &rsr.Spec.Containers[i]
			}
		}
		return nil
	}
	require.Eventually(t, func() bool {
		return c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web"}, &rsr) == nil && entry(v1alpha1.PodLevel) != nil
	}, 30*time.Second, 50*time.Millisecond, "no recommendation with a (pod) entry")
	app, pl := entry("app"), entry(v1alpha1.PodLevel)
	require.NotNil(t, app)
	t.Logf("app %v / %v, (pod) %v / %v", app.Requests, app.Limits, pl.Requests, pl.Limits)
	assert.Negative(t, pl.Requests.CPU.Cmp(resource.MustParse("500m")), "the pod's CPU request %s for 80m of use", pl.Requests.CPU)
	assert.Negative(t, pl.Requests.Memory.Cmp(resource.MustParse("256Mi")), "the pod's memory request %s for 60Mi", pl.Requests.Memory)
	assert.GreaterOrEqual(t, pl.Requests.CPU.MilliValue(), app.Requests.CPU.MilliValue(), "the pod's request holds its container's")
	assert.GreaterOrEqual(t, pl.Requests.Memory.Value(), app.Requests.Memory.Value(), "the pod's request holds its container's")
	assert.Equal(t, "1", pl.Limits.CPU.String(), "limits stay by default")
	assert.Equal(t, "512Mi", pl.Limits.Memory.String(), "limits stay by default")
	basis, err := v1alpha1.ParseRecommendationBasis(rsr.Annotations[v1alpha1.RecommendationBasisAnnotation])
	require.NoError(t, err)
	var names []string
	for _, cb := range basis.Containers {
		names = append(names, cb.Name)
	}
	assert.Equal(t, []string{"app", v1alpha1.PodLevel}, names, "the figures of both")

	// An OOM kill of the container: the pod-level memory is held too.
	memory := pl.Requests.Memory.DeepCopy()
	kubetest.OOMKilled(t, c, pod, "OOMKilled")
	require.Eventually(t, func() bool {
		if c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web"}, &rsr) != nil {
			return false
		}
		b, err := v1alpha1.ParseRecommendationBasis(rsr.Annotations[v1alpha1.RecommendationBasisAnnotation])
		if err != nil {
			return false
		}
		for _, cb := range b.Containers {
			for _, f := range cb.Refusals {
				if cb.Name == v1alpha1.PodLevel && f.Reason == "OOMKill" {
					return true
				}
			}
		}
		return false
	}, 30*time.Second, 50*time.Millisecond, "the kill latched the pod's memory")
	pl = entry(v1alpha1.PodLevel)
	assert.GreaterOrEqual(t, pl.Requests.Memory.Cmp(memory), 0, "the pod's memory %s not lowered after the kill", pl.Requests.Memory)
}
