package resources

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/kerf-dev/kerf/api/v1alpha1"
)

// Requirements returns what the entry name sets in a pod spec: the named
// container's requirements, or the pod-level ones (spec.resources) for
// v1alpha1.PodLevel. ok is false when the spec has no such container. A
// spec without pod-level resources gives empty requirements for PodLevel.
// The result shares the spec's maps: read it, do not write it.
func Requirements(spec *corev1.PodSpec, name string) (rr corev1.ResourceRequirements, ok bool) {
	if name == v1alpha1.PodLevel {
		if spec.Resources != nil {
			rr = *spec.Resources
		}
		return rr, true
	}
	for i := range spec.Containers {
		if spec.Containers[i].Name == name {
			return spec.Containers[i].Resources, true
		}
	}
	return rr, false
}

// RequirementsToSet returns the requirements of the entry name in a pod
// spec, to write into: the named container's, or spec.resources for
// v1alpha1.PodLevel, allocated when absent. nil when the spec has no such
// container.
func RequirementsToSet(spec *corev1.PodSpec, name string) *corev1.ResourceRequirements {
	if name == v1alpha1.PodLevel {
		if spec.Resources == nil {
			spec.Resources = &corev1.ResourceRequirements{}
		}
		return spec.Resources
	}
	for i := range spec.Containers {
		if spec.Containers[i].Name == name {
			return &spec.Containers[i].Resources
		}
	}
	return nil
}

// Running returns what the kubelet reports the entry name of a pod runs
// with: the container status's resources, or status.resources for
// v1alpha1.PodLevel. nil when the status reports none.
func Running(pod *corev1.Pod, name string) *corev1.ResourceRequirements {
	if name == v1alpha1.PodLevel {
		return pod.Status.Resources
	}
	for i := range pod.Status.ContainerStatuses {
		if pod.Status.ContainerStatuses[i].Name == name {
			return pod.Status.ContainerStatuses[i].Resources
		}
	}
	return nil
}

// Values returns the cpu and memory values of a pod spec per container.
// They come in the spec's order, then the pod-level ones as the entry
// v1alpha1.PodLevel when the spec sets any.
func Values(spec *corev1.PodSpec) []v1alpha1.ContainerResources {
	out := make([]v1alpha1.ContainerResources, 0, len(spec.Containers)+1)
	for i := range spec.Containers {
		out = append(out, ContainerValues(&spec.Containers[i]))
	}
	if spec.Resources != nil {
		pod := v1alpha1.ContainerResources{Name: v1alpha1.PodLevel}
		for _, f := range Fields {
			f.Set(&pod.Requests, &pod.Limits, f.In(spec.Resources))
		}
		if pod.Requests != nil || pod.Limits != nil {
			out = append(out, pod)
		}
	}
	return out
}

// Entries returns the containers whose signals count for entry name in a
// pod spec. That is name itself for a container, and every container of
// the spec for v1alpha1.PodLevel: any of them can be OOM-killed or
// restarted under the pod's limits.
func Entries(spec *corev1.PodSpec, name string) []string {
	if name != v1alpha1.PodLevel {
		return []string{name}
	}
	out := make([]string, 0, len(spec.Containers))
	for i := range spec.Containers {
		out = append(out, spec.Containers[i].Name)
	}
	return out
}

// Describe names entry name in a message: container app, or pod-level
// resources for v1alpha1.PodLevel.
func Describe(name string) string {
	if name == v1alpha1.PodLevel {
		return "pod-level resources"
	}
	return "container " + name
}
