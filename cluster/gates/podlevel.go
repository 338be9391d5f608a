package gates

import (
	"context"
	"fmt"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/policy"
	"github.com/kerf-dev/kerf/cluster/resources"
)

// PodLevelResources refuses a change whose container values do not fit
// the pod-level resources (spec.resources) the pods set, with the pod-level
// values the change sets too. The containers' requests may not sum above
// the pod's, nor a container's limit exceed the pod's. The apiserver would
// refuse the resize or the template.
type PodLevelResources struct{}

// Name is the gate's reason, PodLevelResources.
func (PodLevelResources) Name() string { return v1alpha1.ReasonPodLevelResources }

// Check judges each pod of an InPlace change with its new values, and
// the pod template with them for any other strategy.
func (g PodLevelResources) Check(_ context.Context, ch *Change) (*policy.Block, error) {
	if ch.Strategy == v1alpha1.StrategyInPlace {
		for i := range ch.Pods {
			pod := withValues(&ch.Pods[i], ch.Containers)
			if what, bad := resources.PodLevelExceeded(&pod.Spec); bad {
				return g.block(fmt.Sprintf("pod %s", pod.Name), what), nil
			}
		}
		return nil, nil
	}
	_, after := podSpecs(ch)
	if what, bad := resources.PodLevelExceeded(after); bad {
		return g.block("the pod template of "+ch.Workload.String(), what), nil
	}
	return nil, nil
}

// block says what sets pod-level resources and what exceeds them.
func (g PodLevelResources) block(who, what string) *policy.Block {
	return &policy.Block{Reason: g.Name(), Message: fmt.Sprintf("%s sets pod-level resources (spec.resources) and with the new values %s; "+
		"the recommendation's (pod) entry can change the pod-level values with them", who, what)}
}
