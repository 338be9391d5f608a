package webhook

import (
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/resources"
)

// containerChange is a container of a pod, or the pod-level resources,
// and the resources it gets.
type containerChange struct {
	index     int // in spec.containers; podLevel for spec.resources
	resources corev1.ResourceRequirements
}

// podLevel is the index of the pod-level resources' change.
const podLevel = -1

// name is the changed container's name, or v1alpha1.PodLevel.
func (ch containerChange) name(pod *corev1.Pod) string {
	if ch.index == podLevel {
		return v1alpha1.PodLevel
	}
	return pod.Spec.Containers[ch.index].Name
}

// inject computes the resources of each of pod's containers that values
// change, without changing pod. Containers are matched by name in
// spec.containers; the entry v1alpha1.PodLevel changes spec.resources
// where the pod sets it (Kerf changes pod-level values only where they
// are set).
//   - It sets only the CPU and memory requests and limits values give, and
//     touched allows when not nil.
//   - A container whose limit would fall below its request is skipped.
//   - Every container is skipped when the pod-level resources
//     (spec.resources) would be exceeded.
//
// Kubernetes would refuse either pod.
func inject(pod *corev1.Pod, values map[string]v1alpha1.Resources, touched map[corev1.ResourceName]bool) ([]containerChange, []skip) {
	var changes []containerChange
	var skips []skip
	change := func(index int, name string, rr *corev1.ResourceRequirements) {
		v, ok := values[name]
		if !ok {
			return
		}
		res := *rr.DeepCopy()
		changed := setValues(&res.Requests, v.Requests, touched)
		changed = setValues(&res.Limits, v.Limits, touched) || changed
		if !changed {
			return
		}
		if lb, bad := resources.LimitBelowRequest(res); bad {
			skips = append(skips, skip{name, SkipLimitBelowRequest,
				fmt.Sprintf("%s: limit %s < request %s", lb.Resource, lb.Limit.String(), lb.Request.String())})
			return
		}
		changes = append(changes, containerChange{index: index, resources: res})
	}
	for i := range pod.Spec.Containers {
		change(i, pod.Spec.Containers[i].Name, &pod.Spec.Containers[i].Resources)
	}
	if pod.Spec.Resources != nil {
		change(podLevel, v1alpha1.PodLevel, pod.Spec.Resources)
	}
	if len(changes) > 0 && pod.Spec.Resources != nil {
		if detail, bad := podResourcesExceeded(pod, changes); bad {
			for _, ch := range changes {
				skips = append(skips, skip{ch.name(pod), SkipPodResources, detail})
			}
			changes = nil
		}
	}
	return changes, skips
}

// setValues sets the CPU and memory quantities of v in *list and reports
// whether that changed anything.
func setValues(list *corev1.ResourceList, v *v1alpha1.ResourceValues, touched map[corev1.ResourceName]bool) bool {
	if v == nil {
		return false
	}
	changed := false
	set := func(name corev1.ResourceName, q *resource.Quantity) {
		if q == nil || (touched != nil && !touched[name]) {
			return
		}
		if old, ok := (*list)[name]; ok && old.Cmp(*q) == 0 {
			return
		}
		if *list == nil {
			*list = corev1.ResourceList{}
		}
		(*list)[name] = q.DeepCopy()
		changed = true
	}
	set(corev1.ResourceCPU, v.CPU)
	set(corev1.ResourceMemory, v.Memory)
	return changed
}

// podResourcesExceeded checks the changed containers against the
// pod-level resources (resources.PodLevelExceeded).
func podResourcesExceeded(pod *corev1.Pod, changes []containerChange) (string, bool) {
	spec := pod.Spec.DeepCopy()
	for _, ch := range changes {
		if ch.index == podLevel {
			spec.Resources = ch.resources.DeepCopy()
			continue
		}
		spec.Containers[ch.index].Resources = ch.resources
	}
	return resources.PodLevelExceeded(spec)
}

// patchOp is one RFC 6902 operation.
type patchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}

// jsonPatch writes the changes as a JSONPatch with InjectedAnnotation set.
// Each changed container's resources, or the pod-level ones, are replaced
// whole ("add" creates or replaces an object member).
func jsonPatch(pod *corev1.Pod, changes []containerChange, annotation string) ([]byte, error) {
	ops := make([]patchOp, 0, len(changes)+1)
	for _, ch := range changes {
		path := fmt.Sprintf("/spec/containers/%d/resources", ch.index)
		if ch.index == podLevel {
			path = "/spec/resources"
		}
		ops = append(ops, patchOp{Op: "add", Path: path, Value: ch.resources})
	}
	if pod.Annotations == nil {
		ops = append(ops, patchOp{Op: "add", Path: "/metadata/annotations", Value: map[string]string{InjectedAnnotation: annotation}})
	} else {
		ops = append(ops, patchOp{Op: "add", Path: "/metadata/annotations/" + escapePointer(InjectedAnnotation), Value: annotation})
	}
	b, err := json.Marshal(ops)
	if err != nil {
		return nil, fmt.Errorf("encode JSONPatch: %w", err)
	}
	return b, nil
}

// escapePointer escapes a JSON Pointer reference token (RFC 6901).
func escapePointer(s string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(s)
}
