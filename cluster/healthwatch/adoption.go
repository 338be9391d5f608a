package healthwatch

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/kerf-dev/kerf/api/v1alpha1"
)

// Adopted reports whether pod runs the values change applied, the only pods
// whose signals the health watch counts (docs/design.md section 3): for
// InPlace, status.containerStatuses[].resources of every changed container
// holds each applied request and limit of the touched resources; for
// Rollout and Deferred, the pod's spec does (a pod of the new template, or
// one the webhook injected).
func Adopted(pod *corev1.Pod, change *v1alpha1.Change) bool {
	if pod == nil || change == nil {
		return false
	}
	compared := false
	for i := range change.Containers {
		cc := &change.Containers[i]
		var rr *corev1.ResourceRequirements
		if change.Strategy == v1alpha1.StrategyInPlace {
			if cs := containerStatus(pod, cc.Name); cs != nil {
				rr = cs.Resources
			}
		} else if c := specContainer(pod, cc.Name); c != nil {
			rr = &c.Resources
		}
		for _, f := range fields {
			if !slices.Contains(change.Resources, f.res) {
				continue
			}
			want := f.get(&cc.Applied)
			if want == nil {
				continue
			}
			if rr == nil {
				return false
			}
			got, ok := f.list(rr)[corev1.ResourceName(f.res)]
			if !ok || got.Cmp(*want) != 0 {
				return false
			}
			compared = true
		}
	}
	return compared
}

// AdoptedPods returns the pods of pods that Adopted accepts, in order: the
// pods whose signals the health watch counts (docs/design.md section 3).
func AdoptedPods(pods []corev1.Pod, change *v1alpha1.Change) []*corev1.Pod {
	var out []*corev1.Pod
	for i := range pods {
		if Adopted(&pods[i], change) {
			out = append(out, &pods[i])
		}
	}
	return out
}

// field is one of the four values a change can set on a container.
type field struct {
	limits bool
	res    v1alpha1.ResourceName
}

// fields are the four fields.
var fields = [...]field{
	{false, v1alpha1.ResourceCPU},
	{false, v1alpha1.ResourceMemory},
	{true, v1alpha1.ResourceCPU},
	{true, v1alpha1.ResourceMemory},
}

// get returns the field's value in r, nil when absent.
func (f field) get(r *v1alpha1.Resources) *resource.Quantity {
	v := r.Requests
	if f.limits {
		v = r.Limits
	}
	if v == nil {
		return nil
	}
	if f.res == v1alpha1.ResourceCPU {
		return v.CPU
	}
	return v.Memory
}

// list returns the requests or limits of rr the field lives in.
func (f field) list(rr *corev1.ResourceRequirements) corev1.ResourceList {
	if f.limits {
		return rr.Limits
	}
	return rr.Requests
}

// changed reports whether the container change moved resource res: a request
// or limit of it that the change applies differs from the previous value.
func changed(cc *v1alpha1.ContainerChange, res v1alpha1.ResourceName) bool {
	for _, f := range fields {
		if f.res != res {
			continue
		}
		applied := f.get(&cc.Applied)
		if applied == nil {
			continue
		}
		if prev := f.get(&cc.Previous); prev == nil || prev.Cmp(*applied) != 0 {
			return true
		}
	}
	return false
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
