package forward

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/test/controlplane"
)

// TestTheReleaserLetsGoOfEveryFinalizerAndCountsWhatTheHubNeverHad: with
// cursors left by a forwarder, a pass removes the finalizer of a live and
// of a deleted recommendation (which then goes), counts the deleted one's
// undelivered actions as dropped and the live one's as undelivered, at the
// configured rate; a finalizer added again later goes at the next pass.
func TestTheReleaserLetsGoOfEveryFinalizerAndCountsWhatTheHubNeverHad(t *testing.T) {
	c := controlplane.Get(t).Client
	ctx := context.Background()
	ns := namespace(t)
	live, gone, plain := create(t, ns, "live"), create(t, ns, "gone"), create(t, ns, "plain")
	for _, rsr := range []*v1alpha1.RightsizingRecommendation{live, gone} {
		require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(rsr), rsr))
		rsr.Finalizers = append(rsr.Finalizers, Finalizer, "example.com/other")
		require.NoError(t, c.Update(ctx, rsr))
	}
	at := time.Now().UTC().Truncate(time.Second)
	record(t, ns, "live", 5, at)
	record(t, ns, "gone", 3, at)
	record(t, ns, "plain", 1, at)
	require.NoError(t, c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: CursorConfigMap},
		Data: map[string]string{string(live.UID): "2", string(gone.UID): "1", string(plain.UID): "1"}}))
	require.NoError(t, c.Delete(ctx, gone))

	reg := prometheus.NewRegistry()
	nc := client.NewNamespacedClient(c, ns)
	r := NewReleaser(ReleaseConfig{Namespace: ns, PerSecond: 4, Registerer: reg, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}, nc, nc)
	start := time.Now()
	got, err := r.Pass(ctx)
	require.NoError(t, err)
	assert.Equal(t, Released{Recommendations: 2, Dropped: 2, Undelivered: 3}, got, "gone's seq 2 and 3 dropped; live's 3 to 5 kept")
	assert.Less(t, time.Since(start), 2*time.Second, "two patches fit the burst")
	assert.Equal(t, 2.0, testutil.ToFloat64(r.f.metrics.dropped.WithLabelValues("disabled")))
	assert.Equal(t, 3.0, testutil.ToFloat64(r.f.metrics.undelivered))

	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(live), live))
	assert.Equal(t, []string{"example.com/other"}, live.Finalizers, "only the hub's finalizer goes")
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(gone), gone))
	assert.Equal(t, []string{"example.com/other"}, gone.Finalizers, "the other controller's finalizer still holds it")
	gone.Finalizers = nil
	require.NoError(t, c.Update(ctx, gone))
	require.Eventually(t, func() bool { return apierrors.IsNotFound(c.Get(ctx, client.ObjectKeyFromObject(gone), gone)) },
		10*time.Second, 50*time.Millisecond)
	assert.Equal(t, map[string]string{string(live.UID): "2", string(gone.UID): "1", string(plain.UID): "1"}, cursors(t, ns),
		"the cursors stay: a leader given the hub again resumes from them")

	// A leader with a hub (during a rollout) added it again.
	live.Finalizers = append(live.Finalizers, Finalizer)
	require.NoError(t, c.Update(ctx, live))
	got, err = r.Pass(ctx)
	require.NoError(t, err)
	assert.Equal(t, Released{Recommendations: 1, Undelivered: 3}, got)
	got, err = r.Pass(ctx)
	require.NoError(t, err)
	assert.Equal(t, Released{Undelivered: 3}, got, "nothing left to release")
	assert.Equal(t, 2.0, testutil.ToFloat64(r.f.metrics.dropped.WithLabelValues("disabled")), "counted once")
}

// TestAddingTheFinalizerLeavesTheReadObjectAsItWas: the passes read the
// cache's own recommendations, not copies, so the finalizer is added in a
// new slice: the read object's finalizers stay as they were even when
// their slice has room to grow (append would have written into it).
func TestAddingTheFinalizerLeavesTheReadObjectAsItWas(t *testing.T) {
	ns := namespace(t)
	f := &Forwarder{client: client.NewNamespacedClient(controlplane.Get(t).Client, ns)}
	fins := make([]string, 1, 4)
	fins[0] = "example.com/other"
	// None such in ns: the patch finds nothing, which patchFinalizers
	// takes as done.
	rsr := &v1alpha1.RightsizingRecommendation{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "absent", Finalizers: fins}}
	require.NoError(t, f.ensureFinalizer(context.Background(), rsr))
	assert.Equal(t, []string{"example.com/other"}, rsr.Finalizers)
	assert.Empty(t, fins[:2][1], "nothing was written past the read object's finalizers")
}

// TestAPassReadsTheConfiguredRecommendations: given a source of
// recommendations (the leader's reads its cache's own objects), a pass
// reads them from it and lists none.
func TestAPassReadsTheConfiguredRecommendations(t *testing.T) {
	c := controlplane.Get(t).Client
	ctx := context.Background()
	ns := namespace(t)
	held := create(t, ns, "held")
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(held), held))
	held.Finalizers = append(held.Finalizers, Finalizer)
	require.NoError(t, c.Update(ctx, held))

	asked := 0
	source := func(ctx context.Context) ([]*v1alpha1.RightsizingRecommendation, error) {
		asked++
		var rsr v1alpha1.RightsizingRecommendation
		err := c.Get(ctx, client.ObjectKeyFromObject(held), &rsr)
		return []*v1alpha1.RightsizingRecommendation{&rsr}, err
	}
	r := NewReleaser(ReleaseConfig{Namespace: ns, Registerer: prometheus.NewRegistry(), Log: slog.New(slog.DiscardHandler),
		Recommendations: source}, noRecommendationLists{c}, c)
	got, err := r.Pass(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, asked)
	assert.Equal(t, 1, got.Recommendations, "the source's recommendation released")
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(held), held))
	assert.NotContains(t, held.Finalizers, Finalizer)
}

// noRecommendationLists fails every list of recommendations.
type noRecommendationLists struct{ client.Client }

func (c noRecommendationLists) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if _, ok := list.(*v1alpha1.RightsizingRecommendationList); ok {
		return errors.New("a list of recommendations")
	}
	return c.Client.List(ctx, list, opts...)
}
