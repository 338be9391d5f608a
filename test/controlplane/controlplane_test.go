package controlplane

import (
	"context"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/internal/kube"
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
	assert.Equal(t, kube.KubernetesVersion, v.GitVersion, "server version")

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
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "kerf.local/kerf-workload:dev"}}},
			},
		},
	}
	require.NoError(t, cp.Client.Create(ctx, dep))

	// Read back through the kubeconfig the harness wrote, as a user would.
	raw, err := os.ReadFile(cp.Kubeconfig)
	require.NoError(t, err)
	cfg, err := clientcmd.RESTConfigFromKubeConfig(raw)
	require.NoError(t, err)
	c, err := client.New(cfg, client.Options{Scheme: kube.Scheme})
	require.NoError(t, err)

	var gotNS corev1.Namespace
	require.NoError(t, c.Get(ctx, client.ObjectKey{Name: "smoke"}, &gotNS))
	assert.Equal(t, corev1.NamespaceActive, gotNS.Status.Phase)

	var got appsv1.Deployment
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(dep), &got))
	assert.Equal(t, int32(2), *got.Spec.Replicas)
	assert.Equal(t, "kerf.local/kerf-workload:dev", got.Spec.Template.Spec.Containers[0].Image)
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
