package apply

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/kerf-dev/kerf/api/v1alpha1"
)

// field is one of the four values a recommendation can set on a container:
// requests or limits of cpu or memory.
type field struct {
	limits bool
	res    v1alpha1.ResourceName
}

// fields are the four fields, in the order they are reported.
var fields = []field{
	{limits: false, res: v1alpha1.ResourceCPU},
	{limits: false, res: v1alpha1.ResourceMemory},
	{limits: true, res: v1alpha1.ResourceCPU},
	{limits: true, res: v1alpha1.ResourceMemory},
}

// String names the field as in a pod spec, such as requests.cpu.
func (f field) String() string {
	if f.limits {
		return "limits." + string(f.res)
	}
	return "requests." + string(f.res)
}

func (f field) corev1Name() corev1.ResourceName { return corev1.ResourceName(f.res) }

// get returns the field's value in requests/limits, nil when absent.
func (f field) get(requests, limits *v1alpha1.ResourceValues) *resource.Quantity {
	v := requests
	if f.limits {
		v = limits
	}
	if v == nil {
		return nil
	}
	if f.res == v1alpha1.ResourceCPU {
		return v.CPU
	}
	return v.Memory
}

// set writes q (copied) into requests/limits, allocating them as needed.
func (f field) set(requests, limits **v1alpha1.ResourceValues, q *resource.Quantity) {
	v := requests
	if f.limits {
		v = limits
	}
	if q == nil && *v == nil {
		return
	}
	if *v == nil {
		*v = &v1alpha1.ResourceValues{}
	}
	var c *resource.Quantity
	if q != nil {
		c = ptr.To(q.DeepCopy())
	}
	if f.res == v1alpha1.ResourceCPU {
		(*v).CPU = c
	} else {
		(*v).Memory = c
	}
	if (*v).CPU == nil && (*v).Memory == nil {
		*v = nil
	}
}

// getReq returns the field's value in Kubernetes resource requirements.
func (f field) getReq(rr *corev1.ResourceRequirements) *resource.Quantity {
	list := rr.Requests
	if f.limits {
		list = rr.Limits
	}
	q, ok := list[f.corev1Name()]
	if !ok {
		return nil
	}
	return &q
}

// setReq writes q into Kubernetes resource requirements; nil removes it.
func (f field) setReq(rr *corev1.ResourceRequirements, q *resource.Quantity) {
	list := &rr.Requests
	if f.limits {
		list = &rr.Limits
	}
	if q == nil {
		delete(*list, f.corev1Name())
		return
	}
	if *list == nil {
		*list = corev1.ResourceList{}
	}
	(*list)[f.corev1Name()] = q.DeepCopy()
}

// sameQuantity reports whether two optional quantities are equal: both
// absent, or both present with the same amount (250m equals 0.25).
func sameQuantity(a, b *resource.Quantity) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return a.Cmp(*b) == 0
}

// ContainerValues converts a container's requirements to Kerf's values,
// keeping cpu and memory only.
func ContainerValues(c *corev1.Container) v1alpha1.ContainerResources {
	cr := v1alpha1.ContainerResources{Name: c.Name}
	for _, f := range fields {
		f.set(&cr.Requests, &cr.Limits, f.getReq(&c.Resources))
	}
	return cr
}

// findContainer returns the named entry of list, nil when absent.
func findContainer(list []v1alpha1.ContainerResources, name string) *v1alpha1.ContainerResources {
	for i := range list {
		if list[i].Name == name {
			return &list[i]
		}
	}
	return nil
}

// target is what one call writes to one container: for each field it sets,
// the value (nil removes the value, which only a template patch can do).
type target struct {
	name   string
	values map[field]*resource.Quantity
}

// fieldsInOrder returns the target's fields in report order.
func (t target) fieldsInOrder() []field {
	out := make([]field, 0, len(t.values))
	for _, f := range fields {
		if _, ok := t.values[f]; ok {
			out = append(out, f)
		}
	}
	return out
}

// resources returns the resources the target sets, cpu before memory.
func (t target) resources() []v1alpha1.ResourceName {
	var out []v1alpha1.ResourceName
	for _, f := range t.fieldsInOrder() {
		if !slices.Contains(out, f.res) {
			out = append(out, f.res)
		}
	}
	slices.Sort(out)
	return out
}

// matches reports whether rr already holds every value of the target.
func (t target) matches(rr *corev1.ResourceRequirements) bool {
	for f, want := range t.values {
		if !sameQuantity(f.getReq(rr), want) {
			return false
		}
	}
	return true
}

// appliedTargets are the values a change applies: every field its
// containers' Applied values set.
func appliedTargets(change *v1alpha1.Change) []target {
	out := make([]target, 0, len(change.Containers))
	for _, cc := range change.Containers {
		t := target{name: cc.Name, values: map[field]*resource.Quantity{}}
		for _, f := range fields {
			if q := f.get(cc.Applied.Requests, cc.Applied.Limits); q != nil {
				t.values[f] = q
			}
		}
		if len(t.values) > 0 {
			out = append(out, t)
		}
	}
	return out
}

