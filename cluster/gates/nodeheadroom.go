package gates

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/policy"
)

// NodeNameField lists pods by the node they are bound to. The apiserver
// serves it as a field selector; the leader's cache indexes it
// (cluster/rightsizing's setup).
const NodeNameField = "spec.nodeName"

// NodeHeadroom refuses an in-place change that raises requests when a
// pod's node has no room for the increase. The room is what the kubelet
// admits a resize against: the Node's status.allocatable less the
// requests of the pods bound to it that have not ended. A pod's requests
// are the larger of its spec's and those the kubelet allocated or reports
// (podRequests). Without the gate the kubelet marks the resize
// Infeasible and the health watch rolls it back after the fact.
type NodeHeadroom struct {
	// Reader reads Nodes and the pods on them (the leader's cache, with
	// IndexPodsByNode).
	Reader client.Reader
}

// Name implements Gate.
func (NodeHeadroom) Name() string { return v1alpha1.ReasonNodeHeadroom }

// Check implements Gate.
func (g NodeHeadroom) Check(ctx context.Context, ch *Change) (*policy.Block, error) {
	if !ch.RaisesRequestsOnNodes() {
		return nil, nil
	}
	// What each node's pods of the workload add, and which they are.
	add := map[string]corev1.ResourceList{}
	pods := map[string][]string{}
	for i := range ch.Pods {
		pod := &ch.Pods[i]
		if pod.Spec.NodeName == "" || terminated(pod) {
			continue
		}
		sum := add[pod.Spec.NodeName]
		if sum == nil {
			sum = corev1.ResourceList{}
			add[pod.Spec.NodeName] = sum
		}
		addTo(sum, podRequests(withValues(pod, ch.Containers)), 1)
		subFrom(sum, podRequests(pod))
		pods[pod.Spec.NodeName] = append(pods[pod.Spec.NodeName], pod.Name)
	}
	nodes := make([]string, 0, len(add))
	for n := range add {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	for _, name := range nodes {
		b, err := g.checkNode(ctx, name, add[name], pods[name])
		if b != nil || err != nil {
			return b, err
		}
	}
	return nil, nil
}

// checkNode returns a block when node name has less free allocatable
// than need, for any of CPU and memory.
func (g NodeHeadroom) checkNode(ctx context.Context, name string, need corev1.ResourceList, pods []string) (*policy.Block, error) {
	var node corev1.Node
	if err := g.Reader.Get(ctx, client.ObjectKey{Name: name}, &node); err != nil {
		return nil, fmt.Errorf("read Node %s: %w", name, err)
	}
	var bound corev1.PodList
	if err := g.Reader.List(ctx, &bound, client.MatchingFields{NodeNameField: name}); err != nil {
		return nil, fmt.Errorf("list the pods on Node %s: %w", name, err)
	}
	requested := corev1.ResourceList{}
	n := 0
	for i := range bound.Items {
		if !terminated(&bound.Items[i]) {
			addTo(requested, podRequests(&bound.Items[i]), 1)
			n++
		}
	}
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		more := value(need, r)
		if more.Sign() <= 0 {
			continue
		}
		allocatable, ok := node.Status.Allocatable[r]
		if !ok {
			continue // the node does not count it
		}
		free := allocatable.DeepCopy()
		free.Sub(value(requested, r))
		if more.Cmp(free) > 0 {
			used := value(requested, r)
			return &policy.Block{Reason: v1alpha1.ReasonNodeHeadroom, Message: fmt.Sprintf(
				"Node %s: %s has %s free (allocatable %s, requested %s by %d pods), the change needs %s more for %s",
				name, r, free.String(), allocatable.String(), used.String(), n, more.String(), podNames(pods))}, nil
		}
	}
	return nil, nil
}

// podNames names pods for a message: the first few, then how many more.
func podNames(pods []string) string {
	const shown = 5
	word := "pod "
	if len(pods) > 1 {
		word = "pods "
	}
	if len(pods) <= shown {
		return word + strings.Join(pods, ", ")
	}
	return fmt.Sprintf("%s%s and %d more", word, strings.Join(pods[:shown], ", "), len(pods)-shown)
}
