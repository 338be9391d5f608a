// Package resources holds what Kerf knows about a container's cpu and
// memory values. It is pure: no I/O.
//
//   - Field is one of the four values a recommendation sets (requests and
//     limits of cpu and memory); it reads and writes them in Kerf's types
//     and in Kubernetes' resource requirements.
//   - Moved, Previous and Applied say which resources a change moved and
//     its previous and applied values.
//   - QOSClass is the QoS class a pod spec gets; LimitBelowRequest is the
//     check Kubernetes would refuse a pod for.
package resources

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/kerf-dev/kerf/api/v1alpha1"
)

// Field is one of the four values a recommendation can set on a container:
// requests or limits of cpu or memory.
type Field struct {
	// Limits says the field is a limit, else a request.
	Limits bool
	// Resource is cpu or memory.
	Resource v1alpha1.ResourceName
}

// Fields are the four fields, in the order they are reported: requests
// before limits, cpu before memory.
var Fields = [...]Field{
	{Limits: false, Resource: v1alpha1.ResourceCPU},
	{Limits: false, Resource: v1alpha1.ResourceMemory},
	{Limits: true, Resource: v1alpha1.ResourceCPU},
	{Limits: true, Resource: v1alpha1.ResourceMemory},
}

// String names the field as in a pod spec, such as requests.cpu.
func (f Field) String() string {
	return f.Section() + "." + string(f.Resource)
}

// Section is the part of the resource requirements the field lives in:
// requests or limits.
func (f Field) Section() string {
	if f.Limits {
		return "limits"
	}
	return "requests"
}

// Name is the field's resource as Kubernetes names it.
func (f Field) Name() corev1.ResourceName { return corev1.ResourceName(f.Resource) }

// Get returns the field's value in Kerf's requests and limits, nil when
// absent.
func (f Field) Get(requests, limits *v1alpha1.ResourceValues) *resource.Quantity {
	v := requests
	if f.Limits {
		v = limits
	}
	if v == nil {
		return nil
	}
	if f.Resource == v1alpha1.ResourceCPU {
		return v.CPU
	}
	return v.Memory
}

// Set writes q (copied) into Kerf's requests or limits, allocating them as
// needed; nil removes the value, and values left empty become nil.
func (f Field) Set(requests, limits **v1alpha1.ResourceValues, q *resource.Quantity) {
	v := requests
	if f.Limits {
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
	if f.Resource == v1alpha1.ResourceCPU {
		(*v).CPU = c
	} else {
		(*v).Memory = c
	}
	if (*v).CPU == nil && (*v).Memory == nil {
		*v = nil
	}
}

// In returns the field's value in Kubernetes resource requirements, nil
// when absent.
func (f Field) In(rr *corev1.ResourceRequirements) *resource.Quantity {
	list := rr.Requests
	if f.Limits {
		list = rr.Limits
	}
	q, ok := list[f.Name()]
	if !ok {
		return nil
	}
	return &q
}

// SetIn writes q (copied) into Kubernetes resource requirements; nil
// removes the value.
func (f Field) SetIn(rr *corev1.ResourceRequirements, q *resource.Quantity) {
	list := &rr.Requests
	if f.Limits {
		list = &rr.Limits
	}
	if q == nil {
		delete(*list, f.Name())
		return
	}
	if *list == nil {
		*list = corev1.ResourceList{}
	}
	(*list)[f.Name()] = q.DeepCopy()
}

// SameQuantity reports whether two optional quantities are equal: both
// absent, or both present with the same amount (250m equals 0.25).
func SameQuantity(a, b *resource.Quantity) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return a.Cmp(*b) == 0
}

// ContainerValues converts a container's requirements to Kerf's values,
// keeping cpu and memory only.
func ContainerValues(c *corev1.Container) v1alpha1.ContainerResources {
	cr := v1alpha1.ContainerResources{Name: c.Name}
	for _, f := range Fields {
		f.Set(&cr.Requests, &cr.Limits, f.In(&c.Resources))
	}
	return cr
}
