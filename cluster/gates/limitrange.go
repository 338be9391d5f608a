package gates

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/policy"
)

// LimitRange refuses a change that a LimitRange of the namespace would
// refuse. For Rollout the new pods would not be created; for InPlace the
// resize would be refused. It checks the cpu and memory the change sets.
//
// The checks are the apiserver's LimitRanger admission plugin's
// (plugin/pkg/admission/limitranger), which also admits a pod's resize:
//   - type Container: each container's request and limit against min and
//     max, and limit/request against maxLimitRequestRatio;
//   - type Pod: the pod's sums (init containers as the scheduler counts
//     them, pod-level resources where set) against the same bounds.
//
// Absent values are first defaulted as a new pod's are: a request from
// the limit, then the LimitRange's default and defaultRequest.
type LimitRange struct {
	// Reader reads the namespace's LimitRanges (the leader's cache).
	Reader client.Reader
}

// Name is the gate's reason, LimitRange.
func (LimitRange) Name() string { return v1alpha1.ReasonLimitRange }

// gatedResources are the resources a change sets, the ones checked.
var gatedResources = []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory}

// Check blocks a change whose pod spec after breaks a bound of a
// LimitRange, naming the LimitRange, the field and its bound.
func (g LimitRange) Check(ctx context.Context, ch *Change) (*policy.Block, error) {
	var list corev1.LimitRangeList
	if err := g.Reader.List(ctx, &list, client.InNamespace(ch.Namespace())); err != nil {
		return nil, fmt.Errorf("list the LimitRanges of namespace %s: %w", ch.Namespace(), err)
	}
	if len(list.Items) == 0 {
		return nil, nil
	}
	slices.SortFunc(list.Items, func(a, b corev1.LimitRange) int { return strings.Compare(a.Name, b.Name) })
	_, after := podSpecs(ch)
	for i := range list.Items {
		lr := &list.Items[i]
		spec := withLimitRangeDefaults(after, lr)
		if v := limitRangeViolation(lr, spec); v != "" {
			return &policy.Block{Reason: g.Name(), Message: fmt.Sprintf("LimitRange %s/%s: %s", lr.Namespace, lr.Name, v)}, nil
		}
	}
	return nil, nil
}

// limitRangeViolation returns the first bound of lr that spec breaks, or
// "" when it keeps them all.
func limitRangeViolation(lr *corev1.LimitRange, spec *corev1.PodSpec) string {
	for _, item := range lr.Spec.Limits {
		switch item.Type {
		case corev1.LimitTypeContainer:
			for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
				if v := boundsViolation(&item, c.Resources.Requests, c.Resources.Limits); v != "" {
					return "container " + c.Name + " " + v
				}
			}
		case corev1.LimitTypePod:
			if v := boundsViolation(&item, podSums(spec, requestsOf), podSums(spec, limitsOf)); v != "" {
				return "pod total " + v
			}
		}
	}
	return ""
}

// boundsViolation checks requests and limits against one item's min, max
// and maxLimitRequestRatio, as LimitRanger's minConstraint, maxConstraint
// and limitRequestRatioConstraint do.
func boundsViolation(item *corev1.LimitRangeItem, requests, limits corev1.ResourceList) string {
	kind := string(item.Type)
	for _, name := range gatedResources {
		req, hasReq := requests[name]
		lim, hasLim := limits[name]
		if bound, ok := item.Min[name]; ok {
			switch {
			case !hasReq:
				return fmt.Sprintf("has no %s request, and the %s min is %s", name, kind, bound.String())
			case req.Cmp(bound) < 0:
				return fmt.Sprintf("%s request %s below its %s min %s", name, req.String(), kind, bound.String())
			case hasLim && lim.Cmp(bound) < 0:
				return fmt.Sprintf("%s limit %s below its %s min %s", name, lim.String(), kind, bound.String())
			}
		}
		if bound, ok := item.Max[name]; ok {
			switch {
			case !hasLim:
				return fmt.Sprintf("has no %s limit, and the %s max is %s", name, kind, bound.String())
			case lim.Cmp(bound) > 0:
				return fmt.Sprintf("%s limit %s above its %s max %s", name, lim.String(), kind, bound.String())
			case hasReq && req.Cmp(bound) > 0:
				return fmt.Sprintf("%s request %s above its %s max %s", name, req.String(), kind, bound.String())
			}
		}
		if bound, ok := item.MaxLimitRequestRatio[name]; ok {
			if !hasReq || req.IsZero() || !hasLim || lim.IsZero() {
				return fmt.Sprintf("needs a %s request and limit, for the %s maxLimitRequestRatio %s", name, kind, bound.String())
			}
			ratio := lim.AsApproximateFloat64() / req.AsApproximateFloat64()
			if ratio > bound.AsApproximateFloat64() {
				return fmt.Sprintf("%s limit %s / request %s = %.3g above its %s maxLimitRequestRatio %s",
					name, lim.String(), req.String(), ratio, kind, bound.String())
			}
		}
	}
	return ""
}

