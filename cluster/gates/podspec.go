package gates

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/kerf-dev/kerf/api/v1alpha1"
)

// podSpecs returns the pod spec the change starts from and the one it
// leads to. An InPlace change starts from a pod's spec, or the template
// when there is no pod. Any other starts from the template, which new
// pods are made from.
func podSpecs(ch *Change) (before, after *corev1.PodSpec) {
	before = &ch.Workload.Template.Spec
	if ch.Strategy == v1alpha1.StrategyInPlace && len(ch.Pods) > 0 {
		before = &ch.Pods[0].Spec
	}
	after = before.DeepCopy()
	applyValues(after, ch.Containers)
	return before, after
}
