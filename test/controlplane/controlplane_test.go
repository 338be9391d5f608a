package controlplane

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestSmokeTalksToRealAPIServer proves the harness runs the real
// kube-apiserver built by `make deps`: the server reports its version, and a
// namespace and a Deployment written through one client read back through
// another (the kubeconfig the harness wrote).
func TestSmokeTalksToRealAPIServer(t *testing.T) {
	cp := StartForTest(t)
	ctx := context.Background()

	v, err := cp.Clientset.Discovery().ServerVersion()
	require.NoError(t, err)
	assert.Equal(t, KubernetesVersion, v.GitVersion, "server version")

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "smoke"}}
	require.NoError(t, cp.Client.Create(ctx, ns))

	labels := map[string]string{"app": "smoke"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "smoke", Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "kerf.local/kerf-workload:1"}}},
			},
		},
	}
	require.NoError(t, cp.Client.Create(ctx, dep))

	// Read back through the kubeconfig the harness wrote, as a user would.
	raw, err := os.ReadFile(cp.Kubeconfig)
	require.NoError(t, err)
	cfg, err := clientcmd.RESTConfigFromKubeConfig(raw)
	require.NoError(t, err)
	c, err := client.New(cfg, client.Options{Scheme: Scheme})
	require.NoError(t, err)

	var gotNS corev1.Namespace
	require.NoError(t, c.Get(ctx, client.ObjectKey{Name: "smoke"}, &gotNS))
	assert.Equal(t, corev1.NamespaceActive, gotNS.Status.Phase)

	var got appsv1.Deployment
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(dep), &got))
	assert.Equal(t, int32(2), *got.Spec.Replicas)
	assert.Equal(t, "kerf.local/kerf-workload:1", got.Spec.Template.Spec.Containers[0].Image)
	assert.NotEmpty(t, got.UID, "the apiserver assigns a UID")
	// The apiserver's defaulting ran: a strategy was filled in server-side.
	assert.Equal(t, appsv1.RollingUpdateDeploymentStrategyType, got.Spec.Strategy.Type)
}

// TestStopRemovesEverything checks that Stop leaves no directory behind.
func TestStopRemovesEverything(t *testing.T) {
	cp := StartForTest(t)
	dir := cp.Dir()
	_, err := os.Stat(dir)
	require.NoError(t, err)
	require.NoError(t, cp.Stop())
	_, err = os.Stat(dir)
	assert.True(t, os.IsNotExist(err), "control plane directory %s still exists", dir)
}

// TestReapOrphansStopsOnlyTheProcessesOfADeadOwner makes two control plane
// directories, one whose owner is this test and one whose owner is gone (a
// PID that now names another process), each with a long-running process
// that names it, as etcd and kube-apiserver do. Reaping kills the orphan's
// process and removes its directory, and leaves the other alone.
func TestReapOrphansStopsOnlyTheProcessesOfADeadOwner(t *testing.T) {
	tmp := t.TempDir()
	start, err := processStart(os.Getpid())
	require.NoError(t, err)
	plane := func(name string, ownerStart uint64) (string, *exec.Cmd) {
		dir := filepath.Join(tmp, dirPrefix+name)
		require.NoError(t, os.MkdirAll(filepath.Join(dir, "etcd"), 0o700))
		require.NoError(t, os.WriteFile(filepath.Join(dir, ownerFile), fmt.Appendf(nil, "%d %d\n", os.Getpid(), ownerStart), 0o600))
		log := filepath.Join(dir, "etcd", "log")
		require.NoError(t, os.WriteFile(log, nil, 0o600))
		cmd := exec.Command("tail", "-f", log)
		require.NoError(t, cmd.Start())
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
		return dir, cmd
	}
	live, liveProc := plane("live", start)
	// The same PID started at another time: the owner died and its PID
	// was reused.
	orphan, orphanProc := plane("live-not", start+1)

	killed, err := ReapOrphans(tmp)
	require.NoError(t, err)
	assert.Equal(t, []int{orphanProc.Process.Pid}, killed)
	err = orphanProc.Wait()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	assert.Equal(t, syscall.SIGKILL, exit.Sys().(syscall.WaitStatus).Signal())
	_, err = os.Stat(orphan)
	assert.True(t, os.IsNotExist(err), "the orphan's directory is removed")

	_, err = os.Stat(live)
	assert.NoError(t, err, "a control plane in use keeps its directory")
	assert.NoError(t, liveProc.Process.Signal(syscall.Signal(0)), "and its processes")
}
