package scenario

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/internal/sandbox"
	"github.com/kerf-dev/kerf/test/controlplane"
)

func TestMain(m *testing.M) { controlplane.Main(m, controlplane.Hooks{}) }

// twoNodes registers a host node and a VM node (labeled and tainted as
// the sandbox does) and returns their names.
func twoNodes(t *testing.T, c client.Client) (host, vm string) {
	t.Helper()
	host, vm = controlplane.UniqueName("host"), controlplane.UniqueName("vm")
	require.NoError(t, c.Create(t.Context(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: host}}))
	require.NoError(t, c.Create(t.Context(), &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: vm, Labels: map[string]string{sandbox.VMNodeTaint: "true"}},
		Spec:       corev1.NodeSpec{Taints: []corev1.Taint{{Key: sandbox.VMNodeTaint, Value: "true", Effect: corev1.TaintEffectNoSchedule}}},
	}))
	return host, vm
}

func TestPlacePinsToEnvNodeAndToleratesOnlyTheVMNode(t *testing.T) {
	c := controlplane.Get(t).Client
	host, vm := twoNodes(t, c)
	tests := []struct {
		name     string
		node     string
		wantNode string
		tolerate bool
	}{
		{"no node: as today", "", "", false},
		{"the host node", host, host, false},
		{"the VM node", vm, vm, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := &Env{Client: c, Node: tt.node}
			w, err := e.place(t.Context(), OOMWorkload)
			require.NoError(t, err)
			assert.Equal(t, tt.wantNode, w.Node)
			assert.Equal(t, tt.tolerate, w.TolerateVMNode)
			r, err := e.newResult(t.Context(), OOMWorkload)
			require.NoError(t, err)
			if tt.tolerate {
				assert.Equal(t, VMNodeGrace, r.grace, "longer waits on the VM node")
			} else {
				assert.Zero(t, r.grace)
			}
		})
	}
	_, err := (&Env{Client: c, Node: "no-such-node"}).place(t.Context(), OOMWorkload)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no-such-node")
}

func TestKernelLimitsReadsTheHostsFilesOrAsksTheWorkloadOnTheVMNode(t *testing.T) {
	c := controlplane.Get(t).Client
	host, vm := twoNodes(t, c)
	e := &Env{Client: c, CgroupRoot: t.TempDir()}
	pod := func(node string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "0b7f3a39-8e54-4bd6-9c4c-7bfa26f1e0a1"}, Spec: corev1.PodSpec{NodeName: node},
			Status: corev1.PodStatus{QOSClass: corev1.PodQOSBurstable, ContainerStatuses: []corev1.ContainerStatus{{Name: Container, ContainerID: "containerd://" + fixtureID}}}}
	}

	// On the host node: this machine's v1 files, which the fixture root
	// lacks.
	_, err := e.KernelLimits(t.Context(), pod(host), Container)
	require.Error(t, err)
	assert.True(t, restarting(err), "a missing cgroup file is a restarting container: %v", err)
	assert.Contains(t, err.Error(), "memory.limit_in_bytes")

	// On the VM node: the workload's endpoint, which a pod without an IP
	// does not have yet.
	_, err = e.KernelLimits(t.Context(), pod(vm), Container)
	require.Error(t, err)
	assert.True(t, restarting(err), "%v", err)
	assert.Contains(t, err.Error(), "has no IP yet")
	_, err = e.KernelLimits(t.Context(), pod(vm), "sidecar")
	require.Error(t, err)
	assert.False(t, restarting(err))
	assert.Contains(t, err.Error(), `not "sidecar"`)
}

// fixtureID is a containerd container id.
const fixtureID = "4c1f0a3e9b7d2c5a8e6f1b3d7c9a2e4f6b8d0c1e3a5f7b9d2c4e6a8f0b1d3c5e"

func TestAgentPodIsTheOneOnTheWorkloadsNode(t *testing.T) {
	c := controlplane.Get(t).Client
	ctx := t.Context()
	host, vm := twoNodes(t, c)
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: KerfNamespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
	}
	agent := func(name, node, ip string) string {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: KerfNamespace, Name: controlplane.UniqueName(name)},
			Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "agent", Image: "kerf.local/kerf-agent:dev"}}},
		}
		require.NoError(t, c.Create(ctx, p))
		p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip}
		require.NoError(t, c.Status().Update(ctx, p))
		t.Cleanup(func() { _ = c.Delete(context.Background(), p) })
		return p.Name
	}
	// The VM node's agent is listed first (by name).
	onVM, onHost := agent("kerf-agent-a", vm, "10.88.78.10"), agent("kerf-agent-b", host, "10.88.0.10")
	e := &Env{Client: c}

	for node, want := range map[string]string{host: onHost, vm: onVM} {
		p, err := e.AgentPod(ctx, node)
		require.NoError(t, err)
		assert.Equal(t, want, p.Name, "the agent on %s", node)
	}
	// This machine's agent: not the VM node's, whichever is listed first.
	p, err := e.AgentPod(ctx, "")
	require.NoError(t, err)
	assert.Equal(t, onHost, p.Name, "no node given: not the VM node's agent")
	_, err = e.AgentPod(ctx, "elsewhere")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "on node elsewhere")
	assert.Contains(t, err.Error(), onVM+" on "+vm, "names the agents that run")
}
