package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/cluster"
	"github.com/kerf-dev/kerf/cluster/fence"
	"github.com/kerf-dev/kerf/cluster/recommender"
	"github.com/kerf-dev/kerf/cluster/rightsizing"
	"github.com/kerf-dev/kerf/cluster/signals"
	"github.com/kerf-dev/kerf/test/controlplane"
)

func TestMain(m *testing.M) { controlplane.Main(m, controlplane.Hooks{}) }

// TestSIGTERMReleasesTheLease runs kerf-leader's run as the binary does,
// on a real apiserver; once it holds the Lease, a SIGTERM (to the test
// process: run's signal handling catches it, as the kubelet's in a pod)
// makes run return nil with the Lease released, so that the standby takes
// over within its retry period instead of waiting for the lease to expire.
func TestSIGTERMReleasesTheLease(t *testing.T) {
	cp := controlplane.Get(t)
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "kerf-leader-cmd-"}}
	require.NoError(t, cp.Client.Create(ctx, ns))
	cfg := cluster.Config{Namespace: ns.Name, LeaseName: "kerf-leader", Identity: "kerf-leader-0",
		WatchNamespaces: []string{ns.Name}, Registry: prometheus.NewRegistry(), Signals: signals.New()}
	done := make(chan error, 1)
	go func() {
		done <- run(slog.New(slog.NewTextHandler(io.Discard, nil)), cp.Kubeconfig, "127.0.0.1:0", "", defaultQPS, defaultBurst, cfg)
	}()

	lease := &coordinationv1.Lease{}
	key := client.ObjectKey{Namespace: ns.Name, Name: "kerf-leader"}
	require.Eventually(t, func() bool {
		return cp.Client.Get(ctx, key, lease) == nil && lease.Spec.HolderIdentity != nil && *lease.Spec.HolderIdentity == "kerf-leader-0"
	}, 30*time.Second, 50*time.Millisecond, "kerf-leader never took the Lease")

	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGTERM))
	select {
	case err := <-done:
		require.NoError(t, err, "a SIGTERM is a clean stop")
	case <-time.After(30 * time.Second):
		t.Fatal("kerf-leader did not stop on SIGTERM")
	}
	require.NoError(t, cp.Client.Get(ctx, key, lease))
	assert.Empty(t, ptr.Deref(lease.Spec.HolderIdentity, ""), "the Lease was released")
	assert.Equal(t, int32(1), ptr.Deref(lease.Spec.LeaseDurationSeconds, 0), "a released Lease lasts a second")
}

// TestHubFlagsAreCheckedBeforeTheLeaderStarts: a plaintext URL, a missing
// token file or cluster name, and a CA file without a certificate are
// refused at start, with the flag named.
func TestHubFlagsAreCheckedBeforeTheLeaderStarts(t *testing.T) {
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(token, []byte("kerf_x_y\n"), 0o600))
	notPEM := filepath.Join(dir, "ca.crt")
	require.NoError(t, os.WriteFile(notPEM, []byte("not a certificate"), 0o600))

	for _, c := range []struct{ url, token, ca, cluster, want string }{
		{"http://hub:9443", token, "", "east", "must be https"},
		{"https://hub:9443", "", "", "east", "token file"},
		{"https://hub:9443", filepath.Join(dir, "missing"), "", "east", "--hub-token-file"},
		{"https://hub:9443", token, "", "", "cluster name"},
		{"https://hub:9443", token, notPEM, "east", "no PEM certificate"},
	} {
		_, err := hubConfig(c.url, c.token, c.ca, c.cluster)
		require.Error(t, err, "%+v", c)
		assert.Contains(t, err.Error(), c.want)
	}
	hc, err := hubConfig("https://hub:9443", token, "", "east")
	require.NoError(t, err)
	assert.Equal(t, "east", hc.Cluster)
	assert.Nil(t, hc.TLS, "the system's roots")
}

// TestRollbackWorkersAreBounded: --rollback-workers outside 0 to 64 is
// refused naming the flag; 0 keeps none.
func TestRollbackWorkersAreBounded(t *testing.T) {
	for _, n := range []int{-1, maxRollbackWorkers + 1} {
		_, err := rollbackWorkersOf(n)
		require.Error(t, err, "%d", n)
		assert.Contains(t, err.Error(), fmt.Sprintf("--rollback-workers %d: must be between 0 and %d", n, maxRollbackWorkers))
	}
	n, err := rollbackWorkersOf(0)
	require.NoError(t, err)
	assert.Equal(t, rightsizing.NoRollbackWorkers, n)
	n, err = rollbackWorkersOf(2)
	require.NoError(t, err)
	assert.Equal(t, 2, n)
}

// TestRecommenderWorkersAreBounded: --recommender-workers outside 1 to
// 64 is refused naming the flag.
func TestRecommenderWorkersAreBounded(t *testing.T) {
	for _, n := range []int{0, -1, recommender.MaxWorkers + 1} {
		_, err := recommenderWorkersOf(n)
		require.Error(t, err, "%d", n)
		assert.Contains(t, err.Error(), fmt.Sprintf("--recommender-workers %d: must be between 1 and %d", n, recommender.MaxWorkers))
	}
	n, err := recommenderWorkersOf(recommender.MaxWorkers)
	require.NoError(t, err)
	assert.Equal(t, recommender.MaxWorkers, n)
}

// TestApplyYieldIsNotNegative: a negative --apply-yield is refused naming
// the flag; 0 turns the yield off.
func TestApplyYieldIsNotNegative(t *testing.T) {
	_, err := applyYieldOf(-time.Second)
	require.ErrorContains(t, err, "--apply-yield -1s: must not be negative")
	d, err := applyYieldOf(0)
	require.NoError(t, err)
	assert.Equal(t, fence.NoApplyYield, d)
	d, err = applyYieldOf(500 * time.Millisecond)
	require.NoError(t, err)
	assert.Equal(t, 500*time.Millisecond, d)
}

// TestProtectedNamespacesAreNamespaceNames: --protected-namespaces gives
// its names, none when empty, and refuses one that is not a namespace
// name, naming the flag.
func TestProtectedNamespacesAreNamespaceNames(t *testing.T) {
	names, err := protectedNamespacesOf("kube-system, shop")
	require.NoError(t, err)
	assert.Equal(t, []string{"kube-system", "shop"}, names)
	names, err = protectedNamespacesOf("")
	require.NoError(t, err)
	assert.Empty(t, names, "an empty value protects none")
	_, err = protectedNamespacesOf("kube-system,Shop_1")
	require.ErrorContains(t, err, `--protected-namespaces: "Shop_1" is not a namespace name`)
}
