package forward

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hubv1 "github.com/kerf-dev/kerf/api/hub/v1"
	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/hub/store"
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/hubtest"
)

// applied records an applied action that moved the container app's CPU
// request from old to new, as the leader's record does.
func applied(t *testing.T, ns, name, old, new string, at time.Time) {
	t.Helper()
	c := controlplane.Get(t).Client
	var rsr v1alpha1.RightsizingRecommendation
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &rsr))
	seq := int64(len(rsr.Status.History) + 1)
	rsr.Status.History = append(rsr.Status.History, v1alpha1.Action{Seq: seq, Time: metav1.NewTime(at), Type: v1alpha1.ActionApplied, Reason: "Rollout",
		Resources: []v1alpha1.ResourceName{v1alpha1.ResourceCPU},
		Containers: []v1alpha1.ContainerValueChange{{Name: "app",
			Old: v1alpha1.Resources{Requests: &v1alpha1.ResourceValues{CPU: ptr.To(resource.MustParse(old))}},
			New: v1alpha1.Resources{Requests: &v1alpha1.ResourceValues{CPU: ptr.To(resource.MustParse(new))}}}}})
	rsr.Status.Phase = v1alpha1.PhaseWatching
	require.NoError(t, c.Status().Update(context.Background(), &rsr))
}

// recommend sets the recommendation's CPU request for app.
func recommend(t *testing.T, ns, name, cpu string) {
	t.Helper()
	c := controlplane.Get(t).Client
	var rsr v1alpha1.RightsizingRecommendation
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &rsr))
	rsr.Spec.Containers[0].Requests.CPU = ptr.To(resource.MustParse(cpu))
	require.NoError(t, c.Update(context.Background(), &rsr))
}

// TestTheLeaderSendsItsSavingsToTheHubOnChangeAndPeriodically runs the
// forwarder against a real hub: the hub stores the leader's
// per-namespace savings (manifest, in force, recommended) with the
// report's time; an unchanged summary is not sent again before the
// heartbeat, a changed one at the next check; a hub that is down is
// tried again at the next check, and a refusal is counted.
func TestTheLeaderSendsItsSavingsToTheHubOnChangeAndPeriodically(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *hubtest.Hub) {
		ctx := context.Background()
		ns := namespace(t)
		now := time.Now().UTC().Truncate(time.Second)
		create(t, ns, "web") // recommends 250m
		applied(t, ns, "web", "500m", "300m", now.Add(-time.Hour))
		create(t, ns, "idle") // never applied: not counted
		f := forwarder(t, h, ns, func(c *Config) { c.Now = func() time.Time { return now } })
		sent := func(result string) float64 { return testutil.ToFloat64(f.metrics.savings.WithLabelValues(result)) }
		stored := func() []store.NamespaceSavings {
			t.Helper()
			got, err := h.Store.Savings(ctx, "east", "")
			require.NoError(t, err)
			return got
		}
		figures := func(recommended int64) hubv1.NamespaceSavings {
			return hubv1.NamespaceSavings{Namespace: ns, Workloads: 2, Unrecorded: 3,
				Manifest: hubv1.Amounts{CPUMillis: 500}, InForce: hubv1.Amounts{CPUMillis: 300}, Recommended: hubv1.Amounts{CPUMillis: recommended}}
		}

		_, err := f.Pass(ctx)
		require.NoError(t, err)
		assert.Equal(t, []store.NamespaceSavings{{Cluster: "east", Reported: now, NamespaceSavings: figures(250)}}, stored())
		assert.Equal(t, 1.0, sent("delivered"))

		// Unchanged: not sent again before the heartbeat.
		now = now.Add(time.Minute)
		_, err = f.Pass(ctx)
		require.NoError(t, err)
		assert.Equal(t, 1.0, sent("delivered"))

		// A new recommendation: sent at the next check.
		recommend(t, ns, "web", "200m")
		now = now.Add(10 * time.Second)
		_, err = f.Pass(ctx)
		require.NoError(t, err)
		assert.Equal(t, 1.0, sent("delivered"), "within SavingsEvery of the last check")
		now = now.Add(30 * time.Second)
		_, err = f.Pass(ctx)
		require.NoError(t, err)
		assert.Equal(t, 2.0, sent("delivered"))
		assert.Equal(t, []store.NamespaceSavings{{Cluster: "east", Reported: now, NamespaceSavings: figures(200)}}, stored())

		// The heartbeat: the same figures, a new time.
		now = now.Add(5 * time.Minute)
		_, err = f.Pass(ctx)
		require.NoError(t, err)
		assert.Equal(t, 3.0, sent("delivered"))
		assert.Equal(t, now, stored()[0].Reported)

		// The hub is down: failed, tried again at the next check.
		h.Stop()
		recommend(t, ns, "web", "150m")
		now = now.Add(31 * time.Second)
		_, _ = f.Pass(ctx)
		assert.Equal(t, 1.0, sent("failed"))
		h.Up(t)
		now = now.Add(31 * time.Second)
		_, err = f.Pass(ctx)
		require.NoError(t, err)
		assert.Equal(t, 4.0, sent("delivered"))
		assert.Equal(t, []store.NamespaceSavings{{Cluster: "east", Reported: now, NamespaceSavings: figures(150)}}, stored())

		// Removed from the hub: refused, counted, and the hub keeps none.
		_, err = h.Store.RemoveCluster(ctx, "east", false)
		require.NoError(t, err)
		recommend(t, ns, "web", "100m")
		now = now.Add(31 * time.Second)
		_, _ = f.Pass(ctx)
		assert.Equal(t, 1.0, sent("refused"))
		assert.Empty(t, stored())
	})
}

// TestSavingsReportLeavesOutRecommendationsBeingDeleted: a recommendation
// with a deletion time is gone from the leader's own figures, so from
// the hub's too.
func TestSavingsReportLeavesOutRecommendationsBeingDeleted(t *testing.T) {
	now := time.Date(2030, 3, 1, 12, 0, 0, 0, time.UTC)
	rec := func(ns string, deleting bool) *v1alpha1.RightsizingRecommendation {
		r := &v1alpha1.RightsizingRecommendation{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"}}
		if deleting {
			r.DeletionTimestamp = ptr.To(metav1.NewTime(now))
		}
		return r
	}
	got := SavingsReport("east", []*v1alpha1.RightsizingRecommendation{rec("shop", false), rec("gone", true), nil}, now)
	assert.Equal(t, hubv1.SavingsReport{Cluster: "east", Time: metav1.NewTime(now), Namespaces: []hubv1.NamespaceSavings{{Namespace: "shop", Workloads: 1}}}, got)
}
