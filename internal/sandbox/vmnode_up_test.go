package sandbox

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// TestVMNodeJoinsAndDownRemovesIt brings the sandbox up with its VM node:
// the guest's kubelet registers on the cgroup v2 kernel with its taint and
// label after its first boot panicked (VMPanicOnceEnv: Up boots it again,
// as after a lockup), runs a pod that tolerates the taint (the apiserver reads its logs
// through the guest kubelet's serving certificate), while a pod that does
// not lands on the host node. Down stops QEMU and removes the tap and its
// route.
func TestVMNodeJoinsAndDownRemovesIt(t *testing.T) {
	if os.Geteuid() != 0 {
		skipOrFail(t, "kerf-sandbox needs root (mounts, cgroups, bridge, iptables, tap)")
	}
	r, err := resolve(Options{StateDir: "/var/tmp/x", VMNode: true})
	if err != nil {
		skipOrFail(t, "the VM node cannot run here: %v", err)
	}
	unlock, err := Lock(t.Context())
	require.NoError(t, err)
	t.Cleanup(unlock)
	if err := checkPorts(); err != nil {
		skipOrFail(t, "another sandbox seems to run on this machine: %v", err)
	}
	stateDir, err := os.MkdirTemp("/var/tmp", "kerf-sandbox-vm-test-")
	require.NoError(t, err)
	require.NoError(t, os.Remove(stateDir))
	log := slog.New(slog.NewTextHandler(testLog{t}, nil))
	t.Cleanup(func() { _ = Down(context.Background(), stateDir, log) })

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	t.Setenv(VMPanicOnceEnv, "1")
	began := time.Now()
	c, err := Up(ctx, Options{StateDir: stateDir, PauseImage: writePauseArchive(t, t.TempDir()), Log: log, VMNode: true})
	require.NoError(t, err)
	t.Logf("FIGURE Up with the VM node (cold, its first boot panicking): %s", seconds(time.Since(began)))
	require.Equal(t, VMNodeName, c.VMNode)
	console, err := os.ReadFile(layout{state: stateDir}.logFile(vmComponent))
	require.NoError(t, err)
	boots := strings.Split(string(console), "vmnode-mark panic-once")
	require.Len(t, boots, 2, "the guest panicked once:\n%s", console)
	assert.Contains(t, boots[1], panicMarker+"sysrq triggered crash")
	assert.Contains(t, boots[1], "vmnode-mark node-registered", "the second boot registered the node")

	node, err := c.Clientset.CoreV1().Nodes().Get(ctx, VMNodeName, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, r.vmKernel.release, node.Status.NodeInfo.KernelVersion, "the guest runs the kernel of bin/vm")
	assert.Equal(t, "true", node.Labels[VMNodeTaint])
	assert.Contains(t, node.Spec.Taints, corev1.Taint{Key: VMNodeTaint, Value: "true", Effect: corev1.TaintEffectNoSchedule})
	st, err := Status(ctx, stateDir)
	require.NoError(t, err)
	assert.True(t, st.Healthy(), "status:\n%s", st)
	assert.Equal(t, VMNodeName, st.VMNode)
	assert.Contains(t, st.String(), "node "+VMNodeName)

	pause := func(name string, onVM bool) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
			Spec: corev1.PodSpec{
				Containers:                    []corev1.Container{{Name: "pause", Image: PauseImageRef, ImagePullPolicy: corev1.PullNever}},
				TerminationGracePeriodSeconds: ptr.To[int64](1),
			},
		}
		if onVM {
			p.Spec.NodeSelector = map[string]string{VMNodeTaint: "true"}
			p.Spec.Tolerations = []corev1.Toleration{{Key: VMNodeTaint, Operator: corev1.TolerationOpExists}}
		}
		_, err := c.Clientset.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{})
		require.NoError(t, err)
		return p
	}
	pause("on-vm", true)
	pause("anywhere", false)
	waitCtx, waitCancel := context.WithTimeout(ctx, 5*time.Minute)
	defer waitCancel()
	onVM, err := c.WaitPodRunning(waitCtx, "default", "on-vm")
	require.NoError(t, err)
	assert.Equal(t, VMNodeName, onVM.Spec.NodeName)
	assert.Equal(t, VMNodeIP, onVM.Status.HostIP)
	assert.True(t, strings.HasPrefix(onVM.Status.PodIP, "10.88.78."), "pod IP %s in %s", onVM.Status.PodIP, VMPodCIDR)
	_, err = c.Clientset.CoreV1().Pods("default").GetLogs("on-vm", &corev1.PodLogOptions{}).DoRaw(ctx)
	assert.NoError(t, err, "pod logs through the guest's kubelet")
	anywhere, err := c.WaitPodRunning(waitCtx, "default", "anywhere")
	require.NoError(t, err)
	assert.Equal(t, c.NodeName, anywhere.Spec.NodeName, "a pod without the toleration stays off the VM node")

	qemu := readPID(layout{state: stateDir}, vmComponent)
	require.True(t, owned(qemu, qemuBinary, stateDir), "QEMU (pid %d) is the sandbox's", qemu)
	require.NoError(t, Down(ctx, stateDir, log))
	assert.False(t, owned(qemu, qemuBinary, stateDir), "QEMU stopped")
	assert.False(t, linkExists(VMTap), "tap %s deleted", VMTap)
	routes, err := exec.Command("ip", "route", "show", VMPodCIDR).Output()
	require.NoError(t, err)
	assert.Empty(t, strings.TrimSpace(string(routes)), "route to %s deleted", VMPodCIDR)
}