// withLimitRangeDefaults returns a copy of spec with the containers'
// absent requests and limits defaulted as a new pod's are. A request is
// the limit (the apiserver's defaulting), else lr's Container
// defaultRequest; a limit is lr's default (LimitRanger's mutation).
func withLimitRangeDefaults(spec *corev1.PodSpec, lr *corev1.LimitRange) *corev1.PodSpec {
	out := spec.DeepCopy()
	var def, defReq corev1.ResourceList
	for _, item := range lr.Spec.Limits {
		if item.Type == corev1.LimitTypeContainer {
			def, defReq = item.Default, item.DefaultRequest
		}
	}
	fill := func(cs []corev1.Container) {
		for i := range cs {
			rr := &cs[i].Resources
			for _, name := range gatedResources {
				if _, ok := rr.Requests[name]; !ok {
					if lim, ok := rr.Limits[name]; ok {
						setQuantity(&rr.Requests, name, lim)
					}
				}
				if _, ok := rr.Limits[name]; !ok {
					if q, ok := def[name]; ok {
						setQuantity(&rr.Limits, name, q)
					}
				}
				if _, ok := rr.Requests[name]; !ok {
					if q, ok := defReq[name]; ok {
						setQuantity(&rr.Requests, name, q)
					}
				}
			}
		}
	}
	fill(out.InitContainers)
	fill(out.Containers)
	return out
}

func setQuantity(l *corev1.ResourceList, name corev1.ResourceName, q resource.Quantity) {
	if *l == nil {
		*l = corev1.ResourceList{}
	}
	(*l)[name] = q.DeepCopy()
}

func requestsOf(rr *corev1.ResourceRequirements) corev1.ResourceList { return rr.Requests }
func limitsOf(rr *corev1.ResourceRequirements) corev1.ResourceList   { return rr.Limits }

// podSums is a pod's total of requests or limits (side), as LimitRanger's
// podRequests and podLimits count it.
//   - The containers and sidecars add up.
//   - An init container counts with the sidecars started before it; the
//     larger of the two totals wins.
//   - Pod-level resources override where set.
func podSums(spec *corev1.PodSpec, side func(*corev1.ResourceRequirements) corev1.ResourceList) corev1.ResourceList {
	sum := corev1.ResourceList{}
	for i := range spec.Containers {
		addResources(sum, side(&spec.Containers[i].Resources))
	}
	sidecars, inits := corev1.ResourceList{}, corev1.ResourceList{}
	for i := range spec.InitContainers {
		c := &spec.InitContainers[i]
		own := side(&c.Resources)
		var counted corev1.ResourceList
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			addResources(sum, own)
			addResources(sidecars, own)
			counted = sidecars
		} else {
			counted = corev1.ResourceList{}
			addResources(counted, own)
			addResources(counted, sidecars)
		}
		maxResources(inits, counted)
	}
	maxResources(sum, inits)
	if spec.Resources != nil {
		for _, name := range gatedResources {
			if q, ok := side(spec.Resources)[name]; ok {
				sum[name] = q.DeepCopy()
			}
		}
	}
	return sum
}

func addResources(sum, l corev1.ResourceList) {
	for name, q := range l {
		v := sum[name]
		v.Add(q)
		sum[name] = v
	}
}

func maxResources(m, l corev1.ResourceList) {
	for name, q := range l {
		if v, ok := m[name]; !ok || q.Cmp(v) > 0 {
			m[name] = q.DeepCopy()
		}
	}
}
