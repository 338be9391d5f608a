package gates_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/gates"
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/kubetest"
)

// node creates a Node named for ns with allocatable cpu and mem, and
// returns its name.
func node(t *testing.T, c client.Client, ns, cpu, mem string) string {
	t.Helper()
	ctx := context.Background()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: ns}}
	require.NoError(t, c.Create(ctx, n))
	room := quantities("cpu", cpu, "memory", mem, "pods", "110")
	n.Status = corev1.NodeStatus{Capacity: room, Allocatable: room}
	require.NoError(t, c.Status().Update(ctx, n))
	return n.Name
}

// createPods creates pods and writes their status, as a kubelet would.
func createPods(t *testing.T, c client.Client, pods ...corev1.Pod) {
	t.Helper()
	ctx := context.Background()
	for i := range pods {
		p := &pods[i]
		st := p.Status
		require.NoError(t, c.Create(ctx, p))
		p.Status = st
		require.NoError(t, c.Status().Update(ctx, p))
	}
}

// TestNodeHeadroomBlocksAnIncreaseTheNodeCannotHold: the node's room is
// its allocatable less the requests of its pods that have not ended,
// reported requests above the spec's counted as the kubelet counts them.
func TestNodeHeadroomBlocksAnIncreaseTheNodeCannotHold(t *testing.T) {
	c := controlplane.Get(t).Client
	ctx := context.Background()
	// A RuntimeClass whose pods' overhead admission sets, as a sandboxed
	// runtime's: the kubelet counts it, and so does the gate.
	rc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "gates-sandboxed"}, Handler: "kata",
		Overhead: &nodev1.Overhead{PodFixed: quantities("cpu", "250m", "memory", "64Mi")}}
	require.NoError(t, client.IgnoreAlreadyExists(c.Create(ctx, rc)))
	for _, tc := range []struct {
		name   string
		newCPU string
		other  func(*corev1.Pod)
		want   string
	}{
		// 2 − (250m + 1250m) = 500m free; 250m → 1 needs 750m.
		{name: "cpu above the free room", newCPU: "1",
			want: "Node %s: cpu has 500m free (allocatable 2, requested 1500m by 2 pods), the change needs 750m more for pod web-0"},
		{name: "within the free room", newCPU: "750m"},
		// The kubelet still runs the other pod at 1750m (a resize down
		// not yet actuated): 2 − 2 = 0 free.
		{name: "the kubelet's reported requests", newCPU: "500m", other: func(p *corev1.Pod) {
			p.Status.ContainerStatuses[0].Resources.Requests = quantities("cpu", "1750m", "memory", "256Mi")
			p.Status.ContainerStatuses[0].Resources.Limits = quantities("cpu", "1750m", "memory", "256Mi")
		}, want: "Node %s: cpu has 0 free (allocatable 2, requested 2 by 2 pods), the change needs 250m more for pod web-0"},
		{name: "an ended pod holds no room", newCPU: "1", other: func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }},
		// 2 − (250m + 1250m + 250m overhead) = 250m free.
		{name: "a RuntimeClass's overhead", newCPU: "750m", other: func(p *corev1.Pod) { p.Spec.RuntimeClassName = ptr.To(rc.Name) },
			want: "Node %s: cpu has 250m free (allocatable 2, requested 1750m by 2 pods), the change needs 500m more for pod web-0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := kubetest.Namespace(t, c)
			n := node(t, c, ns, "2", "4Gi")
			pods := webPods(ns, n, 1, "250m", "256Mi")
			other := webPods(ns, n, 2, "1250m", "256Mi")[1]
			other.Name, other.Labels = "other", map[string]string{"app": "other"}
			if tc.other != nil {
				tc.other(&other)
			}
			createPods(t, c, pods[0], other)
			b, err := gates.NodeHeadroom{Reader: c}.Check(ctx, webChange(t, ns, 1, v1alpha1.StrategyInPlace, "250m", "256Mi", tc.newCPU, "256Mi", pods...))
			require.NoError(t, err)
			if tc.want == "" {
				assert.Nil(t, b)
				return
			}
			require.NotNil(t, b)
			assert.Equal(t, v1alpha1.ReasonNodeHeadroom, b.Reason)
			assert.Equal(t, sprintf(tc.want, n), b.Message)
		})
	}
}

// TestNodeHeadroomSumsTheWorkloadsPodsOnANode: two pods of the change on
// one node need the sum of their increases.
func TestNodeHeadroomSumsTheWorkloadsPodsOnANode(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	n := node(t, c, ns, "4", "1Gi")
	pods := webPods(ns, n, 2, "500m", "256Mi")
	createPods(t, c, pods...)
	b, err := gates.NodeHeadroom{Reader: c}.Check(context.Background(), webChange(t, ns, 2, v1alpha1.StrategyInPlace, "500m", "256Mi", "500m", "640Mi", pods...))
	require.NoError(t, err)
	require.NotNil(t, b)
	assert.Equal(t, "Node "+n+": memory has 512Mi free (allocatable 1Gi, requested 512Mi by 2 pods), the change needs 768Mi more for pods web-0, web-1", b.Message)
}

// failingReader fails every read: a gate that reads nothing passes.
type failingReader struct{}

func (failingReader) Get(context.Context, client.ObjectKey, client.Object, ...client.GetOption) error {
	return errors.New("no read expected")
}

func (failingReader) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return errors.New("no read expected")
}

// TestNodeHeadroomJudgesInPlaceIncreasesOnly: a Rollout or an in-place
// decrease reads no node; a node that cannot be read is an error, which
// the Checker turns into GateUnavailable for an in-place increase.
func TestNodeHeadroomJudgesInPlaceIncreasesOnly(t *testing.T) {
	ctx := context.Background()
	pods := webPods("shop", "gone", 1, "500m", "256Mi")
	for _, ch := range []*gates.Change{
		webChange(t, "shop", 1, v1alpha1.StrategyRollout, "500m", "256Mi", "4", "4Gi", pods...),
		webChange(t, "shop", 1, v1alpha1.StrategyInPlace, "500m", "256Mi", "250m", "128Mi", pods...),
	} {
		b, err := gates.NodeHeadroom{Reader: failingReader{}}.Check(ctx, ch)
		require.NoError(t, err)
		assert.Nil(t, b)
	}
	c := controlplane.Get(t).Client
	raise := webChange(t, "shop", 1, v1alpha1.StrategyInPlace, "500m", "256Mi", "1", "256Mi", pods...)
	_, err := gates.NodeHeadroom{Reader: c}.Check(ctx, raise)
	require.ErrorContains(t, err, "read Node gone")
	b, err := (&gates.Checker{Gates: []gates.Gate{gates.NodeHeadroom{Reader: c}}}).Check(ctx, raise)
	require.NoError(t, err)
	require.NotNil(t, b)
	assert.Equal(t, v1alpha1.ReasonGateUnavailable, b.Reason)
	assert.Contains(t, b.Message, "the NodeHeadroom gate cannot be evaluated")
}
