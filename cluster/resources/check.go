package resources

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// LimitBelow is a resource whose limit is below its request, which
// Kubernetes refuses in a pod.
type LimitBelow struct {
	// Resource is cpu or memory.
	Resource corev1.ResourceName
	// Request and Limit are the offending values.
	Request, Limit resource.Quantity
}

// LimitBelowRequest returns the first resource, cpu then memory, whose
// limit in rr is below its request; ok is false when none is.
func LimitBelowRequest(rr corev1.ResourceRequirements) (lb LimitBelow, ok bool) {
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		req, hasReq := rr.Requests[name]
		lim, hasLim := rr.Limits[name]
		if hasReq && hasLim && lim.Cmp(req) < 0 {
			return LimitBelow{Resource: name, Request: req, Limit: lim}, true
		}
	}
	return LimitBelow{}, false
}

// QOSClass computes a pod's QoS class from its spec as the apiserver does,
// in ComputePodQOS of pkg/apis/core/v1/helper/qos. Kubernetes refuses an
// in-place resize that changes the class.
//   - Pod-level resources decide when set; ok is then false, as container
//     values do not decide.
//   - Otherwise a container with unequal cpu or memory requests and limits
//     makes the pod Burstable, all-equal non-zero values make it
//     Guaranteed, none make it BestEffort.
//   - Requests absent but limited default to the limit, as the apiserver
//     defaults a pod created from a template.
func QOSClass(spec *corev1.PodSpec) (qos corev1.PodQOSClass, ok bool) {
	if spec.Resources != nil && len(spec.Resources.Requests)+len(spec.Resources.Limits) > 0 {
		return "", false
	}
	// The containers where they are, and their requests defaulted as
	// they are read: the recommender asks once a workload a pass.
	for _, cs := range [2][]corev1.Container{spec.InitContainers, spec.Containers} {
		for i := range cs {
			c := requirementsQOS(&cs[i].Resources)
			switch {
			case c == corev1.PodQOSBurstable:
				return c, true
			case qos == "":
				qos = c
			case qos != c:
				return corev1.PodQOSBurstable, true
			}
		}
	}
	if qos == "" {
		qos = corev1.PodQOSBestEffort
	}
	return qos, true
}

// requirementsQOS is the QoS class one container's requirements give, an
// absent request having the limit's value, as the apiserver defaults it.
func requirementsQOS(rr *corev1.ResourceRequirements) corev1.PodQOSClass {
	if len(rr.Requests) == 0 && len(rr.Limits) == 0 {
		return corev1.PodQOSBestEffort
	}
	var qos corev1.PodQOSClass
	for _, res := range [2]corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		lim := rr.Limits[res]
		req, ok := rr.Requests[res]
		if !ok {
			req = lim
		}
		var r corev1.PodQOSClass
		switch {
		case !req.Equal(lim):
			return corev1.PodQOSBurstable
		case req.IsZero():
			r = corev1.PodQOSBestEffort
		default:
			r = corev1.PodQOSGuaranteed
		}
		if qos == "" {
			qos = r
		} else if qos != r {
			return corev1.PodQOSBurstable
		}
	}
	return qos
}

// PodLevelExceeded checks a pod spec's containers against its pod-level
// resources (spec.resources), as the apiserver's pod validation does. The
// requests of the regular and sidecar containers may not sum above the
// pod's request, and no container's limit may exceed the pod's. It
// returns what exceeds, and false when nothing does or no pod-level
// resources are set.
func PodLevelExceeded(spec *corev1.PodSpec) (string, bool) {
	pod := spec.Resources
	if pod == nil {
		return "", false
	}
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if podReq, ok := pod.Requests[name]; ok {
			var sum resource.Quantity
			for _, c := range spec.Containers {
				if q, ok := c.Resources.Requests[name]; ok {
					sum.Add(q)
				}
			}
			for _, c := range spec.InitContainers {
				if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
					if q, ok := c.Resources.Requests[name]; ok {
						sum.Add(q)
					}
				}
			}
			if sum.Cmp(podReq) > 0 {
				return fmt.Sprintf("containers request %s %s, above the pod's %s", sum.String(), name, podReq.String()), true
			}
		}
		if podLim, ok := pod.Limits[name]; ok {
			for _, c := range spec.Containers {
				if q, ok := c.Resources.Limits[name]; ok && q.Cmp(podLim) > 0 {
					return fmt.Sprintf("container %s limit %s %s, above the pod's %s", c.Name, name, q.String(), podLim.String()), true
				}
			}
		}
	}
	return "", false
}
