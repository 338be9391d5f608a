package apply

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/resources"
	"github.com/kerf-dev/kerf/cluster/workload"
)

// Plan computes the change to record in status.change before acting.
// Recorded first, it tells a leader that takes over what to finish and
// what to restore (docs/design.md section 2).
//
// current is what workload w runs now (see Running). For each container
// the recommendation names whose values differ from current, Plan records
// the previous and applied values of the fields the recommendation sets.
// Resources are the resources whose requests or limits differ. When
// spec.hpa coordinates and the pod's cpu requests change, the HPA's
// previous and new targets are recorded too. AppliedAt is the Applier's
// clock.
//
// Plan returns a nil change when nothing differs, and an error when the
// values cannot run: a container the template lacks, a request above its
// limit. A change of QoS class is the QoSClass gate's (cluster/gates).
func (a *Applier) Plan(ctx context.Context, rsr *v1alpha1.RightsizingRecommendation, w *workload.Workload, current []v1alpha1.ContainerResources) (*v1alpha1.Change, error) {
	ref := rsr.Spec.TargetRef
	change := &v1alpha1.Change{AppliedAt: metav1.NewTime(a.now()), Strategy: rsr.Spec.Strategy}
	for _, c := range rsr.Spec.Containers {
		cur := findContainer(current, c.Name)
		if cur == nil && c.Name == v1alpha1.PodLevel {
			return nil, fmt.Errorf("plan for %s %s/%s: %w: the pods set no pod-level resources (spec.resources) to change; Kerf changes them only where they are set",
				ref.Kind, rsr.Namespace, ref.Name, ErrInvalidValues)
		}
		if cur == nil {
			return nil, fmt.Errorf("plan for %s %s/%s: %w: %q", ref.Kind, rsr.Namespace, ref.Name, ErrContainerNotFound, c.Name)
		}
		cc := v1alpha1.ContainerChange{Name: c.Name}
		differs := false
		for _, f := range resources.Fields {
			want := f.Get(c.Requests, c.Limits)
			if want == nil {
				continue
			}
			have := f.Get(cur.Requests, cur.Limits)
			f.Set(&cc.Previous.Requests, &cc.Previous.Limits, have)
			f.Set(&cc.Applied.Requests, &cc.Applied.Limits, want)
			if !resources.SameQuantity(have, want) {
				differs = true
				if !slices.Contains(change.Resources, f.Resource) {
					change.Resources = append(change.Resources, f.Resource)
				}
			}
		}
		if differs {
			change.Containers = append(change.Containers, cc)
		}
	}
	if len(change.Containers) == 0 {
		return nil, nil
	}
	slices.Sort(change.Resources)

	// The pod spec as it runs now and as it will run, to check the values.
	before := specWith(&w.Template.Spec, current)
	after := before.DeepCopy()
	for _, t := range appliedTargets(change) {
		rr := resources.RequirementsToSet(after, t.name)
		for f, q := range t.values {
			f.SetIn(rr, q)
		}
		if lb, bad := resources.LimitBelowRequest(*rr); bad {
			return nil, fmt.Errorf("plan for %s %s/%s: %w: %s: requests.%s %s would exceed limits.%s %s",
				ref.Kind, rsr.Namespace, ref.Name, ErrInvalidValues, resources.Describe(t.name), lb.Resource, lb.Request.String(), lb.Resource, lb.Limit.String())
		}
	}
	if coordinates(rsr) && slices.Contains(change.Resources, v1alpha1.ResourceCPU) {
		oldMilli, newMilli := cpuRequestMilli(before), cpuRequestMilli(after)
		if oldMilli > 0 && newMilli > 0 && oldMilli != newMilli {
			hpa, _, err := a.findHPA(ctx, rsr)
			if err != nil {
				return nil, fmt.Errorf("plan for %s %s/%s: %w", ref.Kind, rsr.Namespace, ref.Name, err)
			}
			if hpa != nil {
				prev := *hpa.Spec.Metrics[cpuUtilizationMetric(hpa)].Resource.Target.AverageUtilization
				if next := hpaTarget(prev, oldMilli, newMilli); next != prev {
					change.HPA = &v1alpha1.HPAChange{Name: hpa.Name, PreviousTargetCPUUtilization: prev, AppliedTargetCPUUtilization: next}
				}
			}
		}
	}
	return change, nil
}

// specWith returns a copy of the pod spec whose containers, and pod-level
// resources, hold the given cpu and memory values.
func specWith(spec *corev1.PodSpec, values []v1alpha1.ContainerResources) *corev1.PodSpec {
	out := spec.DeepCopy()
	for _, v := range values {
		if v.Name == v1alpha1.PodLevel && out.Resources == nil {
			continue
		}
		rr := resources.RequirementsToSet(out, v.Name)
		if rr == nil {
			continue
		}
		for _, f := range resources.Fields {
			f.SetIn(rr, f.Get(v.Requests, v.Limits))
		}
	}
	return out
}

// cpuRequestMilli is the pod's cpu request in millicores as the HPA sees
// it. That is the sum over its containers, not its init containers. A
// container without a request counts its limit, as the apiserver defaults
// it.
func cpuRequestMilli(spec *corev1.PodSpec) int64 {
	var sum int64
	for _, c := range spec.Containers {
		if q, ok := c.Resources.Requests[corev1.ResourceCPU]; ok {
			sum += q.MilliValue()
		} else if q, ok := c.Resources.Limits[corev1.ResourceCPU]; ok {
			sum += q.MilliValue()
		}
	}
	return sum
}
