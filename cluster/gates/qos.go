package gates

import (
	"context"
	"fmt"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/policy"
	"github.com/kerf-dev/kerf/cluster/resources"
)

// QoSClass refuses a change that moves the pods to another QoS class
// (Guaranteed, Burstable, BestEffort). The class decides the pods'
// eviction order and their cgroups, a change a person should choose.
//   - A Rollout or Deferred change may, with the policy's
//     spec.guardrails.allowQoSChange.
//   - An InPlace change never may: the apiserver refuses a resize that
//     changes the class (pod validation of the resize subresource).
//
// Pods with pod-level resources are not judged: their class comes from
// those, which Kerf does not change.
type QoSClass struct{}

// Name is the gate's reason, QoSClass.
func (QoSClass) Name() string { return v1alpha1.ReasonQoSClass }

// Check blocks a change whose pods' QoS class after differs from before,
// naming both classes.
func (g QoSClass) Check(_ context.Context, ch *Change) (*policy.Block, error) {
	before, after := podSpecs(ch)
	from, okb := resources.QOSClass(before)
	to, oka := resources.QOSClass(after)
	if !okb || !oka || from == to {
		return nil, nil
	}
	msg := fmt.Sprintf("the change moves the pods of %s from QoS class %s to %s", ch.Workload, from, to)
	switch {
	case ch.Strategy == v1alpha1.StrategyInPlace:
		msg += "; the apiserver refuses an in-place resize that changes the QoS class (strategy Rollout with spec.guardrails.allowQoSChange can)"
	case ch.Guardrails.AllowQoSChange:
		return nil, nil
	default:
		msg += ", and the policy does not allow it (spec.guardrails.allowQoSChange)"
	}
	return &policy.Block{Reason: g.Name(), Message: msg}, nil
}
