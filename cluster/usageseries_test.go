package cluster

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/signals"
	"github.com/kerf-dev/kerf/cluster/workload"
	"github.com/kerf-dev/kerf/internal/kube"
	"github.com/kerf-dev/kerf/test/controlplane"
)

var seriesT0 = time.Date(2030, 3, 1, 12, 0, 0, 0, time.UTC)

func minuteOf(t time.Time) int64 { return t.Unix() / 60 }

func TestUsageSeriesKeepsSixHoursOfMinutes(t *testing.T) {
	m0 := minuteOf(seriesT0)
	s := newUsageSeries(m0)
	s.addMemory(m0, 100<<20)
	s.addMemory(m0, 50<<20) // the highest of the minute stays
	s.addCPU(m0, 3, 30)
	s.addCPU(m0+1, 6, 30)
	s.setOOMKills(m0+1, 2)
	s.setOOMKills(m0+1, 1) // a re-read counts once
	s.setThrottled(m0+2, 0)
	pts := s.points()
	require.Len(t, pts, 3)
	assert.Equal(t, seriesT0, pts[0].At)
	assert.Equal(t, int64(100<<20), pts[0].MemoryBytes)
	assert.Equal(t, int64(100), pts[0].CPUMilli, "3 s of CPU over 30 s")
	assert.Equal(t, -1, pts[0].ThrottledPercent, "not read")
	assert.Equal(t, int64(-1), pts[1].MemoryBytes)
	assert.Equal(t, int64(200), pts[1].CPUMilli)
	assert.Equal(t, 2, pts[1].OOMKills)
	assert.Equal(t, 0, pts[2].ThrottledPercent, "read, and none throttled")

	// A minute older than the ring is dropped; six hours on, the first
	// minutes have gone.
	s.addMemory(m0-UsageSeriesPoints, 1<<20)
	assert.Len(t, s.points(), 3)
	s.addMemory(m0+UsageSeriesPoints, 7<<20)
	pts = s.points()
	require.Len(t, pts, 3, "minute m0 fell out of the ring")
	assert.Equal(t, seriesT0.Add(time.Minute), pts[0].At)
	assert.Equal(t, int64(7<<20), pts[2].MemoryBytes)
	// Saturating fields: 7 OOM kills at most, 100% throttled.
	s.setOOMKills(m0+UsageSeriesPoints, 300)
	s.setThrottled(m0+UsageSeriesPoints, 250)
	last := s.points()[2]
	assert.Equal(t, 7, last.OOMKills)
	assert.Equal(t, 100, last.ThrottledPercent)
	assert.Equal(t, int64(7<<20), last.MemoryBytes, "the packed neighbours are untouched")
	// Far on, everything older is cleared.
	s.addMemory(m0+10*UsageSeriesPoints, 9<<20)
	assert.Len(t, s.points(), 1)
}

func TestUsageSeriesCPUIsTheMeanPerPod(t *testing.T) {
	m0 := minuteOf(seriesT0)
	s := newUsageSeries(m0)
	s.addCPU(m0, 6, 30)  // a pod at 200m
	s.addCPU(m0, 12, 30) // another at 400m
	assert.Equal(t, int64(300), s.points()[0].CPUMilli)
	// A reading two minutes late no longer changes the sums.
	s.addCPU(m0+2, 3, 30)
	s.addCPU(m0, 30, 30)
	assert.Equal(t, int64(300), s.points()[0].CPUMilli)
}

