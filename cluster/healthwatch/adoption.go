package healthwatch

import (
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/resources"
)

// Adopted reports whether pod runs the values change applied. The health
// watch counts only the adopted pods' signals (docs/design.md section 3).
// For InPlace, status.containerStatuses[].resources of every changed
// container, and status.resources for pod-level values, must hold each
// applied request and limit of the touched resources. For Rollout and Deferred the pod's spec must: a pod of the
// new template, or one the webhook injected.
func Adopted(pod *corev1.Pod, change *v1alpha1.Change) bool {
	return holds(pod, change, change != nil && change.Strategy == v1alpha1.StrategyInPlace)
}

// holds reports whether every changed container of pod holds each applied
// request and limit of the touched resources. With fromStatus it looks in
// what the pod runs (status.containerStatuses[].resources), else in its
// spec.
func holds(pod *corev1.Pod, change *v1alpha1.Change, fromStatus bool) bool {
	if pod == nil || change == nil {
		return false
	}
	compared := false
	for i := range change.Containers {
		cc := &change.Containers[i]
		var rr *corev1.ResourceRequirements
		if fromStatus {
			rr = resources.Running(pod, cc.Name)
		} else if spec, ok := resources.Requirements(&pod.Spec, cc.Name); ok {
			rr = &spec
		}
		for _, f := range resources.Fields {
			if !slices.Contains(change.Resources, f.Resource) {
				continue
			}
			want := f.Get(cc.Applied.Requests, cc.Applied.Limits)
			if want == nil {
				continue
			}
			if rr == nil {
				return false
			}
			if got := f.In(rr); got == nil || got.Cmp(*want) != 0 {
				return false
			}
			compared = true
		}
	}
	return compared
}

// specHolds reports whether the pod's spec holds every applied request
// and limit of the touched resources in each changed container. Such a
// pod is of the change, whether or not it runs the values yet: a pod of
// the new template, one the webhook injected, or one resized in place.
func specHolds(pod *corev1.Pod, change *v1alpha1.Change) bool {
	return holds(pod, change, false)
}

func containerStatus(pod *corev1.Pod, name string) *corev1.ContainerStatus {
	for i := range pod.Status.ContainerStatuses {
		if pod.Status.ContainerStatuses[i].Name == name {
			return &pod.Status.ContainerStatuses[i]
		}
	}
	return nil
}

func specContainer(pod *corev1.Pod, name string) *corev1.Container {
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == name {
			return &pod.Spec.Containers[i]
		}
	}
	return nil
}