// restoreTargets are the values a restore writes: the fields the change
// applied, for the given resources only, with the values taken from values
// (absent there means the field had no value, so it is removed). A
// container missing from values is left alone.
func restoreTargets(change *v1alpha1.Change, values []v1alpha1.ContainerResources, resources []v1alpha1.ResourceName) []target {
	out := make([]target, 0, len(change.Containers))
	for _, cc := range change.Containers {
		v := findContainer(values, cc.Name)
		if v == nil {
			continue
		}
		t := target{name: cc.Name, values: map[field]*resource.Quantity{}}
		for _, f := range fields {
			if !slices.Contains(resources, f.res) || f.get(cc.Applied.Requests, cc.Applied.Limits) == nil {
				continue
			}
			t.values[f] = f.get(v.Requests, v.Limits)
		}
		if len(t.values) > 0 {
			out = append(out, t)
		}
	}
	return out
}

// PreviousValues returns the values a change replaced, per container: the
// values a rollback with restoreTo Previous passes to Restore.
func PreviousValues(change *v1alpha1.Change) []v1alpha1.ContainerResources {
	return changeValues(change, func(cc *v1alpha1.ContainerChange) v1alpha1.Resources { return cc.Previous })
}

// AppliedValues returns the values a change applied, per container.
func AppliedValues(change *v1alpha1.Change) []v1alpha1.ContainerResources {
	return changeValues(change, func(cc *v1alpha1.ContainerChange) v1alpha1.Resources { return cc.Applied })
}

// changeValues copies one side of each container's change.
func changeValues(change *v1alpha1.Change, side func(*v1alpha1.ContainerChange) v1alpha1.Resources) []v1alpha1.ContainerResources {
	out := make([]v1alpha1.ContainerResources, 0, len(change.Containers))
	for i := range change.Containers {
		cc := &change.Containers[i]
		r := side(cc)
		c := v1alpha1.ContainerResources{Name: cc.Name}
		if r.Requests != nil {
			c.Requests = r.Requests.DeepCopy()
		}
		if r.Limits != nil {
			c.Limits = r.Limits.DeepCopy()
		}
		out = append(out, c)
	}
	return out
}

// checkRequestsWithinLimits returns an error when a cpu or memory request
// of the container's resources (as they will be) exceeds its limit:
// Kubernetes refuses such a pod.
func checkRequestsWithinLimits(name string, rr corev1.ResourceRequirements) error {
	for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		req, hasReq := rr.Requests[res]
		lim, hasLim := rr.Limits[res]
		if hasReq && hasLim && req.Cmp(lim) > 0 {
			return fmt.Errorf("%w: container %q: requests.%s %s would exceed limits.%s %s",
				ErrInvalidValues, name, res, req.String(), res, lim.String())
		}
	}
	return nil
}

// qosClass computes a pod's QoS class from its spec as the apiserver does
// (pkg/apis/core/v1/helper/qos ComputePodQOS): pod-level resources decide
// when set; otherwise a container with unequal cpu or memory requests and
// limits makes the pod Burstable, all-equal non-zero values make it
// Guaranteed, none make it BestEffort. Requests absent but limited default
// to the limit, as the apiserver defaults a pod created from a template.
// ok is false when pod-level resources decide (container values do not).
func qosClass(spec *corev1.PodSpec) (qos corev1.PodQOSClass, ok bool) {
	if spec.Resources != nil && len(spec.Resources.Requests)+len(spec.Resources.Limits) > 0 {
		return "", false
	}
	all := slices.Concat(spec.InitContainers, spec.Containers)
	for i := range all {
		c := requirementsQOS(defaultRequests(all[i].Resources))
		switch {
		case c == corev1.PodQOSBurstable:
			return c, true
		case qos == "":
			qos = c
		case qos != c:
			return corev1.PodQOSBurstable, true
		}
	}
	if qos == "" {
		qos = corev1.PodQOSBestEffort
	}
	return qos, true
}

func defaultRequests(rr corev1.ResourceRequirements) corev1.ResourceRequirements {
	out := *rr.DeepCopy()
	for name, lim := range out.Limits {
		if _, ok := out.Requests[name]; !ok {
			if out.Requests == nil {
				out.Requests = corev1.ResourceList{}
			}
			out.Requests[name] = lim.DeepCopy()
		}
	}
	return out
}

func requirementsQOS(rr corev1.ResourceRequirements) corev1.PodQOSClass {
	if len(rr.Requests) == 0 && len(rr.Limits) == 0 {
		return corev1.PodQOSBestEffort
	}
	var qos corev1.PodQOSClass
	for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		req, lim := rr.Requests[res], rr.Limits[res]
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
