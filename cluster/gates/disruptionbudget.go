package gates

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/policy"
)

// DisruptionBudget refuses a change that restarts pods while a
// PodDisruptionBudget selecting them allows no disruption
// (status.disruptionsAllowed 0). A change restarts pods when it is a
// Rollout, or an InPlace change of a resource whose container's
// resizePolicy says RestartContainer. The Deployment controller does not
// read PDBs, but a budget at 0 says the workload has no room for one
// more pod down (docs/health.md).
type DisruptionBudget struct {
	// Reader reads the namespace's PodDisruptionBudgets (the leader's
	// cache).
	Reader client.Reader
}

// Name implements Gate.
func (DisruptionBudget) Name() string { return v1alpha1.ReasonDisruptionBudget }

// Check implements Gate.
func (g DisruptionBudget) Check(ctx context.Context, ch *Change) (*policy.Block, error) {
	how := restarts(ch)
	if how == "" {
		return nil, nil
	}
	var pdbs policyv1.PodDisruptionBudgetList
	if err := g.Reader.List(ctx, &pdbs, client.InNamespace(ch.Namespace())); err != nil {
		return nil, fmt.Errorf("list PodDisruptionBudgets of %s: %w", ch.Namespace(), err)
	}
	for i := range pdbs.Items {
		pdb := &pdbs.Items[i]
		if pdb.Status.DisruptionsAllowed > 0 {
			continue
		}
		selects, err := selectsAny(pdb, ch.Pods)
		if err != nil {
			return nil, err
		}
		if !selects {
			continue
		}
		return &policy.Block{Reason: v1alpha1.ReasonDisruptionBudget, Message: fmt.Sprintf(
			"PodDisruptionBudget %s/%s allows no disruption (currentHealthy %d, desiredHealthy %d, disruptionsAllowed %d) and %s",
			pdb.Namespace, pdb.Name, pdb.Status.CurrentHealthy, pdb.Status.DesiredHealthy, pdb.Status.DisruptionsAllowed, how)}, nil
	}
	return nil, nil
}

// restarts says how the change restarts pods, or "" when it restarts
// none. A Rollout replaces them. An InPlace change restarts a container
// whose resizePolicy for a resource it changes is RestartContainer.
func restarts(ch *Change) string {
	switch ch.Strategy {
	case v1alpha1.StrategyRollout:
		return "the Rollout replaces the workload's pods"
	case v1alpha1.StrategyInPlace:
	default:
		return ""
	}
	for _, cc := range ch.Containers {
		for _, r := range changedResources(cc) {
			for i := range ch.Pods {
				if restartsFor(&ch.Pods[i], cc.Name, r) {
					return fmt.Sprintf("the in-place resize restarts container %s (its %s resizePolicy is RestartContainer)", cc.Name, r)
				}
			}
		}
	}
	return ""
}

// changedResources are the resources whose requests or limits the change
// sets to another value.
func changedResources(cc v1alpha1.ContainerChange) []corev1.ResourceName {
	var out []corev1.ResourceName
	differs := func(pick func(*v1alpha1.ResourceValues) *resource.Quantity) bool {
		for _, pair := range [][2]*v1alpha1.ResourceValues{{cc.Previous.Requests, cc.Applied.Requests}, {cc.Previous.Limits, cc.Applied.Limits}} {
			after := pick(pair[1])
			if after == nil {
				continue
			}
			before := pick(pair[0])
			if before == nil || before.Cmp(*after) != 0 {
				return true
			}
		}
		return false
	}
	if differs(func(v *v1alpha1.ResourceValues) *resource.Quantity {
		if v == nil {
			return nil
		}
		return v.CPU
	}) {
		out = append(out, corev1.ResourceCPU)
	}
	if differs(func(v *v1alpha1.ResourceValues) *resource.Quantity {
		if v == nil {
			return nil
		}
		return v.Memory
	}) {
		out = append(out, corev1.ResourceMemory)
	}
	return out
}

// restartsFor reports whether pod's container name restarts on a resize
// of resource r (its resizePolicy; NotRequired when unset).
func restartsFor(pod *corev1.Pod, name string, r corev1.ResourceName) bool {
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		if c.Name != name {
			continue
		}
		for _, p := range c.ResizePolicy {
			if p.ResourceName == r {
				return p.RestartPolicy == corev1.RestartContainer
			}
		}
	}
	return false
}

// selectsAny reports whether pdb selects one of pods. As the disruption
// controller reads policy/v1, an empty selector selects every pod of the
// namespace and a nil one none.
func selectsAny(pdb *policyv1.PodDisruptionBudget, pods []corev1.Pod) (bool, error) {
	if pdb.Spec.Selector == nil {
		return false, nil
	}
	sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	if err != nil {
		return false, fmt.Errorf("PodDisruptionBudget %s/%s: spec.selector: %w", pdb.Namespace, pdb.Name, err)
	}
	for i := range pods {
		if !terminated(&pods[i]) && sel.Matches(labels.Set(pods[i].Labels)) {
			return true, nil
		}
	}
	return false, nil
}
