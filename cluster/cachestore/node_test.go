package cachestore

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestANodeKeepsItsAllocatableOnly: of a Node's status the cache keeps
// what the NodeHeadroom gate reads, its capacity and allocatable, and
// drops the images, the largest part; a second Transform changes nothing.
func TestANodeKeepsItsAllocatableOnly(t *testing.T) {
	room := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("16Gi")}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", Labels: map[string]string{"zone": "a"}},
		Spec: corev1.NodeSpec{Unschedulable: true},
		Status: corev1.NodeStatus{Capacity: room, Allocatable: room,
			Images:     []corev1.ContainerImage{{Names: []string{"registry.k8s.io/pause:3.10"}, SizeBytes: 1 << 20}},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
			Addresses:  []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}}}}
	obj, err := Transform(n.DeepCopy())
	require.NoError(t, err)
	got, ok := obj.(*corev1.Node)
	require.True(t, ok, "a Node stays a Node: %T", obj)
	assert.Equal(t, corev1.NodeStatus{Capacity: room, Allocatable: room}, got.Status)
	assert.Equal(t, n.ObjectMeta, got.ObjectMeta)
	assert.Equal(t, n.Spec, got.Spec)
	again, err := Transform(got.DeepCopy())
	require.NoError(t, err)
	assert.Equal(t, got, again)
}

// TestPodNodeNameReadsBothForms: the pods-by-node index reads the node of
// a cachedPod and of a whole pod.
func TestPodNodeNameReadsBothForms(t *testing.T) {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"}, Spec: corev1.PodSpec{NodeName: "node-1"}}
	cached, err := Transform(p.DeepCopy())
	require.NoError(t, err)
	for _, o := range []any{p, cached} {
		name, ok := PodNodeName(o)
		assert.True(t, ok)
		assert.Equal(t, "node-1", name)
	}
	_, ok := PodNodeName(&corev1.Node{})
	assert.False(t, ok)
}
