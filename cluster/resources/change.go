package resources

import "github.com/kerf-dev/kerf/api/v1alpha1"

// Moved reports whether the container change moved resource res: a request
// or limit of it that the change applies differs from the previous value.
// The health watch evaluates a resource's rules only where it moved
// (docs/design.md section 3).
func Moved(cc *v1alpha1.ContainerChange, res v1alpha1.ResourceName) bool {
	for _, f := range Fields {
		if f.Resource != res {
			continue
		}
		applied := f.Get(cc.Applied.Requests, cc.Applied.Limits)
		if applied == nil {
			continue
		}
		if prev := f.Get(cc.Previous.Requests, cc.Previous.Limits); prev == nil || prev.Cmp(*applied) != 0 {
			return true
		}
	}
	return false
}

// Previous returns the values a change replaced, per container: what a
// rollback with restoreTo Previous puts back.
func Previous(change *v1alpha1.Change) []v1alpha1.ContainerResources {
	return changeSide(change, func(cc *v1alpha1.ContainerChange) v1alpha1.Resources { return cc.Previous })
}

// Applied returns the values a change applied, per container: what a
// healthy watch records as the last healthy values.
func Applied(change *v1alpha1.Change) []v1alpha1.ContainerResources {
	return changeSide(change, func(cc *v1alpha1.ContainerChange) v1alpha1.Resources { return cc.Applied })
}

// changeSide copies one side of each container's change.
func changeSide(change *v1alpha1.Change, side func(*v1alpha1.ContainerChange) v1alpha1.Resources) []v1alpha1.ContainerResources {
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
