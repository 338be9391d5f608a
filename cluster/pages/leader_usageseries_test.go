package pages_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster"
	"github.com/kerf-dev/kerf/cluster/pages"
	"github.com/kerf-dev/kerf/cluster/signals"
	"github.com/kerf-dev/kerf/cluster/workload"
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/kubetest"
	"github.com/kerf-dev/kerf/test/leadertest"
)

// TestUsageSeriesBoundAndForgotten feeds a pass on the real control plane:
// a recommended Deployment with two containers gets one series at
// MaxSeries 1, and none once its recommendation is gone.
func TestUsageSeriesBoundAndForgotten(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	ctx := context.Background()
	dep := kubetest.Deployment(ns, "web", "500m", "256Mi")
	dep.Spec.Template.Spec.Containers = append(dep.Spec.Template.Spec.Containers, corev1.Container{Name: "sidecar", Image: "kerf.local/kerf-workload:dev"})
	require.NoError(t, c.Create(ctx, dep))
	pod := kubetest.RunningPod(t, c, dep)
	rsr := kubetest.Recommendation(ns, "web", "web", v1alpha1.StrategyInPlace, "250m", "128Mi")
	require.NoError(t, c.Create(ctx, rsr))

	sig := signals.New()
	now := time.Now()
	for _, name := range []string{"app", "sidecar"} {
		sig.Usage.Add(signals.UsageSample{PodUID: pod.UID, Container: name, At: now.Add(-time.Second), WorkingSet: 10 << 20})
	}
	// The namespace alone, as a leader's cache limited to it reads: the
	// control plane holds other tests' recommendations.
	nc := client.NewNamespacedClient(c, ns)
	u := pages.NewUsageSeries(nc, sig, pages.UsageSeriesConfig{MaxSeries: 1}, func() time.Time { return now }, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, u.Pass(ctx))
	assert.Equal(t, 1, u.Len(), "the cap holds")
	usage := u.Usage(ns, v1alpha1.KindDeployment, "web")
	require.Len(t, usage, 1)
	assert.Equal(t, "app", usage[0].Container)
	require.Len(t, usage[0].Points, 1)
	assert.Equal(t, int64(10<<20), usage[0].Points[0].MemoryBytes)

	// Stores without usage (a test's kernel only) are not read.
	bare := pages.NewUsageSeries(nc, &signals.Stores{}, pages.UsageSeriesConfig{}, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, bare.Pass(ctx))
	assert.Equal(t, 2, bare.Len(), "a series per container, with no point")
	assert.Empty(t, bare.Usage(ns, v1alpha1.KindDeployment, "web"))

	require.NoError(t, c.Delete(ctx, rsr))
	require.NoError(t, u.Pass(ctx))
	assert.Zero(t, u.Len(), "a workload no recommendation targets has no series")
}

// TestUsageSeriesReadNoWorkloadWithoutRoom: once the series hold their
// maximum, a workload with none is not read (its Deployment, ReplicaSets
// and pods), as none could be made for it; a workload with a series still
// is. Before, every recommended workload was read each pass: at 25,000
// workloads and the default cap, four fifths of the reads for nothing.
func TestUsageSeriesReadNoWorkloadWithoutRoom(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	ctx := context.Background()
	for _, name := range []string{"a", "b"} {
		dep := kubetest.Deployment(ns, name, "500m", "256Mi")
		require.NoError(t, c.Create(ctx, dep))
		kubetest.RunningPod(t, c, dep)
		require.NoError(t, c.Create(ctx, kubetest.Recommendation(ns, name, name, v1alpha1.StrategyInPlace, "250m", "128Mi")))
	}
	reads := &deploymentReads{Reader: client.NewNamespacedClient(c, ns)}
	u := pages.NewUsageSeries(reads, signals.New(), pages.UsageSeriesConfig{MaxSeries: 1}, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, u.Pass(ctx))
	require.Equal(t, 1, u.Len(), "the cap holds")
	assert.Equal(t, []string{"a"}, reads.names, "the first workload fills the table; the second is not read")
	require.NoError(t, u.Pass(ctx))
	assert.Equal(t, []string{"a", "a"}, reads.names, "the workload with a series is read again, the other is not")
	assert.Len(t, u.Usage(ns, v1alpha1.KindDeployment, "a"), 0, "no readings, no points")
	assert.Equal(t, 1, u.Len())
}

// deploymentReads records the Deployments read through it.
type deploymentReads struct {
	client.Reader
	names []string
}

func (r *deploymentReads) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*appsv1.Deployment); ok {
		r.names = append(r.names, key.Name)
	}
	return r.Reader.Get(ctx, key, obj, opts...)
}

// TestTheLeadersUsageSeriesReadPodsThroughTheIndex checks the leader's
// wiring: its series read each workload's pods and ReplicaSets through
// the cache's controller index. Read through the bare cache client, every
// pass listed each workload's namespace and matched the labels of all its
// pods, half the leader's CPU at 10,000 workloads (docs/performance.md).
func TestTheLeadersUsageSeriesReadPodsThroughTheIndex(t *testing.T) {
	c := controlplane.Get(t).Client
	l := leadertest.StartReplica(t, kubetest.Namespace(t, c), "a", cluster.Config{})
	assert.True(t, workload.IsIndexed(l.UsageSeries().Reader()), "the usage series' reader is not marked workload.Indexed")
}
