package apply

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/resources"
)

// findContainer returns the named entry of list, nil when absent.
func findContainer(list []v1alpha1.ContainerResources, name string) *v1alpha1.ContainerResources {
	for i := range list {
		if list[i].Name == name {
			return &list[i]
		}
	}
	return nil
}

// target is what one call writes to one container: the value of each
// field it sets. A nil value removes the field's value, which only a
// template patch can do.
type target struct {
	name   string
	values map[resources.Field]*resource.Quantity
}

// fieldsInOrder returns the target's fields in report order.
func (t target) fieldsInOrder() []resources.Field {
	out := make([]resources.Field, 0, len(t.values))
	for _, f := range resources.Fields {
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
		if !slices.Contains(out, f.Resource) {
			out = append(out, f.Resource)
		}
	}
	slices.Sort(out)
	return out
}

// matches reports whether rr already holds every value of the target.
func (t target) matches(rr *corev1.ResourceRequirements) bool {
	for f, want := range t.values {
		if !resources.SameQuantity(f.In(rr), want) {
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
		t := target{name: cc.Name, values: map[resources.Field]*resource.Quantity{}}
		for _, f := range resources.Fields {
			if q := f.Get(cc.Applied.Requests, cc.Applied.Limits); q != nil {
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
// applied, for the given resources only, valued from values. A field
// absent from values had no value, so it is removed. A container missing
// from values is left alone.
func restoreTargets(change *v1alpha1.Change, values []v1alpha1.ContainerResources, names []v1alpha1.ResourceName) []target {
	out := make([]target, 0, len(change.Containers))
	for _, cc := range change.Containers {
		v := findContainer(values, cc.Name)
		if v == nil {
			continue
		}
		t := target{name: cc.Name, values: map[resources.Field]*resource.Quantity{}}
		for _, f := range resources.Fields {
			if !slices.Contains(names, f.Resource) || f.Get(cc.Applied.Requests, cc.Applied.Limits) == nil {
				continue
			}
			t.values[f] = f.Get(v.Requests, v.Limits)
		}
		if len(t.values) > 0 {
			out = append(out, t)
		}
	}
	return out
}
