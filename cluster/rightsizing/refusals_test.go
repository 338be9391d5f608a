package rightsizing

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/cachestore"
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/kubetest"
)

// TestANewRefusalsFiguresAreReadLive: the leader's cache holds a
// recommendation without its basis, beside the refusals annotation. A
// refusal new to the reconciler is recorded with the basis's figures and
// message, read from the apiserver. When the apiserver's object says
// other refusals, the recommender wrote since: nothing is recorded from
// the stale key, the write brings another pass.
func TestANewRefusalsFiguresAreReadLive(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	ctx := context.Background()
	at := metav1.NewTime(time.Now().Add(-time.Minute).Truncate(time.Second))
	basis := v1alpha1.RecommendationBasis{MadeAt: time.Now().UTC().Truncate(time.Second), Containers: []v1alpha1.ContainerBasis{{Name: "app",
		Refusals: []v1alpha1.RefusalBasis{{Resource: v1alpha1.ResourceMemory, Field: "request", Reason: "OOMKill", Asked: 100 << 20, Held: 356 << 20,
			Observed: 256 << 20, Threshold: 356 << 20, At: &at, Message: "memory request held at 356Mi instead of 100Mi: OOMKill"}}}}}
	raw, err := basis.Encode()
	require.NoError(t, err)
	rsr := kubetest.Recommendation(ns, "web", "web", v1alpha1.StrategyInPlace, "500m", "356Mi")
	rsr.Labels = map[string]string{v1alpha1.RecommendedByLabel: v1alpha1.RecommendedByKerf}
	rsr.Annotations = map[string]string{v1alpha1.RecommendationBasisAnnotation: raw, v1alpha1.RecommendationRefusalsAnnotation: basis.RefusalKeys()}
	require.NoError(t, c.Create(ctx, rsr))

	// What the leader's cache holds of it.
	cachedOf := func(o *v1alpha1.RightsizingRecommendation) *v1alpha1.RightsizingRecommendation {
		got, err := cachestore.Transform(o.DeepCopy())
		require.NoError(t, err)
		return got.(*v1alpha1.RightsizingRecommendation).DeepCopy()
	}
	cached := cachedOf(rsr)
	require.NotContains(t, cached.Annotations, v1alpha1.RecommendationBasisAnnotation)
	r := &Reconciler{Client: c, Live: c, Recorder: events.NewFakeRecorder(100), Metrics: NewMetrics(prometheus.NewRegistry()),
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: time.Now}

	// The apiserver's object moved on: another value held.
	stale := cached.DeepCopy()
	stale.Annotations = map[string]string{v1alpha1.RecommendationRefusalsAnnotation: "app/memory/request/OOMKill/1"}
	require.NoError(t, (&reconcileContext{r: r, rsr: stale, now: time.Now()}).recordRefusals(ctx))
	assert.Empty(t, kubetest.GetRSR(t, c, ns, "web").Status.History, "nothing recorded from a key the apiserver's object no longer has")

	require.NoError(t, (&reconcileContext{r: r, rsr: cached, now: time.Now()}).recordRefusals(ctx))
	got := kubetest.GetRSR(t, c, ns, "web")
	refused := kubetest.HistoryOf(got, v1alpha1.ActionRefused)
	require.Len(t, refused, 1)
	require.Len(t, refused[0].Refusals, 1)
	f := refused[0].Refusals[0]
	assert.Equal(t, v1alpha1.Refusal{Container: "app", Resource: v1alpha1.ResourceMemory, Field: "request", Reason: "OOMKill",
		Asked: 100 << 20, Held: 356 << 20, Observed: "268435456", Threshold: "373293056", At: f.At}, f, "the figures, from the basis read live")
	require.NotNil(t, f.At)
	assert.True(t, f.At.Equal(&at))
	assert.Equal(t, []string{"app: memory request held at 356Mi instead of 100Mi: OOMKill"}, refused[0].Figures)
	assert.NotEmpty(t, got.Status.RecordedRefusals)

	// Once recorded, a pass reads nothing more: its key is recorded.
	again := cachedOf(got)
	r.Live = nil // a read would panic
	require.NoError(t, (&reconcileContext{r: r, rsr: again, now: time.Now()}).recordRefusals(ctx))
	assert.Len(t, kubetest.HistoryOf(kubetest.GetRSR(t, c, ns, "web"), v1alpha1.ActionRefused), 1)
}
