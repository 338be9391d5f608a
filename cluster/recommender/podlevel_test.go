package recommender

import (
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/resources"
)

// TestFitPodLevelMakesTheContainersFitThePod: the (pod) entry is raised
// to the sum of the containers' and sidecars' requests (the entries'
// values where they change a container, the template's elsewhere), and
// its limit to the highest container limit and its own request, so the
// spec passes the apiserver's check (resources.PodLevelExceeded). A
// field the entry does not set stays unset; an entry that fits is left
// as it is.
func TestFitPodLevelMakesTheContainersFitThePod(t *testing.T) {
	q := func(s string) *resource.Quantity { return new(resource.MustParse(s)) }
	list := func(cpu, mem string) corev1.ResourceList {
		return corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}
	}
	spec := &corev1.PodSpec{
		Containers: []corev1.Container{
			{Name: "app", Resources: corev1.ResourceRequirements{Requests: list("300m", "200Mi"), Limits: list("1", "400Mi")}},
			{Name: "helper", Resources: corev1.ResourceRequirements{Requests: list("100m", "50Mi")}},
		},
		InitContainers: []corev1.Container{
			{Name: "sidecar", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways), Resources: corev1.ResourceRequirements{Requests: list("50m", "30Mi")}},
			{Name: "setup", Resources: corev1.ResourceRequirements{Requests: list("2", "1Gi")}},
		},
	}
	entries := []v1alpha1.ContainerResources{
		{Name: "app", Requests: &v1alpha1.ResourceValues{CPU: q("200m"), Memory: q("300Mi")}},
		{Name: v1alpha1.PodLevel, Requests: &v1alpha1.ResourceValues{CPU: q("250m"), Memory: q("256Mi")},
			Limits: &v1alpha1.ResourceValues{Memory: q("350Mi")}},
	}
	fitPodLevel(spec, entries)
	pod := entries[1]
	assert.Equal(t, "350m", pod.Requests.CPU.String(), "app's new 200m, helper's 100m, the sidecar's 50m; not setup's")
	assert.Equal(t, "380Mi", pod.Requests.Memory.String(), "app's new 300Mi, 50Mi and 30Mi")
	assert.Nil(t, pod.Limits.CPU, "a field the entry does not set stays unset")
	assert.Equal(t, "400Mi", pod.Limits.Memory.String(), "app's limit, above the pod's 350Mi and its 380Mi request")

	applied := spec.DeepCopy()
	applied.Resources = &corev1.ResourceRequirements{Requests: list(pod.Requests.CPU.String(), pod.Requests.Memory.String()),
		Limits: corev1.ResourceList{corev1.ResourceMemory: *pod.Limits.Memory}}
	applied.Containers[0].Resources.Requests = list("200m", "300Mi")
	msg, exceeded := resources.PodLevelExceeded(applied)
	assert.False(t, exceeded, "the apiserver's check passes: %s", msg)

	fits := []v1alpha1.ContainerResources{{Name: v1alpha1.PodLevel, Requests: &v1alpha1.ResourceValues{CPU: q("1"), Memory: q("1Gi")}}}
	before := fits[0].Requests
	fitPodLevel(spec, fits)
	assert.Same(t, before, fits[0].Requests, "an entry that fits is left as it is")
	fitPodLevel(spec, entries[:1]) // no (pod) entry: nothing to fit
}
