package gates

import (
	"context"
	"fmt"
	"log/slog"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/policy"
	"github.com/kerf-dev/kerf/cluster/workload"
)

// Change is what the gates judge: a planned change and where it lands.
type Change struct {
	// Workload is the workload the change is for.
	Workload *workload.Workload
	// Strategy is how the values reach the pods.
	Strategy v1alpha1.Strategy
	// Containers are the previous and new values of the containers the
	// change touches (apply.Applier.Plan).
	Containers []v1alpha1.ContainerChange
	// Pods are the workload's pods.
	Pods []corev1.Pod
	// Guardrails are the governing policy's, with their defaults set.
	Guardrails v1alpha1.Guardrails
}

// Namespace is the workload's namespace.
func (c *Change) Namespace() string { return c.Workload.Object.GetNamespace() }

// RaisesRequestsOnNodes reports whether the change raises a request of
// pods already placed on nodes: an in-place increase, which the node's
// free allocatable must hold.
func (c *Change) RaisesRequestsOnNodes() bool {
	if c.Strategy != v1alpha1.StrategyInPlace {
		return false
	}
	for _, cc := range c.Containers {
		before, after := cc.Previous.Requests, cc.Applied.Requests
		if after == nil {
			continue
		}
		if before == nil {
			before = &v1alpha1.ResourceValues{}
		}
		if raises(before.CPU, after.CPU) || raises(before.Memory, after.Memory) {
			return true
		}
	}
	return false
}

// Gate is one check before an apply.
type Gate interface {
	// Name is the gate's name, the reason of the block it gives (one of
	// the v1alpha1.Reason* gate reasons).
	Name() string
	// Check returns a block naming the figures that refuse the change,
	// or nil when it may go ahead. An error means the gate could not be
	// evaluated: its object could not be read.
	Check(ctx context.Context, ch *Change) (*policy.Block, error)
}

// Checker runs its gates in order.
type Checker struct {
	// Gates are checked in order; the first block wins.
	Gates []Gate
	// Log records a gate that could not be evaluated and was passed;
	// nil logs nothing.
	Log *slog.Logger
}

// Check returns the first gate's block, or nil when every gate lets the
// change go ahead. A gate that cannot be evaluated fails closed for a
// change that raises requests on nodes (reason GateUnavailable, naming
// the gate and the error). For any other change it is passed and logged.
func (k *Checker) Check(ctx context.Context, ch *Change) (*policy.Block, error) {
	if k == nil {
		return nil, nil
	}
	for _, g := range k.Gates {
		b, err := g.Check(ctx, ch)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if ch.RaisesRequestsOnNodes() {
				return &policy.Block{Reason: v1alpha1.ReasonGateUnavailable,
					Message: fmt.Sprintf("the %s gate cannot be evaluated and the change raises requests of running pods: %v", g.Name(), err)}, nil
			}
			if k.Log != nil {
				k.Log.Info("a gate cannot be evaluated; the change does not raise requests on nodes, so it passes",
					"gate", g.Name(), "workload", ch.Workload.String(), "err", err)
			}
			continue
		}
		if b != nil {
			return b, nil
		}
	}
	return nil, nil
}

// raises reports whether after sets a value above before; an absent
// before is none at all.
func raises(before, after *resource.Quantity) bool {
	if after == nil {
		return false
	}
	return before == nil || after.Cmp(*before) > 0
}

// Options configure the gates Default builds.
type Options struct {
	// ProtectedNamespaces are namespaces whose workloads Kerf never
	// changes.
	ProtectedNamespaces []string
}

// Default is the leader's gates, in the order they are checked, reading
// through r (the leader's cache).
func Default(r client.Reader, o Options, log *slog.Logger) *Checker {
	return &Checker{Log: log, Gates: []Gate{
		ProtectedNamespace{Namespaces: o.ProtectedNamespaces},
		RolloutInProgress{},
		QoSClass{},
		PodLevelResources{},
		LimitRange{Reader: r},
		ResourceQuota{Reader: r},
		DisruptionBudget{Reader: r},
		NodeHeadroom{Reader: r},
	}}
}
