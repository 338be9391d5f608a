package gates

import (
	"context"
	"fmt"
	"slices"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/policy"
)

// ProtectedNamespace refuses every change to a workload of a protected
// namespace (the leader's --protected-namespaces, kube-system by default).
type ProtectedNamespace struct {
	// Namespaces are the protected namespaces; none protects nothing.
	Namespaces []string
}

// Name is the gate's reason, ProtectedNamespace.
func (ProtectedNamespace) Name() string { return v1alpha1.ReasonProtectedNamespace }

// Check blocks a change to a workload in a protected namespace.
func (g ProtectedNamespace) Check(_ context.Context, ch *Change) (*policy.Block, error) {
	ns := ch.Namespace()
	if !slices.Contains(g.Namespaces, ns) {
		return nil, nil
	}
	return &policy.Block{Reason: g.Name(),
		Message: fmt.Sprintf("namespace %s is protected (the leader's --protected-namespaces): Kerf never changes %s", ns, ch.Workload)}, nil
}
