package gates

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/resources"
)

// withValues returns a copy of pod whose changed containers run the
// applied values. A value the change leaves unset stays as the pod has
// it.
func withValues(pod *corev1.Pod, containers []v1alpha1.ContainerChange) *corev1.Pod {
	out := pod.DeepCopy()
	applyValues(&out.Spec, containers)
	return out
}

// applyValues sets the applied values of the change's containers in
// spec, which the caller owns.
func applyValues(spec *corev1.PodSpec, containers []v1alpha1.ContainerChange) {
	for i := range containers {
		cc := &containers[i]
		if cc.Name == v1alpha1.PodLevel && spec.Resources == nil {
			continue // Plan refuses to add pod-level values
		}
		rr := resources.RequirementsToSet(spec, cc.Name)
		if rr == nil {
			continue
		}
		for _, f := range resources.Fields {
			if q := f.Get(cc.Applied.Requests, cc.Applied.Limits); q != nil {
				f.SetIn(rr, q)
			}
		}
	}
}

// podRequests is what a pod asks of its node, as the kubelet counts it
// when it admits a resize (k8s.io/component-helpers/resource.PodRequests).
// That is the larger of the spec's requests and those the kubelet
// allocated or reports, with the init containers' peak and the overhead.
func podRequests(pod *corev1.Pod) corev1.ResourceList {
	return resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{UseStatusResources: true})
}

// podLimits is a pod's limits, counted as podRequests counts requests.
func podLimits(pod *corev1.Pod) corev1.ResourceList {
	return resourcehelper.PodLimits(pod, resourcehelper.PodResourcesOptions{UseStatusResources: true})
}

// terminated reports whether a pod has ended: it holds no room on its
// node and is charged to no quota.
func terminated(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// value is list's quantity of name, zero when absent.
func value(list corev1.ResourceList, name corev1.ResourceName) resource.Quantity {
	if q, ok := list[name]; ok {
		return q
	}
	return resource.Quantity{Format: resource.DecimalSI}
}
