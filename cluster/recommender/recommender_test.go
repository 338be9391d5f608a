package recommender

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
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/signals"
	"github.com/kerf-dev/kerf/test/controlplane"
)

// TestAPassTimesEachOfItsSteps checks kerf_recommender_pass_seconds on a
// real apiserver: a pass with no policy enabling spec.recommend times
// policies and checkpoint only; once one does, a pass times each of its
// six steps once, and every pass its total.
func TestAPassTimesEachOfItsSteps(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := namespace(t, c)
	// The pass lists the policies its reader shows: only the test's
	// namespace, as the leader's cache of --watch-namespaces does, so the
	// recommending policies other tests of the package leave count not.
	nc := client.NewNamespacedClient(c, ns)
	reg := prometheus.NewRegistry()
	r, err := New(nc, nc, []string{ns}, signals.New(), Config{}, nil, reg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)

	require.NoError(t, r.pass(t.Context()))
	assert.Equal(t, map[string]uint64{"policies": 1, "checkpoint": 1, "total": 1}, passSteps(t, reg), "nothing recommended for")

	p := &v1alpha1.RightsizingPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "recommend"}}
	p.Spec.Recommend = &v1alpha1.RecommendSpec{Enabled: true, Interval: &metav1.Duration{Duration: time.Second}}
	require.NoError(t, c.Create(t.Context(), p))
	t.Cleanup(func() { _ = c.Delete(context.Background(), p) })
	require.NoError(t, r.pass(t.Context()))
	assert.Equal(t, map[string]uint64{"policies": 2, "feed": 1, "throttling": 1, "prune": 1, "recommend": 1, "checkpoint": 2, "total": 2},
		passSteps(t, reg), "every step once more")
}

// passSteps is the count of observations of kerf_recommender_pass_seconds
// by step.
func passSteps(t *testing.T, reg *prometheus.Registry) map[string]uint64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]uint64{}
	for _, mf := range mfs {
		if mf.GetName() != "kerf_recommender_pass_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "step" {
					out[lp.GetValue()] = m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	return out
}