// TestUsageSeriesMemoryAtTheCap measures the heap that DefaultUsageSeriesMax
// full series take, as docs/web.md states it.
func TestUsageSeriesMemoryAtTheCap(t *testing.T) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	u := NewUsageSeries(nil, signals.New(), UsageSeriesConfig{}, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	m0 := minuteOf(seriesT0)
	for i := range DefaultUsageSeriesMax {
		k := seriesKey{namespace: fmt.Sprintf("team-payments-%04d", i/10), kind: v1alpha1.KindDeployment,
			name: fmt.Sprintf("checkout-frontend-%04d", i), container: "app"}
		s := newUsageSeries(m0)
		for m := range int64(UsageSeriesPoints) {
			s.addCPU(m0+m, 3, 30)
			s.addMemory(m0+m, 200<<20)
		}
		u.series[k] = s
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	heap := float64(after.HeapAlloc-before.HeapAlloc) / 1e6
	t.Logf("%d full series of %d points: %.1f MB of heap (%.0f B per series)", u.Len(), UsageSeriesPoints, heap, heap*1e6/float64(u.Len()))
	assert.Less(t, heap, 18.0, "docs/web.md states about 16 MB")
	runtime.KeepAlive(u)
}

// TestUsageSeriesBoundAndForgotten feeds a pass on the real control plane:
// a recommended Deployment with two containers gets one series at
// MaxSeries 1, and none once its recommendation is gone.
func TestUsageSeriesBoundAndForgotten(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := namespace(t, c)
	ctx := context.Background()
	dep := deployment(ns, "web", "500m", "256Mi")
	dep.Spec.Template.Spec.Containers = append(dep.Spec.Template.Spec.Containers, corev1.Container{Name: "sidecar", Image: "kerf.local/kerf-workload:dev"})
	require.NoError(t, c.Create(ctx, dep))
	pod := runningPod(t, c, dep)
	rsr := recommendation(ns, "web", "web", v1alpha1.StrategyInPlace, "250m", "128Mi")
	require.NoError(t, c.Create(ctx, rsr))

	sig := signals.New()
	now := time.Now()
	for _, name := range []string{"app", "sidecar"} {
		sig.Usage.Add(signals.UsageSample{PodUID: pod.UID, Container: name, At: now.Add(-time.Second), WorkingSet: 10 << 20})
	}
	// The namespace alone, as a leader's cache limited to it reads: the
	// control plane holds other tests' recommendations.
	nc := client.NewNamespacedClient(c, ns)
	u := NewUsageSeries(nc, sig, UsageSeriesConfig{MaxSeries: 1}, func() time.Time { return now }, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, u.Pass(ctx))
	assert.Equal(t, 1, u.Len(), "the cap holds")
	usage := u.Usage(ns, v1alpha1.KindDeployment, "web")
	require.Len(t, usage, 1)
	assert.Equal(t, "app", usage[0].Container)
	require.Len(t, usage[0].Points, 1)
	assert.Equal(t, int64(10<<20), usage[0].Points[0].MemoryBytes)

	// Stores without usage (a test's kernel only) are not read.
	bare := NewUsageSeries(nc, &signals.Stores{}, UsageSeriesConfig{}, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
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
	ns := namespace(t, c)
	ctx := context.Background()
	for _, name := range []string{"a", "b"} {
		dep := deployment(ns, name, "500m", "256Mi")
		require.NoError(t, c.Create(ctx, dep))
		runningPod(t, c, dep)
		require.NoError(t, c.Create(ctx, recommendation(ns, name, name, v1alpha1.StrategyInPlace, "250m", "128Mi")))
	}
	reads := &deploymentReads{Reader: client.NewNamespacedClient(c, ns)}
	u := NewUsageSeries(reads, signals.New(), UsageSeriesConfig{MaxSeries: 1}, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
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
	l := startLeader(t, namespace(t, c), "a", Config{})
	assert.True(t, workload.IsIndexed(l.usage.client), "the usage series' reader is not marked workload.Indexed")
}

// noRecommendationLists fails every list of recommendations.
type noRecommendationLists struct{ client.Client }

func (c noRecommendationLists) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if _, ok := list.(*v1alpha1.RightsizingRecommendationList); ok {
		return fmt.Errorf("a list of recommendations")
	}
	return c.Client.List(ctx, list, opts...)
}

// TestUsageSeriesReadTheInformersOwnRecommendations: given the cache's
// informer of recommendations (as the leader gives it), a pass reads the
// informer's own recommendations and lists none (at 25,000 a list copied
// each one's struct, every pass); without the informer, it lists them.
func TestUsageSeriesReadTheInformersOwnRecommendations(t *testing.T) {
	_, ns, _ := runningWeb(t)
	ctx := context.Background()
	c := controlplane.Get(t).Client
	require.NoError(t, c.Create(ctx, recommendation(ns, "web", "web", v1alpha1.StrategyInPlace, "250m", "128Mi")))
	m := cachedMapper(t, ns)
	cached, err := client.New(controlplane.Get(t).Config, client.Options{Scheme: kube.Scheme, Cache: &client.CacheOptions{Reader: m.cache}})
	require.NoError(t, err)
	u := NewUsageSeries(workload.Indexed(workload.ReadOnly(noRecommendationLists{cached})), signals.New(), UsageSeriesConfig{}, nil, slog.New(slog.DiscardHandler))
	require.ErrorContains(t, u.Pass(ctx), "a list of recommendations", "without the informer, a pass lists")
	u.recommendations = cachedRecommendations(m.recommendations, noRecommendationLists{cached})
	require.Eventually(t, func() bool {
		require.NoError(t, u.Pass(ctx))
		return u.Len() == 1
	}, 30*time.Second, 50*time.Millisecond, "the web Deployment's container has a series")
	assert.Len(t, u.Usage(ns, v1alpha1.KindDeployment, "web"), 0, "no reading yet")
}
