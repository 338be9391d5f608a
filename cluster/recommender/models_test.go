package recommender

import (
	"io"
	"log/slog"
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/utils/ptr"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/recommend"
	"github.com/kerf-dev/kerf/cluster/signals"
	"github.com/kerf-dev/kerf/cluster/workload"
)

// TestRecommenderBoundsItsModels checks the bound of distinct parameter
// sets: beyond maxModels a policy's parameters get the defaults' model,
// said with fellBack; the models no workload uses are dropped, at most
// once a pass, to make room.
func TestRecommenderBoundsItsModels(t *testing.T) {
	r, err := New(nil, nil, nil, signals.New(), Config{}, nil, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	r.tick = 1
	spec := func(pct int32) v1alpha1.PolicySpec {
		return v1alpha1.PolicySpec{Recommend: &v1alpha1.RecommendSpec{Enabled: true, CPUPercentile: ptr.To(pct)}}
	}
	// The defaults' model and 63 others: a workload uses each.
	for pct := int32(1); pct < maxModels; pct++ {
		m, fellBack, err := r.model(spec(pct))
		require.NoError(t, err)
		require.False(t, fellBack, "model %d of %d", pct+1, maxModels)
		assert.InDelta(t, float64(pct)/100, m.Params().CPUPercentile, 1e-9)
		r.workloads[workloadRef(pct)] = &trackedWorkload{model: m}
	}
	require.Len(t, r.models, maxModels)
	again, fellBack, err := r.model(spec(5))
	require.NoError(t, err)
	assert.False(t, fellBack)
	assert.Same(t, r.workloads[workloadRef(5)].model, again, "the same parameters, the same model")

	m, fellBack, err := r.model(spec(80))
	require.NoError(t, err)
	assert.True(t, fellBack, "one model too many")
	assert.Same(t, r.base, m)
	require.Len(t, r.models, maxModels)

	// A workload forgotten frees its model, from the next pass on.
	delete(r.workloads, workloadRef(7))
	_, fellBack, _ = r.model(spec(81))
	assert.True(t, fellBack, "pruned at most once a pass")
	r.tick++
	m, fellBack, err = r.model(spec(81))
	require.NoError(t, err)
	assert.False(t, fellBack)
	assert.InDelta(t, 0.81, m.Params().CPUPercentile, 1e-9)
	assert.Len(t, r.models, maxModels)
	assert.Contains(t, r.models, r.workloads[workloadRef(8)].model.Params(), "models in use are kept")
	assert.NotContains(t, r.models, spec7Params(t, r), "the unused one was dropped")
}

// spec7Params is the parameters of the policy with cpuPercentile 7.
func spec7Params(t *testing.T, r *Loop) recommend.Params {
	t.Helper()
	p, err := r.params(v1alpha1.PolicySpec{Recommend: &v1alpha1.RecommendSpec{Enabled: true, CPUPercentile: ptr.To[int32](7)}})
	require.NoError(t, err)
	return p
}

// workloadRef is the test's Deployment number i.
func workloadRef(i int32) workload.Ref {
	return workload.Ref{Kind: v1alpha1.KindDeployment, Namespace: "ns", Name: "w" + strconv.Itoa(int(i))}
}
